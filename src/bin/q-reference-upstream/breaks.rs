//! A deliberately broken reference (`--break PROMISE`, repeatable): one switch per promise the
//! contract kit checks (`q-a2a-gateway contract-check`, docs/contract-kit.md), each making
//! exactly that promise false and leaving every other one kept, so a test can show that the kit
//! finds each broken promise by itself. The switches are named like the kit's promises.
//!
//! Nothing is broken unless asked for at start; `/admin/reset` keeps the switches (they belong
//! to the process, not to its state).

use std::time::Duration;

/// One broken promise. Each variant says what this reference then does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Break {
    /// A create checks for a run under its workflow id, then inserts one [`CREATE_RACE`]
    /// later without holding the check: concurrent creates with one workflow id each make a run.
    CreateOnce,
    /// A create with a taken workflow id and a different request answers `200` with the
    /// existing run instead of `409 workflow_id_conflict`.
    CreateConflict,
    /// A lookup by workflow id answers `404 run_not_found` even for a committed run.
    LookupCommitted,
    /// A lookup by workflow id that names no run answers a bare `404` without `run_not_found`.
    LookupAbsent,
    /// `GET /runs/{id}/events` lists the events newest first.
    RunEvents,
    /// The run feed lists each answer's changes newest first.
    RunFeedOrder,
    /// A cancel's change is never appended to the run feed (the run's events still have it).
    RunFeedComplete,
    /// The run feed is served from a copy [`LAGGING_COPY`] behind, which reports its own head
    /// instead of the primary's.
    RunFeedHead,
    /// Once a run feed answer served changes, their cursors are given to other changes, under
    /// the same epoch (a failover that keeps the epoch).
    RunFeedEpoch,
    /// Once a run feed answer served changes, they are discarded, while the feed's `floor`
    /// stays 0 (a compaction that does not raise the floor).
    RunFeedFloor,
    /// Workspace membership and evidence grant changes are not reflected by the access, grant
    /// and create routes: they answer from the fixtures as if nothing changed.
    AccessReflects,
    /// Workspace membership and evidence grant changes are made without their access feed entry.
    AccessFeedComplete,
    /// A membership or evidence grant change is appended to the access feed
    /// [`GRANT_APPLY_DELAY`] before the access and grant routes reflect it (the admin route or
    /// hook that makes it answers once they do).
    AccessFeedAfterApi,
    /// The access feed lists each answer's changes newest first.
    AccessFeedOrder,
    /// The access feed is served from a copy [`LAGGING_COPY`] behind that reports its own head.
    AccessFeedHead,
    /// As [`Break::RunFeedEpoch`], for the access feed.
    AccessFeedEpoch,
    /// As [`Break::RunFeedFloor`], for the access feed.
    AccessFeedFloor,
    /// Every `422 invalid` answer goes out under `400` instead.
    ErrorStatuses,
}

/// How long a [`Break::CreateOnce`] create leaves between its check and its insert: creates
/// sent together all fall inside it.
pub const CREATE_RACE: Duration = Duration::from_millis(300);

/// How far behind the copy of [`Break::RunFeedHead`] and [`Break::AccessFeedHead`] is.
pub const LAGGING_COPY: Duration = Duration::from_secs(1);

/// How long after its feed entry a [`Break::AccessFeedAfterApi`] change takes effect.
pub const GRANT_APPLY_DELAY: Duration = Duration::from_secs(1);

/// The switches a process was started with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Breaks(u32);

impl Breaks {
    pub fn new(breaks: &[Break]) -> Self {
        Breaks(breaks.iter().fold(0, |mask, b| mask | bit(*b)))
    }

    pub fn has(self, b: Break) -> bool {
        self.0 & bit(b) != 0
    }
}

fn bit(b: Break) -> u32 {
    1 << (b as u32)
}

/// What one feed does wrong, if anything: the switches of the run feed or of the access feed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedBreaks {
    pub order: bool,
    pub head: bool,
    pub epoch: bool,
    pub floor: bool,
}

impl Breaks {
    pub fn run_feed(self) -> FeedBreaks {
        FeedBreaks {
            order: self.has(Break::RunFeedOrder),
            head: self.has(Break::RunFeedHead),
            epoch: self.has(Break::RunFeedEpoch),
            floor: self.has(Break::RunFeedFloor),
        }
    }

    pub fn access_feed(self) -> FeedBreaks {
        FeedBreaks {
            order: self.has(Break::AccessFeedOrder),
            head: self.has(Break::AccessFeedHead),
            epoch: self.has(Break::AccessFeedEpoch),
            floor: self.has(Break::AccessFeedFloor),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    fn name(b: Break) -> String {
        b.to_possible_value().unwrap().get_name().to_owned()
    }

    #[test]
    fn the_documented_switches_are_these_with_their_figures() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/upstream-api.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let section = doc
            .split("### A broken reference")
            .nth(1)
            .expect("the section");
        let row = |b: Break| {
            let start = format!("| `{}` | ", name(b));
            section
                .lines()
                .find(|l| l.starts_with(&start))
                .unwrap_or_else(|| panic!("no row for {start}"))
                .to_owned()
        };
        let rows = section
            .lines()
            .filter(|l| l.starts_with("| `") && !l.starts_with("| `--break`"))
            .count();
        assert_eq!(rows, Break::value_variants().len(), "one row per switch");
        for b in Break::value_variants() {
            row(*b);
        }
        let race = format!("{} ms later", CREATE_RACE.as_millis());
        assert!(row(Break::CreateOnce).contains(&race));
        let behind = format!("a copy {} s behind", LAGGING_COPY.as_secs());
        assert!(row(Break::RunFeedHead).contains(&behind));
        assert!(row(Break::AccessFeedHead).contains(&behind));
        let early = format!("access feed {} s before", GRANT_APPLY_DELAY.as_secs());
        assert!(row(Break::AccessFeedAfterApi).contains(&early));
    }

    #[test]
    fn each_switch_is_its_own_bit_and_named_like_the_kits_promise() {
        let all = Break::value_variants();
        assert!(all.len() < 32);
        for b in all {
            let one = Breaks::new(&[*b]);
            assert!(one.has(*b));
            assert_eq!(all.iter().filter(|o| one.has(**o)).count(), 1);
        }
        assert!(all.iter().all(|b| !Breaks::default().has(*b)));
        assert_eq!(name(Break::AccessFeedAfterApi), "access-feed-after-api");
        assert_eq!(name(Break::CreateOnce), "create-once");
        let both = Breaks::new(&[Break::RunFeedHead, Break::AccessFeedFloor]);
        assert_eq!(
            both.run_feed(),
            FeedBreaks {
                head: true,
                ..FeedBreaks::default()
            }
        );
        assert_eq!(
            both.access_feed(),
            FeedBreaks {
                floor: true,
                ..FeedBreaks::default()
            }
        );
    }
}

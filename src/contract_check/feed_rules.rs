//! The feed promises, judged from what the follower read and from a re-read at the end
//! (docs/upstream-api.md, "Where a feed stands"). Pure functions of the reads, so each rule is
//! unit-tested on answers a broken feed would give.
//!
//! - order: within an answer cursors strictly increase, lie above `after` and at or below
//!   `head`, there are at most `limit` of them, and the answer's `cursor` is its last change's
//!   (or `after` when it has none); a run's changes come in its event order.
//! - head: a change the API had already answered is in, or at or below the head of, every read
//!   sent after that answer.
//! - epoch: within one epoch a cursor keeps naming the change it named (the re-read finds the
//!   same change under each cursor the follower saw).
//! - floor: every change above the floor is still served (the re-read finds each one above its
//!   floor), and the floor only rises within an epoch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use super::follower::{Change, Page, Read, Reread};
use super::report::Finding;

/// How many violations a finding names before it counts the rest.
const NAMED: usize = 3;

/// Broken with the first violations, or kept with `kept`, or not checked with `nothing` when
/// there was nothing to judge.
fn conclude(
    mut violations: Vec<String>,
    judged: bool,
    kept: String,
    nothing: &str,
) -> Vec<Finding> {
    let mut seen = HashSet::new();
    violations.retain(|v| seen.insert(v.clone()));
    if !violations.is_empty() {
        let more = violations.len().saturating_sub(NAMED);
        let mut text = violations
            .into_iter()
            .take(NAMED)
            .collect::<Vec<_>>()
            .join("; ");
        if more > 0 {
            text.push_str(&format!("; and {more} more"));
        }
        vec![Finding::Broken(text)]
    } else if judged {
        vec![Finding::Kept(kept)]
    } else {
        vec![Finding::NotChecked(nothing.to_owned())]
    }
}

pub fn order<C: Change>(reads: &[Read<C>]) -> Vec<Finding> {
    let mut violations = Vec::new();
    let (mut answers, mut changes, mut several) = (0usize, 0usize, 0usize);
    // Per run: the event seqs delivered, and the highest.
    let mut delivered: HashSet<(String, u64)> = HashSet::new();
    let mut newest: HashMap<String, u64> = HashMap::new();
    for read in reads {
        let Ok(page) = &read.page else {
            continue;
        };
        answers += 1;
        changes += page.changes.len();
        several += usize::from(page.changes.len() > 1);
        if page.changes.len() > read.limit {
            violations.push(format!(
                "an answer to limit={} carried {} changes",
                read.limit,
                page.changes.len()
            ));
        }
        for pair in page.changes.windows(2) {
            if pair[1].cursor() <= pair[0].cursor() {
                violations.push(format!(
                    "an answer listed cursor {} after cursor {}",
                    pair[1].cursor(),
                    pair[0].cursor()
                ));
            }
        }
        // Bounds and where to continue only mean something while the reader is in place.
        if read.in_place().is_none() {
            continue;
        }
        for change in &page.changes {
            if change.cursor() <= read.after || change.cursor() > page.head {
                violations.push(format!(
                    "cursor {} is outside (after={}, head={}]",
                    change.cursor(),
                    read.after,
                    page.head
                ));
            }
        }
        let last = page.changes.iter().map(Change::cursor).max();
        if page.cursor != last.unwrap_or(read.after) {
            violations.push(match last {
                Some(last) => format!(
                    "an answer's cursor is {} where its last change is {last}",
                    page.cursor
                ),
                None => format!(
                    "an answer with no change has cursor {}, not its after={}",
                    page.cursor, read.after
                ),
            });
        }
        for change in &page.changes {
            let Some((run, seq)) = change.run_seq() else {
                continue;
            };
            if !delivered.insert((run.to_owned(), seq)) {
                continue;
            }
            let highest = newest.entry(run.to_owned()).or_default();
            if seq < *highest {
                violations.push(format!("{run}: seq {seq} came after seq {highest}"));
            }
            *highest = (*highest).max(seq);
        }
    }
    let kept = format!(
        "{answers} answers with {changes} changes ({several} with several): cursors ascending \
         within (after, head], at most `limit`, `cursor` the last change's, each run's changes \
         in event order"
    );
    conclude(
        violations,
        changes > 0,
        kept,
        "no change reached the feed during the check",
    )
}

/// A change the kit saw Q's API answer at `at`; [`head`] looks for it in the reads from index
/// `from` on.
pub struct Mark<C> {
    pub what: String,
    pub at: Instant,
    pub from: usize,
    pub is: Box<dyn Fn(&C) -> bool + Send + Sync>,
}

pub fn head<C: Change>(reads: &[Read<C>], marks: &[Mark<C>]) -> Vec<Finding> {
    let mut violations = Vec::new();
    let (mut judged, mut reads_judged, mut unseen) = (0usize, 0usize, 0usize);
    for mark in marks {
        let found = reads
            .iter()
            .enumerate()
            .skip(mark.from)
            .find_map(|(i, read)| {
                let page = read.page.as_ref().ok()?;
                let change = page.changes.iter().find(|c| (mark.is)(c))?;
                Some((i, change.cursor()))
            });
        let Some((delivered, cursor)) = found else {
            unseen += 1;
            continue;
        };
        let window: Vec<&Page<C>> = reads[mark.from..=delivered]
            .iter()
            .filter(|r| r.sent > mark.at)
            .filter_map(Read::in_place)
            .collect();
        if window.is_empty() {
            continue;
        }
        judged += 1;
        reads_judged += window.len();
        for page in window {
            let carried = page.changes.iter().any(|c| c.cursor() == cursor);
            if page.head < cursor && !carried {
                violations.push(format!(
                    "a read sent after the API answered {} had head {}, below its cursor {cursor}",
                    mark.what, page.head
                ));
            }
        }
    }
    let kept = format!(
        "{judged} changes the API had already answered were at or below the head of each of \
         the {reads_judged} reads sent after"
    );
    let nothing = if unseen > 0 {
        "the changes the API answered did not reach the feed (see its completeness)"
    } else {
        "no read was sent between a change's answer and its delivery"
    };
    conclude(violations, judged > 0, kept, nothing)
}

/// The epoch and the floor promises: what the follower saw, against the re-read.
pub fn history<C: Change>(reads: &[Read<C>], reread: &Reread<C>) -> (Vec<Finding>, Vec<Finding>) {
    let mut floor_violations = Vec::new();
    let mut last: Option<(&str, u64)> = None;
    let answers = reads
        .iter()
        .filter_map(Read::in_place)
        .chain(reread.pages.iter());
    for page in answers {
        if page.floor > page.head {
            floor_violations.push(format!("floor {} above head {}", page.floor, page.head));
        }
        if let Some((epoch, floor)) = last {
            if epoch == page.epoch && page.floor < floor {
                floor_violations.push(format!(
                    "the floor fell from {floor} to {} within epoch {epoch}",
                    page.floor
                ));
            }
        }
        last = Some((&page.epoch, page.floor));
    }
    let unjudged = |why: String| {
        let epoch = vec![Finding::NotChecked(why.clone())];
        let floor = conclude(floor_violations.clone(), false, String::new(), &why);
        (epoch, floor)
    };
    if let Some(e) = &reread.error {
        return unjudged(format!("the re-read failed: {e}"));
    }
    let Some(epoch) = reread.pages.first().map(|p| p.epoch.as_str()) else {
        return unjudged("nothing was re-read".to_owned());
    };
    if reread.pages.iter().any(|p| p.epoch != epoch) {
        return unjudged("the feed changed epoch during the re-read".to_owned());
    }
    let seen: BTreeMap<u64, &C> = reads
        .iter()
        .filter_map(Read::in_place)
        .filter(|p| p.epoch == epoch)
        .flat_map(|p| p.changes.iter())
        .map(|c| (c.cursor(), c))
        .collect();
    if seen.is_empty() {
        return unjudged(format!(
            "no change the follower saw is of the re-read's epoch {epoch}"
        ));
    }
    let floor = reread.pages.iter().map(|p| p.floor).max().unwrap_or(0);
    let again: BTreeMap<u64, &C> = reread
        .pages
        .iter()
        .flat_map(|p| p.changes.iter())
        .map(|c| (c.cursor(), c))
        .collect();
    let mut epoch_violations = Vec::new();
    let (mut compared, mut compacted) = (0usize, 0usize);
    for (cursor, change) in &seen {
        if *cursor <= floor {
            compacted += 1;
            continue;
        }
        compared += 1;
        match again.get(cursor) {
            Some(now) if now.same(change) => {}
            Some(now) => epoch_violations.push(format!(
                "cursor {cursor} named {}, now names {} (epoch {epoch} unchanged)",
                change.describe(),
                now.describe()
            )),
            None => floor_violations.push(format!(
                "cursor {cursor} ({}) is no longer served, the floor still {floor}",
                change.describe()
            )),
        }
    }
    let epoch_findings = conclude(
        epoch_violations,
        compared > 0,
        format!(
            "re-read from cursor {}: the {compared} cursors seen in epoch {epoch} name the same \
             changes",
            reread.from
        ),
        "every change seen was compacted before the re-read",
    );
    let floor_findings = conclude(
        floor_violations,
        compared > 0,
        format!(
            "each of the {compared} changes seen above floor {floor} is still served \
             ({compacted} compacted below it); the floor never fell"
        ),
        "every change seen was compacted before the re-read",
    );
    (epoch_findings, floor_findings)
}

#[cfg(test)]
mod tests;

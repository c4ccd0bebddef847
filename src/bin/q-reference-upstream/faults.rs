//! Fault injection (driven through `/admin/faults` and `/admin/runs/{id}/corrupt-output`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Remaining injected faults; each counter is consumed by one matching request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Faults {
    /// `POST /runs` commits the run, then the connection is closed without any response.
    pub create_drop_after_commit: u32,
    /// `POST /runs` answers 500 without creating anything.
    pub create_fail_500_before_commit: u32,
    /// `POST /runs` commits the run, then answers 500.
    pub create_fail_500_after_commit: u32,
    /// Sleep applied before handling `POST /runs` (the run is created after the sleep).
    pub create_delay_ms: u64,
    /// How many `POST /runs` requests get `create_delay_ms`.
    pub create_delay_count: u32,
    /// `GET /internal/v1/runs/**`, the evidence grant query and the change feeds answer 500.
    pub read_fail_500: u32,
    /// `POST /internal/v1/identity/introspect` answers 500.
    pub introspect_fail_500: u32,
    /// Sleep applied before answering `POST /internal/v1/identity/introspect`.
    pub introspect_delay_ms: u64,
    /// How many introspection requests get `introspect_delay_ms`.
    pub introspect_delay_count: u32,
    /// `POST /runs` answers a definite 403 `workspace_access_denied` without creating anything
    /// (as when the grant is revoked between the gateway's check and the create).
    pub create_refuse_403: u32,
    /// Per contract route (`create_run`, `run_by_workflow`, `cancel_run`, ...): the next
    /// `count` requests are answered `status` before the route does anything.
    pub status: BTreeMap<String, StatusFault>,
    /// `POST /runs/{id}/cancel` answers 500 without canceling.
    pub cancel_fail_500: u32,
    /// `POST /runs/{id}/cancel` cancels the run, then answers 500.
    pub cancel_fail_500_after_commit: u32,
    /// Sleep applied before handling `POST /runs/{id}/cancel`.
    pub cancel_delay_ms: u64,
    /// How many cancels get `cancel_delay_ms`.
    pub cancel_delay_count: u32,
    /// `POST /runs/{id}/cancel` takes the cancellation asynchronously: it answers 200 with the
    /// run still in its current status and cancels it `cancel_async_ms` later.
    pub cancel_async: u32,
    pub cancel_async_ms: u64,
    /// Every JSON answer of a contract route carries fields the contract does not define.
    pub extra_fields: bool,
    /// `POST /runs` answers without `principal_evidence`, as a Q that does not send the
    /// optional field.
    pub create_omit_evidence: bool,
    /// Every run status, approval kind and status and evidence grant in an answer is a value
    /// the contract does not define (`paused_for_review`, `partial`, ...).
    pub unknown_enum_values: bool,
    /// The next `corrupt_output_count` runs created serve their output corrupted this way from
    /// the start, as `POST /admin/runs/{id}/corrupt-output` would, but before anyone can read it.
    pub corrupt_output: Option<CorruptMode>,
    pub corrupt_output_count: u32,
    /// The access feed withholds entries younger than this (its `head` still names them), as
    /// a feed served from a lagging copy would.
    pub access_feed_lag_ms: u64,
    /// The same for the run feed.
    pub run_feed_lag_ms: u64,
    /// Per contract route: the next `count` answers are computed, then held until
    /// `POST /admin/barrier/release` (or 30 s), so a test can change Q's state between the
    /// moment Q read its answer and the moment the caller receives it.
    pub hold: BTreeMap<String, u32>,
    /// Per contract route: every successful answer carries an extra field of this many bytes
    /// (stays until cleared), as a Q gone wrong might answer.
    pub pad_answers: BTreeMap<String, u64>,
    /// How many times each counted fault took effect (`create_drop_after_commit`,
    /// `status:create_run`, ...), since the process started: a fault armed and never met by a
    /// request is not counted. Setting and clearing faults leave it.
    pub fired: BTreeMap<String, u64>,
}

/// An injected answer: `status` with `code` as its `ErrorBody` when given; otherwise 401 with
/// Q's `unauthorized` (a rotated service token), and any other status with a proxy's plain-text
/// body and no contract code.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StatusFault {
    pub status: u16,
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// One entry of `"status"` in `POST /admin/faults`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteStatusFault {
    pub route: String,
    pub status: u16,
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default)]
    pub code: Option<String>,
}

fn one() -> u32 {
    1
}

/// The contract routes by the names the status faults use (the gateway's names for its calls).
pub const ROUTES: &[&str] = &[
    "introspect",
    "agent_access",
    "create_run",
    "get_run",
    "run_by_workflow",
    "cancel_run",
    "run_events",
    "run_output",
    "approvals",
    "approve",
    "run_grant",
    "evidence_grants",
    "run_changes",
    "access_changes",
];

/// `status` in `POST /admin/faults`: one route's fault or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StatusFaults {
    One(RouteStatusFault),
    Many(Vec<RouteStatusFault>),
}

/// Body of `POST /admin/faults`: present fields overwrite the current counters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsPatch {
    pub create_drop_after_commit: Option<u32>,
    pub create_fail_500_before_commit: Option<u32>,
    pub create_fail_500_after_commit: Option<u32>,
    pub create_delay_ms: Option<u64>,
    pub create_delay_count: Option<u32>,
    pub read_fail_500: Option<u32>,
    pub introspect_fail_500: Option<u32>,
    pub introspect_delay_ms: Option<u64>,
    pub introspect_delay_count: Option<u32>,
    pub create_refuse_403: Option<u32>,
    pub status: Option<StatusFaults>,
    pub cancel_fail_500: Option<u32>,
    pub cancel_fail_500_after_commit: Option<u32>,
    pub cancel_delay_ms: Option<u64>,
    pub cancel_delay_count: Option<u32>,
    pub cancel_async: Option<u32>,
    pub cancel_async_ms: Option<u64>,
    pub extra_fields: Option<bool>,
    pub create_omit_evidence: Option<bool>,
    pub unknown_enum_values: Option<bool>,
    pub corrupt_output: Option<CorruptMode>,
    pub corrupt_output_count: Option<u32>,
    pub access_feed_lag_ms: Option<u64>,
    pub run_feed_lag_ms: Option<u64>,
    /// Route → how many of its next answers are held (0 disarms).
    pub hold: Option<BTreeMap<String, u32>>,
    /// Route → bytes of padding on every successful answer (0 removes it).
    pub pad_answers: Option<BTreeMap<String, u64>>,
}

impl FaultsPatch {
    /// A route name no status fault can apply to, if any.
    pub fn unknown_route(&self) -> Option<&str> {
        let faults: &[RouteStatusFault] = match &self.status {
            None => &[],
            Some(StatusFaults::One(f)) => std::slice::from_ref(f),
            Some(StatusFaults::Many(v)) => v,
        };
        faults
            .iter()
            .map(|f| f.route.as_str())
            .chain(self.hold.iter().flat_map(|h| h.keys().map(String::as_str)))
            .chain(
                self.pad_answers
                    .iter()
                    .flat_map(|p| p.keys().map(String::as_str)),
            )
            .find(|r| !ROUTES.contains(r))
    }
}

impl Faults {
    pub fn apply(&mut self, patch: FaultsPatch) {
        let FaultsPatch {
            create_drop_after_commit,
            create_fail_500_before_commit,
            create_fail_500_after_commit,
            create_delay_ms,
            create_delay_count,
            read_fail_500,
            introspect_fail_500,
            introspect_delay_ms,
            introspect_delay_count,
            create_refuse_403,
            status,
            cancel_fail_500,
            cancel_fail_500_after_commit,
            cancel_delay_ms,
            cancel_delay_count,
            cancel_async,
            cancel_async_ms,
            extra_fields,
            create_omit_evidence,
            unknown_enum_values,
            corrupt_output,
            corrupt_output_count,
            access_feed_lag_ms,
            run_feed_lag_ms,
            hold,
            pad_answers,
        } = patch;
        for (route, bytes) in pad_answers.unwrap_or_default() {
            if bytes == 0 {
                self.pad_answers.remove(&route);
            } else {
                self.pad_answers.insert(route, bytes);
            }
        }
        set(&mut self.access_feed_lag_ms, access_feed_lag_ms);
        set(&mut self.run_feed_lag_ms, run_feed_lag_ms);
        for (route, count) in hold.unwrap_or_default() {
            if count == 0 {
                self.hold.remove(&route);
            } else {
                self.hold.insert(route, count);
            }
        }
        let status = match status {
            None => Vec::new(),
            Some(StatusFaults::One(f)) => vec![f],
            Some(StatusFaults::Many(v)) => v,
        };
        for f in status {
            if f.count == 0 {
                self.status.remove(&f.route);
            } else {
                self.status.insert(
                    f.route,
                    StatusFault {
                        status: f.status,
                        count: f.count,
                        code: f.code,
                    },
                );
            }
        }
        set(&mut self.cancel_fail_500, cancel_fail_500);
        set(
            &mut self.cancel_fail_500_after_commit,
            cancel_fail_500_after_commit,
        );
        set(&mut self.cancel_delay_ms, cancel_delay_ms);
        set(&mut self.cancel_delay_count, cancel_delay_count);
        if cancel_delay_ms.is_some_and(|ms| ms > 0) && cancel_delay_count.is_none() {
            self.cancel_delay_count = self.cancel_delay_count.max(1);
        }
        set(&mut self.cancel_async, cancel_async);
        set(&mut self.cancel_async_ms, cancel_async_ms);
        set(&mut self.extra_fields, extra_fields);
        set(&mut self.create_omit_evidence, create_omit_evidence);
        set(&mut self.unknown_enum_values, unknown_enum_values);
        set(&mut self.create_drop_after_commit, create_drop_after_commit);
        set(
            &mut self.create_fail_500_before_commit,
            create_fail_500_before_commit,
        );
        set(
            &mut self.create_fail_500_after_commit,
            create_fail_500_after_commit,
        );
        set(&mut self.read_fail_500, read_fail_500);
        set(&mut self.introspect_fail_500, introspect_fail_500);
        set(&mut self.create_refuse_403, create_refuse_403);
        set(&mut self.create_delay_ms, create_delay_ms);
        set(&mut self.create_delay_count, create_delay_count);
        // A delay given without a count applies to the next create only.
        if create_delay_ms.is_some_and(|ms| ms > 0) && create_delay_count.is_none() {
            self.create_delay_count = self.create_delay_count.max(1);
        }
        if corrupt_output.is_some() {
            self.corrupt_output = corrupt_output;
        }
        set(&mut self.corrupt_output_count, corrupt_output_count);
        // A mode given without a count applies to the next created run only.
        if corrupt_output.is_some() && corrupt_output_count.is_none() {
            self.corrupt_output_count = self.corrupt_output_count.max(1);
        }
        set(&mut self.introspect_delay_ms, introspect_delay_ms);
        set(&mut self.introspect_delay_count, introspect_delay_count);
        if introspect_delay_ms.is_some_and(|ms| ms > 0) && introspect_delay_count.is_none() {
            self.introspect_delay_count = self.introspect_delay_count.max(1);
        }
    }

    /// The delay for this introspection, consuming one delay count.
    pub fn take_introspect_delay(&mut self) -> Option<Duration> {
        if self.introspect_delay_ms > 0 && consume!(*self, introspect_delay_count) {
            Some(Duration::from_millis(self.introspect_delay_ms))
        } else {
            None
        }
    }

    /// The status fault of this route, consuming one of its count.
    pub fn take_status(&mut self, route: &str) -> Option<StatusFault> {
        let fault = self.status.get_mut(route)?;
        let taken = fault.clone();
        fault.count -= 1;
        if fault.count == 0 {
            self.status.remove(route);
        }
        self.count_fired(&format!("status:{route}"));
        Some(taken)
    }

    /// Whether this answer of `route` is to be held, consuming one count.
    pub fn take_hold(&mut self, route: &str) -> bool {
        let Some(count) = self.hold.get_mut(route) else {
            return false;
        };
        *count -= 1;
        if *count == 0 {
            self.hold.remove(route);
        }
        self.count_fired(&format!("hold:{route}"));
        true
    }

    /// The delay for this cancel, consuming one delay count.
    pub fn take_cancel_delay(&mut self) -> Option<Duration> {
        if self.cancel_delay_ms > 0 && consume!(*self, cancel_delay_count) {
            Some(Duration::from_millis(self.cancel_delay_ms))
        } else {
            None
        }
    }

    /// How long after its answer an asynchronous cancel takes effect.
    pub fn cancel_async_delay(&self) -> Duration {
        Duration::from_millis(if self.cancel_async_ms > 0 {
            self.cancel_async_ms
        } else {
            500
        })
    }

    /// How the output of the run being created is corrupted, consuming one count.
    pub fn take_corrupt_output(&mut self) -> Option<CorruptMode> {
        let mode = self.corrupt_output?;
        consume!(*self, corrupt_output_count).then_some(mode)
    }

    /// The delay for this create, consuming one delay count.
    pub fn take_create_delay(&mut self) -> Option<Duration> {
        if self.create_delay_ms > 0 && consume!(*self, create_delay_count) {
            Some(Duration::from_millis(self.create_delay_ms))
        } else {
            None
        }
    }
}

impl Faults {
    /// One more time `what` took effect.
    pub fn count_fired(&mut self, what: &str) {
        *self.fired.entry(what.to_owned()).or_default() += 1;
    }
}

/// Consumes one unit of a counter field of a [`Faults`] (`consume!(faults, create_drop_after_commit)`):
/// true if the fault applies to this request, and then counted in `fired` under the field's
/// name.
macro_rules! consume {
    ($faults:expr, $field:ident) => {{
        let faults: &mut $crate::faults::Faults = &mut $faults;
        let hit = $crate::faults::take(&mut faults.$field);
        if hit {
            faults.count_fired(stringify!($field));
        }
        hit
    }};
}
pub(crate) use consume;

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

/// Consumes one unit of a fault counter; true if the fault applies to this request.
pub fn take(counter: &mut u32) -> bool {
    if *counter > 0 {
        *counter -= 1;
        true
    } else {
        false
    }
}

/// How `GET /runs/{id}/output` changes once `POST /admin/runs/{id}/corrupt-output` was called.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CorruptMode {
    /// The checksum no longer matches the text.
    Checksum,
    /// The byte count no longer matches the text.
    ByteCount,
    /// A consistent (checksum and byte count correct) output larger than 1 MiB.
    Oversize,
    /// A consistent output of about 400 KiB (three fit in no 1 MiB result).
    Large,
    /// A consistent output declared as `text/html`, not the contract's `text/markdown`.
    MediaType,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_output_fault_marks_only_the_next_runs() {
        let mut faults = Faults::default();
        assert_eq!(faults.take_corrupt_output(), None);
        faults.apply(FaultsPatch {
            corrupt_output: Some(CorruptMode::Large),
            corrupt_output_count: Some(2),
            ..Default::default()
        });
        assert_eq!(faults.take_corrupt_output(), Some(CorruptMode::Large));
        assert_eq!(faults.take_corrupt_output(), Some(CorruptMode::Large));
        assert_eq!(faults.take_corrupt_output(), None);
        faults.apply(FaultsPatch {
            corrupt_output: Some(CorruptMode::Oversize),
            ..Default::default()
        });
        assert_eq!(faults.take_corrupt_output(), Some(CorruptMode::Oversize));
        assert_eq!(faults.take_corrupt_output(), None);
    }

    #[test]
    fn delay_without_count_applies_once() {
        let mut faults = Faults::default();
        faults.apply(FaultsPatch {
            create_delay_ms: Some(50),
            ..Default::default()
        });
        assert_eq!(faults.take_create_delay(), Some(Duration::from_millis(50)));
        assert_eq!(faults.take_create_delay(), None);
    }

    #[test]
    fn introspection_delay_applies_to_its_count() {
        let mut faults = Faults::default();
        faults.apply(FaultsPatch {
            introspect_delay_ms: Some(40),
            introspect_delay_count: Some(2),
            ..Default::default()
        });
        let delay = Some(Duration::from_millis(40));
        assert_eq!(faults.take_introspect_delay(), delay);
        assert_eq!(faults.take_introspect_delay(), delay);
        assert_eq!(faults.take_introspect_delay(), None);
        assert_eq!(faults.take_create_delay(), None, "creates are not delayed");
    }

    #[test]
    fn status_faults_count_down_per_route() {
        let mut faults = Faults::default();
        let patch: FaultsPatch = serde_json::from_value(serde_json::json!({
            "status": [{"route": "create_run", "status": 429, "count": 2},
                       {"route": "run_by_workflow", "status": 404}]
        }))
        .unwrap();
        assert_eq!(patch.unknown_route(), None);
        faults.apply(patch);
        assert_eq!(faults.take_status("create_run").unwrap().status, 429);
        assert_eq!(faults.take_status("run_by_workflow").unwrap().status, 404);
        assert!(faults.take_status("run_by_workflow").is_none());
        assert!(faults.take_status("create_run").is_some());
        assert!(faults.take_status("create_run").is_none());
        let bad: FaultsPatch =
            serde_json::from_value(serde_json::json!({"status": {"route": "runs", "status": 500}}))
                .unwrap();
        assert_eq!(bad.unknown_route(), Some("runs"));
    }
}

//! Fault injection (driven through `/admin/faults` and `/admin/runs/{id}/corrupt-output`).

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
    /// `GET /internal/v1/runs/**` answers 500.
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
        } = patch;
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
        set(&mut self.introspect_delay_ms, introspect_delay_ms);
        set(&mut self.introspect_delay_count, introspect_delay_count);
        if introspect_delay_ms.is_some_and(|ms| ms > 0) && introspect_delay_count.is_none() {
            self.introspect_delay_count = self.introspect_delay_count.max(1);
        }
    }

    /// The delay for this introspection, consuming one delay count.
    pub fn take_introspect_delay(&mut self) -> Option<Duration> {
        if self.introspect_delay_ms > 0 && take(&mut self.introspect_delay_count) {
            Some(Duration::from_millis(self.introspect_delay_ms))
        } else {
            None
        }
    }

    /// The delay for this create, consuming one delay count.
    pub fn take_create_delay(&mut self) -> Option<Duration> {
        if self.create_delay_ms > 0 && take(&mut self.create_delay_count) {
            Some(Duration::from_millis(self.create_delay_ms))
        } else {
            None
        }
    }
}

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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

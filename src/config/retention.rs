//! The `[retention]` section: how long finished work is kept, for each kind of row, and how
//! the reconciler leader deletes what is older (docs/operations.md, "Retention").

use serde::Deserialize;

use super::ConfigError;

/// Thirty days, the default of every kind.
const THIRTY_DAYS: u64 = 30 * 24 * 3600;

/// The shortest non-zero retention of tasks and delegations: both hold a message identity
/// (a task's `messageId`, a delegation's `taskId`), and a repeat after its row is gone is new
/// work. A day covers any client's retries of an uncertain submission.
pub const MIN_IDENTITY_RETENTION_SECONDS: u64 = 24 * 3600;

/// Every kind is measured the same way: from the moment the row last changed in a way that
/// matters (a task: reaching its terminal state; a delegation: its last write; a card: its
/// discovery), deleted by the reconciler leader in batches of `batch_size`; 0 keeps them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Age since a task reached a terminal state (COMPLETED, FAILED, CANCELED, REJECTED) after
    /// which the task is deleted, with its message and everything keyed on it, in seconds.
    /// Tasks that are not terminal are never deleted. 0 keeps them.
    pub tasks_seconds: u64,
    /// Age since a delegation row last changed after which it is deleted, in seconds; its
    /// `taskId` is forgotten with it. 0 keeps them.
    pub delegations_seconds: u64,
    /// Age of a discovered agent card after which it is cleared (the registration stays), in
    /// seconds. 0 keeps them.
    pub discovered_cards_seconds: u64,
    /// Rows deleted (or cards cleared) per statement: each batch is its own short transaction.
    pub batch_size: i64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            tasks_seconds: THIRTY_DAYS,
            delegations_seconds: THIRTY_DAYS,
            discovered_cards_seconds: THIRTY_DAYS,
            batch_size: 500,
        }
    }
}

impl RetentionConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (key, seconds) in [
            ("retention.tasks_seconds", self.tasks_seconds),
            ("retention.delegations_seconds", self.delegations_seconds),
        ] {
            if seconds != 0 && seconds < MIN_IDENTITY_RETENTION_SECONDS {
                return Err(ConfigError::Invalid(format!(
                    "{key} must be 0 (keep) or at least {MIN_IDENTITY_RETENTION_SECONDS} (a day): \
                     a repeat of a message whose row is gone would be new work, got {seconds}"
                )));
            }
        }
        if !(1..=10_000).contains(&self.batch_size) {
            return Err(ConfigError::Invalid(format!(
                "retention.batch_size must be between 1 and 10000, got {}",
                self.batch_size
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_thirty_days_and_valid() {
        let r = RetentionConfig::default();
        assert_eq!(r.tasks_seconds, 2_592_000);
        assert_eq!(r.delegations_seconds, r.tasks_seconds);
        assert_eq!(r.discovered_cards_seconds, r.tasks_seconds);
        r.validate().unwrap();
    }

    #[test]
    fn identities_are_kept_at_least_a_day_unless_kept_forever() {
        let keep = RetentionConfig {
            tasks_seconds: 0,
            delegations_seconds: 0,
            discovered_cards_seconds: 60,
            ..RetentionConfig::default()
        };
        keep.validate().unwrap();
        for short in [
            RetentionConfig {
                tasks_seconds: 3600,
                ..RetentionConfig::default()
            },
            RetentionConfig {
                delegations_seconds: 60,
                ..RetentionConfig::default()
            },
            RetentionConfig {
                batch_size: 0,
                ..RetentionConfig::default()
            },
        ] {
            assert!(short.validate().is_err(), "{short:?}");
        }
    }
}

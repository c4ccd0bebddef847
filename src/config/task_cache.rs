//! The `[task_cache]` section: finished tasks kept in process for GetTask
//! (`crate::a2a::tasks::finished`).

use serde::Deserialize;

use super::ConfigError;

/// Longest `ttl_ms`: the bound on how long a replica may answer a finished task that was
/// deleted behind its back (a tenant offboarded), the same as the access cache's hard bound.
pub const MAX_TASK_CACHE_TTL_MS: u64 = 60_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskCacheConfig {
    /// Longest a finished task serves from the cache after the read that filled it, in
    /// milliseconds (never past its retention age); at most [`MAX_TASK_CACHE_TTL_MS`].
    pub ttl_ms: u64,
    /// Bytes of finished tasks (message, status text and artifact) kept at most per replica;
    /// 0 keeps none.
    pub capacity_bytes: u64,
}

impl Default for TaskCacheConfig {
    fn default() -> Self {
        TaskCacheConfig {
            ttl_ms: 10_000,
            capacity_bytes: 16 << 20,
        }
    }
}

impl TaskCacheConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.ttl_ms > MAX_TASK_CACHE_TTL_MS {
            return Err(ConfigError::Invalid(format!(
                "task_cache.ttl_ms must be <= {MAX_TASK_CACHE_TTL_MS}: a finished task deleted \
                 by offboarding would be answered that long, got {}",
                self.ttl_ms
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_over_a_minute_is_refused() {
        let ok = TaskCacheConfig {
            ttl_ms: MAX_TASK_CACHE_TTL_MS,
            ..TaskCacheConfig::default()
        };
        assert!(ok.validate().is_ok());
        let err = TaskCacheConfig {
            ttl_ms: MAX_TASK_CACHE_TTL_MS + 1,
            ..ok
        }
        .validate()
        .unwrap_err();
        assert!(err.to_string().contains("task_cache.ttl_ms"), "{err}");
    }
}

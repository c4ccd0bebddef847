//! The `[traces]` section: OpenTelemetry traces exported over OTLP (off by default).

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracesConfig {
    /// OTLP/HTTP traces endpoint (protobuf), e.g. `http://otel-collector:4318/v1/traces`; empty
    /// turns export off.
    pub otlp_endpoint: String,
    /// Share of new traces recorded, 0.0 to 1.0; a request carrying a sampled `traceparent`
    /// follows its caller's decision.
    pub sampling_ratio: f64,
    /// `service.name` of the exported spans.
    pub service_name: String,
    /// Limit for one export call, in milliseconds.
    pub export_timeout_ms: u64,
}

impl Default for TracesConfig {
    fn default() -> Self {
        TracesConfig {
            otlp_endpoint: String::new(),
            sampling_ratio: 1.0,
            service_name: "q-a2a-gateway".into(),
            export_timeout_ms: 5_000,
        }
    }
}

impl TracesConfig {
    pub fn enabled(&self) -> bool {
        !self.otlp_endpoint.trim().is_empty()
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err(ConfigError::Invalid(format!(
                "traces.sampling_ratio must be between 0.0 and 1.0, got {}",
                self.sampling_ratio
            )));
        }
        let endpoint = self.otlp_endpoint.trim();
        let http = endpoint.starts_with("http://") || endpoint.starts_with("https://");
        if !endpoint.is_empty() && !http {
            return Err(ConfigError::Invalid(format!(
                "traces.otlp_endpoint must be an http(s) URL, got {endpoint:?}"
            )));
        }
        if self.service_name.trim().is_empty() || self.export_timeout_ms == 0 {
            return Err(ConfigError::Invalid(
                "traces.service_name must not be empty and traces.export_timeout_ms > 0".into(),
            ));
        }
        Ok(())
    }
}

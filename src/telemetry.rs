//! Logs and traces: JSON log lines on stderr, and, when `traces.otlp_endpoint` is set,
//! OpenTelemetry spans exported over OTLP/HTTP (protobuf) in batches.
//!
//! Spans exported: the inbound `request` span (its parent is the caller's `traceparent`, when
//! valid), and the spans of the target [`OTEL`]: one per call to Q (`q.call`, `upstream`), per
//! task-store query (`db.*`, `store`) and per outbound call (`outbound.call`). Those carry no
//! field that could hold a secret: no URL, header, token or message text. They are kept out of
//! the log lines, whose span fields stay the request's.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::config::env::LOG_FILTER;
use crate::config::TracesConfig;

mod span_fields;
pub use span_fields::SpanFields;

/// Target of the spans that exist for tracing only (`q.call`, `db.*`, `outbound.call`).
pub const OTEL: &str = "otel";

/// Name of the inbound request span (`app::request_span`).
pub const REQUEST_SPAN: &str = "request";

/// Holds the trace exporter; [`Telemetry::shutdown`] sends what is still buffered.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            if let Err(e) = provider.shutdown() {
                tracing::warn!(error = %e, "trace export did not finish");
            }
        }
    }
}

/// The log filter when `RUST_LOG` is not set.
pub const DEFAULT_LOG_FILTER: &str = "info,tower_http=warn,tokio_postgres=warn";

/// The log filter of `directives` (`RUST_LOG`), [`DEFAULT_LOG_FILTER`] without. An invalid
/// filter is an error naming the variable, as any other invalid setting is: a typo would
/// otherwise log at the default level, silently.
fn log_filter(directives: Option<&str>) -> anyhow::Result<EnvFilter> {
    let Some(directives) = directives else {
        return Ok(EnvFilter::new(DEFAULT_LOG_FILTER));
    };
    EnvFilter::builder()
        .parse(directives)
        .map_err(|e| anyhow::anyhow!("{LOG_FILTER}={directives:?} is not a log filter: {e}"))
}

/// Installs the log subscriber and, with `traces` enabled, the trace exporter.
pub fn init(traces: Option<&TracesConfig>) -> anyhow::Result<Telemetry> {
    let directives = match std::env::var(LOG_FILTER) {
        Ok(directives) => Some(directives),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("{LOG_FILTER} is not valid UTF-8")
        }
    };
    let filter = log_filter(directives.as_deref())?;
    let logs = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        // The same span objects as the JSON formatter's own, without re-parsing them on every
        // field a request records (span_fields.rs).
        .fmt_fields(SpanFields)
        .with_writer(std::io::stderr)
        .with_filter(filter)
        .with_filter(filter_fn(|meta| meta.target() != OTEL));
    let Some(traces) = traces.filter(|t| t.enabled()) else {
        tracing_subscriber::registry().with(logs).init();
        return Ok(Telemetry { provider: None });
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces.otlp_endpoint.trim())
        .with_timeout(Duration::from_millis(traces.export_timeout_ms))
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            traces.sampling_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(traces.service_name.clone())
                .build(),
        )
        .build();
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("q-a2a-gateway"))
        .with_filter(filter_fn(|meta| {
            meta.is_span() && (meta.target() == OTEL || meta.name() == REQUEST_SPAN)
        }));
    tracing_subscriber::registry().with(logs).with(spans).init();
    crate::trace_context::set_exporting();
    Ok(Telemetry {
        provider: Some(provider),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_log_filter_is_an_error_naming_the_variable() {
        let error = log_filter(Some("q_a2a_gateway=loud"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("RUST_LOG") && error.contains("loud"),
            "{error}"
        );
        // Valid ones, and none at all (the default), are filters.
        for directives in [Some("debug"), Some("info,tower_http=warn"), Some(""), None] {
            log_filter(directives).unwrap();
        }
        EnvFilter::builder().parse(DEFAULT_LOG_FILTER).unwrap();
    }
}

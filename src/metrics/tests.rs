//! The exporter renders what the gateway records under the declared names.

use super::*;

/// What a recorder of its own renders after `record` ran against it.
fn rendered_after(record: impl FnOnce()) -> String {
    let recorder = recorder().unwrap();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, record);
    handle.render()
}

/// Every one of `lines` is a whole line of the rendered `text`.
fn assert_lines(text: &str, lines: &[&str]) {
    for line in lines {
        assert!(
            text.lines().any(|l| l == *line),
            "missing {line:?} in:\n{text}"
        );
    }
}

/// The names the dashboard and alert rules rely on are the ones the exporter renders:
/// histograms as `_bucket`/`_sum`/`_count` (not as summaries), labels as documented above.
#[test]
fn recorded_metrics_render_under_their_declared_names() {
    let text = rendered_after(|| {
        describe();
        upstream_call("get_run", "ok", Duration::from_millis(3));
        upstream_call("create_run", "ambiguous", Duration::from_secs(2));
        lease_refused("principal");
        lease_limits(256, 16, 4);
        let hits = AccessHits::default();
        hits.record("agent", "hit");
        hits.record("grant", "hit");
        hits.record("grant", "hit");
        hits.record("grant", "stale");
        let buffered = BufferedGauge::default();
        buffered.get().increment(300.0);
        buffered.get().decrement(100.0);
        metrics::gauge!(DISPATCH_UNKNOWN).set(1.0);
    });
    assert_lines(
        &text,
        &[
            "# TYPE a2a_upstream_request_duration_seconds histogram",
            "a2a_upstream_request_duration_seconds_bucket{op=\"get_run\",outcome=\"ok\",le=\"0.005\"} 1",
            "a2a_upstream_request_duration_seconds_bucket{op=\"create_run\",outcome=\"ambiguous\",le=\"1\"} 0",
            "a2a_upstream_request_duration_seconds_count{op=\"create_run\",outcome=\"ambiguous\"} 1",
            "a2a_observer_lease_refusals_total{scope=\"principal\"} 1",
            "a2a_observer_lease_limit{scope=\"global\"} 256",
            "a2a_observer_lease_limit{scope=\"principal\"} 4",
            "a2a_tasks_dispatch_unknown 1",
            "a2a_access_cache_lookups_total{cache=\"agent\",outcome=\"hit\"} 1",
            "a2a_access_cache_lookups_total{cache=\"grant\",outcome=\"hit\"} 2",
            "a2a_response_bytes_buffered 200",
            "a2a_access_cache_lookups_total{cache=\"grant\",outcome=\"stale\"} 1",
        ],
    );
    assert!(
        text.contains("a2a_upstream_request_duration_seconds_sum{op=\"get_run\",outcome=\"ok\"}")
    );
}

/// Each label set is counted on its own, the same set twice in one series; the latency
/// histogram is per route and method.
#[test]
fn request_series_count_each_label_set_once_resolved() {
    let series = RequestSeries::default();
    let rpc = "/v1/a2a/agents/{agent_id}/rpc";
    let text = rendered_after(|| {
        series.record(rpc, "GetTask", 200, Some(None), 0.001);
        series.record(rpc, "GetTask", 200, Some(None), 0.002);
        series.record(rpc, "GetTask", 200, Some(Some(-32001)), 0.002);
        series.record("unmatched", "", 404, None, 0.0);
    });
    assert_lines(
        &text,
        &[
            "a2a_http_requests_total{route=\"/v1/a2a/agents/{agent_id}/rpc\",rpc_method=\"GetTask\",status=\"200\",rpc_code=\"ok\"} 2",
            "a2a_http_requests_total{route=\"/v1/a2a/agents/{agent_id}/rpc\",rpc_method=\"GetTask\",status=\"200\",rpc_code=\"-32001\"} 1",
            "a2a_http_requests_total{route=\"unmatched\",rpc_method=\"\",status=\"404\",rpc_code=\"\"} 1",
            "a2a_http_request_duration_seconds_count{route=\"/v1/a2a/agents/{agent_id}/rpc\",rpc_method=\"GetTask\"} 3",
            "a2a_http_request_duration_seconds_count{route=\"unmatched\",rpc_method=\"\"} 1",
        ],
    );
}

/// Rare events' counters are rendered at 0 before the first event, with every label value
/// the gateway records (a lost lease may never happen on a healthy deployment).
#[test]
fn rare_event_counters_render_at_zero_from_the_start() {
    let text = rendered_after(|| {
        describe();
        zero_counters();
    });
    assert_lines(
        &text,
        &[
            "a2a_observer_leases_lost_total{reason=\"missing\"} 0",
            "a2a_observer_leases_lost_total{reason=\"unreachable\"} 0",
            "a2a_stalled_connections_closed_total 0",
            "a2a_introspections_shed_total{token=\"known\"} 0",
            "a2a_introspections_shed_total{token=\"stranger\"} 0",
            "a2a_unknown_tokens_limited_total 0",
            "a2a_outbound_refusals_total{calls=\"delegations\",scope=\"tenant\"} 0",
            "a2a_outbound_refusals_total{calls=\"discoveries\",scope=\"principal\"} 0",
            "a2a_store_share_refusals_total{scope=\"tenant\"} 0",
            "a2a_store_share_refusals_total{scope=\"principal\"} 0",
        ],
    );
}

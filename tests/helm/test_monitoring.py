"""The operators' dashboard and alert rules: Helm renders them only when asked, as the files
they come from, labelled for the Grafana sidecar and the Prometheus Operator; promtool accepts
the rules and their unit tests pass; every query (dashboard and rules) is valid PromQL and
names only metrics that src/metrics.rs declares. tests/python/test_metric_names.py checks the
same names against a live gateway's /metrics.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from chart import run, template, tool  # noqa: E402
from metric_names import (  # noqa: E402
    DASHBOARD,
    RULES,
    dashboard_exprs,
    declared_names,
    exported_names,
    promql_metric_names,
    rule_exprs,
    scraped_names,
    used_names,
)

HERE = Path(__file__).parent
ENABLED = {
    "monitoring": {
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Q"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    }
}


def kinds(docs):
    return sorted(doc["kind"] for _, doc in docs)


def test_off_by_default():
    default = template({})
    assert "PrometheusRule" not in kinds(default)
    assert [d for _, d in default if d["kind"] == "ConfigMap"] == [
        d for _, d in default if d["kind"] == "ConfigMap" and "gateway.toml" in d["data"]
    ]


def test_enabled_adds_the_dashboard_config_map_and_the_prometheus_rule():
    base, docs = template({}), template(ENABLED)
    assert sorted(kinds(base) + ["ConfigMap", "PrometheusRule"]) == kinds(docs)


def test_dashboard_config_map_is_the_file_labelled_for_the_grafana_sidecar():
    docs = template(ENABLED)
    (cm,) = [d for s, d in docs if s == "grafana-dashboard.yaml"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Q"}
    assert cm["metadata"]["labels"]["app.kubernetes.io/name"] == "q-a2a-gateway"
    (body,) = cm["data"].values()
    assert json.loads(body) == json.loads(DASHBOARD.read_text())


def test_prometheus_rule_is_the_rules_file():
    docs = template(ENABLED)
    (rule,) = [d for _, d in docs if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_dashboard_shape():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "q-a2a-gateway"
    # The data source is a variable: the JSON imports into any Grafana.
    (variable,) = dashboard["templating"]["list"]
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    ids = []

    def walk(panels):
        for panel in panels:
            ids.append(panel["id"])
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
                assert panel["targets"], panel["title"]
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_promtool_check_rules():
    result = run([tool("promtool"), "check", "rules", str(RULES)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_rule_unit_tests():
    result = run([tool("promtool"), "test", "rules", str(HERE / "prometheus-rules.test.yaml")])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_checks_the_rendered_prometheus_rule():
    (rule,) = [d for _, d in template(ENABLED) if d["kind"] == "PrometheusRule"]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(rule["spec"], f)
        f.flush()
        result = run([tool("promtool"), "check", "rules", f.name])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_queries_are_valid_promql():
    """promtool parses each panel query, wrapped as a recording rule."""
    exprs = dashboard_exprs()
    assert exprs
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)],
            }
        ]
    }
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(rules, f)
        f.flush()
        result = run([tool("promtool"), "check", "rules", f.name])
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_severity_summary_and_description():
    rules = yaml.safe_load(RULES.read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"]]
    assert all("alert" in r for r in alerts), "alerts only: a recording rule's name is no export"
    for rule in alerts:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_rules_cover_what_operators_watch():
    used_by_rules = set().union(*(promql_metric_names(e) for e in rule_exprs()))
    for name in [
        "a2a_observer_leases",  # lease saturation
        "a2a_observer_lease_limit",
        "a2a_upstream_errors_total",  # Q error ratio
        "a2a_upstream_request_duration_seconds_count",
        "a2a_upstream_request_duration_seconds_bucket",  # Q latency
        "a2a_reconciler_backlog",
        "a2a_tasks_dispatch_unknown",
        "a2a_http_requests_total",  # 5xx ratio
    ]:
        assert name in used_by_rules, name


def test_every_metric_queried_is_declared_in_src_metrics_rs():
    used, exported = used_names(), exported_names()
    assert used
    assert not used - exported, (
        f"queried but not exported by the gateway: {sorted(used - exported)}; "
        f"exported: {sorted(exported)}"
    )


@pytest.mark.parametrize(
    "expr, names",
    [
        (
            'histogram_quantile(0.99, sum by (op, le) (rate(a2a_x_bucket{op!~"a|b"}[5m]))) > 1',
            {"a2a_x_bucket"},
        ),
        ("sum(rate(a{kind!=\"by (x)\"}[5m])) by (job) / on(instance) group_left b offset 1h", {"a", "b"}),
        ("max(a2a_g) / max(a2a_h{scope=\"global\"}) > bool 0.8 and up", {"a2a_g", "a2a_h", "up"}),
        ("sum without (le) (increase(c_total[1h:5m])) > 1e3", {"c_total"}),
    ],
)
def test_promql_metric_names(expr, names):
    assert promql_metric_names(expr) == names


def test_declared_names_follow_the_exporter():
    declared = declared_names()
    assert declared["a2a_http_request_duration_seconds"] == "histogram"
    assert declared["a2a_http_requests_total"] == "counter"
    assert "a2a_http_request_duration_seconds_bucket" in exported_names(declared)
    assert "a2a_http_request_duration_seconds" not in exported_names(declared)
    assert scraped_names('# TYPE x counter\nx{a="1"} 2\ny 3\n') == {"x", "y"}

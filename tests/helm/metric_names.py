"""Metric names: the ones the dashboard and the alert rules query, and the ones the gateway
declares (src/metrics.rs) and therefore exports. Shared by tests/helm/test_monitoring.py and
the live scrape in tests/python/test_metric_names.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "q-a2a-gateway"
DASHBOARD = CHART / "files" / "grafana-dashboard.json"
RULES = CHART / "files" / "prometheus-rules.yaml"
METRICS_RS = ROOT / "src" / "metrics.rs"

# PromQL words that are not metric names: aggregations, clause keywords, set operators.
KEYWORDS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "inf", "nan",
}  # fmt: skip


def promql_metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are neither function calls,
    keywords, label names (in matchers or by/without/on/ignoring lists), strings, numbers nor
    durations."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges and subqueries
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"(?<![\w:])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:ms|[smhdwy])?\b", " ", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        if e[m.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if m.group(0).lower() in KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def dashboard_exprs(dashboard: dict | None = None) -> list[str]:
    dashboard = dashboard if dashboard is not None else json.loads(DASHBOARD.read_text())
    exprs = []

    def walk(panels):
        for panel in panels:
            exprs.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    return exprs


def rule_exprs(rules: dict | None = None) -> list[str]:
    rules = rules if rules is not None else yaml.safe_load(RULES.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def used_names() -> set[str]:
    """Every metric name the dashboard and the alert rules query."""
    names: set[str] = set()
    for expr in dashboard_exprs() + rule_exprs():
        names |= promql_metric_names(expr)
    return names


def declared_names() -> dict[str, str]:
    """Metric name -> kind (counter, gauge, histogram), from the constants in src/metrics.rs
    and the describe_* call made for each."""
    text = METRICS_RS.read_text()
    consts = dict(re.findall(r'pub const (\w+): &str = "([a-z_:][a-z0-9_:]*)";', text))
    kinds = dict(
        (const, kind)
        for kind, const in re.findall(r"describe_(counter|gauge|histogram)!\(\s*(\w+)\s*,", text)
    )
    missing = set(consts) - set(kinds)
    assert not missing, f"src/metrics.rs declares metrics without a describe_* call: {missing}"
    return {name: kinds[const] for const, name in consts.items()}


def exported_names(declared: dict[str, str] | None = None) -> set[str]:
    """The sample names the exporter renders for the declared metrics (a histogram as its
    _bucket, _sum and _count series)."""
    declared = declared if declared is not None else declared_names()
    out = set()
    for name, kind in declared.items():
        if kind == "histogram":
            out |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            out.add(name)
    return out


def scraped_names(exposition: str) -> set[str]:
    """Sample names in a Prometheus text exposition."""
    names = set()
    for line in exposition.splitlines():
        if line and not line.startswith("#"):
            names.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0))
    return names

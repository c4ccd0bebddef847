"""Secure defaults of the rendered chart (secure_defaults.py): every values variant meets the
restricted Pod Security Standard, has a NetworkPolicy for ingress and egress, and reaches Q in
standalone mode over https://; each kind of breach is reported, so the check can fail. Then
what the NetworkPolicy opens, and the TLS settings to PostgreSQL, Redis and Q.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from chart import template, template_raw, values  # noqa: E402
from secure_defaults import violations  # noqa: E402
from test_chart import VARIANTS, gateway_container, gateway_toml, of_kind, one  # noqa: E402

TLS_EVERYWHERE = {
    "mode": "standalone",
    "upstream": {
        "url": "https://q-internal.q-system.svc:8443",
        "caSecret": {"name": "q-ca", "key": "ca.crt"},
    },
    "database": {
        "sslmode": "verify-full",
        "caSecret": {"name": "pg-ca", "key": "root.pem"},
        "clientCertSecret": {"name": "pg-client", "certKey": "tls.crt", "keyKey": "tls.key"},
    },
    "redis": {"caSecret": {"name": "redis-ca", "key": "ca.crt"}},
    "networkPolicy": {"egress": {"delegation": {"enabled": True}}},
}


def rendered(overrides):
    return values(overrides), template(overrides)


@pytest.mark.parametrize("variant", sorted(VARIANTS) + ["tls-everywhere"])
def test_every_variant_is_secure(variant):
    overrides = TLS_EVERYWHERE if variant == "tls-everywhere" else VARIANTS[variant]
    merged, docs = rendered(overrides)
    assert violations(merged, docs) == []


def test_a_container_without_run_as_non_root_is_reported():
    merged, docs = rendered({})
    broken = copy.deepcopy(docs)
    for _, doc in broken:
        if doc["kind"] == "Deployment":
            doc["spec"]["template"]["spec"]["securityContext"].pop("runAsNonRoot")
            doc["spec"]["template"]["spec"]["containers"][0]["securityContext"].pop("runAsNonRoot")
    found = violations(merged, broken)
    assert found == ["Deployment/q-q-api container q-api: runAsNonRoot is not true"], found


@pytest.mark.parametrize(
    "field, value, reported",
    [
        ("allowPrivilegeEscalation", True, "allowPrivilegeEscalation is not false"),
        ("readOnlyRootFilesystem", False, "root filesystem writable"),
        ("capabilities", {"drop": ["ALL"], "add": ["NET_ADMIN"]}, "capabilities added"),
        ("seccompProfile", {"type": "Unconfined"}, "seccomp profile 'Unconfined'"),
        ("runAsUser", 0, "runAsUser 0"),
    ],
)
def test_each_container_breach_is_reported(field, value, reported):
    merged, docs = rendered({"mode": "standalone"})
    for _, doc in docs:
        if doc["kind"] == "Deployment":
            doc["spec"]["template"]["spec"]["containers"][0]["securityContext"][field] = value
            if field == "seccompProfile":
                doc["spec"]["template"]["spec"]["securityContext"][field] = value
    found = violations(merged, docs)
    assert len(found) == 1 and reported in found[0], found


def test_host_namespaces_and_paths_are_reported():
    merged, docs = rendered({"mode": "standalone"})
    for _, doc in docs:
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            pod["hostNetwork"] = True
            pod["volumes"].append({"name": "root", "hostPath": {"path": "/"}})
    found = violations(merged, docs)
    assert any("hostNetwork" in f for f in found), found
    assert any("volume root of type ['hostPath']" in f for f in found), found


def test_a_missing_network_policy_is_reported():
    overrides = {"networkPolicy": {"enabled": False}}
    merged, docs = rendered(overrides)
    assert of_kind(docs, "NetworkPolicy") == []
    assert violations(merged, docs) == ["Deployment/q-q-api: no NetworkPolicy selects its pods"]


def test_a_standalone_http_upstream_is_refused_unless_allowed():
    plain = {"mode": "standalone", "upstream": {"url": "http://q-api-internal:8090"}}
    result = template_raw(plain)
    assert result.returncode != 0, result.stdout[:300]
    assert "upstream.allowInsecureUpstream" in result.stderr and "https://" in result.stderr
    # Allowed on purpose: rendered, and the check accepts it only with the flag set.
    allowed = copy.deepcopy(plain)
    allowed["upstream"]["allowInsecureUpstream"] = True
    merged, docs = rendered(allowed)
    assert gateway_toml(docs)["upstream"]["url"] == "http://q-api-internal:8090"
    assert violations(merged, docs) == []
    merged["upstream"]["allowInsecureUpstream"] = False
    assert violations(merged, docs) == [
        "standalone upstream http://q-api-internal:8090 is not https:// and not explicitly allowed"
    ]


def test_sidecar_mode_reaches_q_over_loopback_whatever_the_url():
    _, docs = rendered({"upstream": {"url": "http://elsewhere:1", "caSecret": {"name": "q-ca", "key": "ca.crt"}}})
    assert gateway_toml(docs)["upstream"]["url"] == "http://127.0.0.1:8090"
    # Q's CA is for an https:// Q: the gateway would refuse it beside a loopback http:// URL.
    env = {e["name"] for e in gateway_container(docs)["env"]}
    assert "Q_A2A_UPSTREAM_TLS_CA_FILE" not in env


def policy(docs):
    return one(docs, "NetworkPolicy")["spec"]


def ingress_ports(spec):
    return {
        port["port"]: [peer for peer in rule["from"]]
        for rule in spec["ingress"]
        for port in rule["ports"]
    }


@pytest.mark.parametrize("mode", ["sidecar", "standalone"])
def test_network_policy_ingress(mode):
    merged, docs = rendered({"mode": mode})
    spec = policy(docs)
    assert spec["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "q-a2a-gateway",
        "app.kubernetes.io/instance": "q",
    }
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    by_port = ingress_ports(spec)
    np = merged["networkPolicy"]
    proxy_and_q = np["proxyFrom"] + (np["qApiFrom"] if mode == "standalone" else [])
    assert by_port["a2a"] == proxy_and_q
    # Metrics only from the monitoring namespace; Q's internal port from nowhere.
    assert by_port["metrics"] == np["metricsFrom"]
    expected_ports = {"a2a", "metrics"} | ({"q-api"} if mode == "sidecar" else set())
    assert set(by_port) == expected_ports
    # Every named port exists on the pod.
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    named = {p["name"] for c in pod["containers"] for p in c.get("ports", [])}
    assert expected_ports <= named
    assert "q-internal" not in by_port


def egress_ports(spec):
    return sorted((p["port"], p["protocol"]) for rule in spec["egress"] for p in rule["ports"])


def test_network_policy_egress_default_and_opt_in_delegation():
    _, sidecar = rendered({})
    assert egress_ports(policy(sidecar)) == [(53, "TCP"), (53, "UDP"), (5432, "TCP"), (6379, "TCP")]
    _, standalone = rendered({"mode": "standalone"})
    assert egress_ports(policy(standalone)) == [
        (53, "TCP"),
        (53, "UDP"),
        (443, "TCP"),
        (5432, "TCP"),
        (6379, "TCP"),
    ]
    # Nothing reaches the internet until delegation is enabled, and then only 443 outside
    # the private ranges.
    assert not any("ipBlock" in peer for rule in policy(standalone)["egress"] for peer in rule["to"])
    _, delegating = rendered(TLS_EVERYWHERE)
    blocks = [peer["ipBlock"] for rule in policy(delegating)["egress"] for peer in rule["to"] if "ipBlock" in peer]
    assert blocks and blocks[0]["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(blocks[0]["except"])


def test_extra_rules_are_appended():
    extra_in = {"from": [{"podSelector": {"matchLabels": {"app": "caller"}}}]}
    extra_out = {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}], "ports": [{"port": 4318}]}
    _, docs = rendered({"networkPolicy": {"extraIngress": [extra_in], "extraEgress": [extra_out]}})
    spec = policy(docs)
    assert spec["ingress"][-1] == extra_in
    assert spec["egress"][-1] == extra_out


def test_database_redis_and_q_tls_settings():
    _, docs = rendered(TLS_EVERYWHERE)
    container = gateway_container(docs)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["Q_A2A_DATABASE_SSLMODE"] == "verify-full"
    assert env["Q_A2A_DATABASE_SSL_ROOT_CERT"] == "/etc/q-a2a-gateway/database-ca/root.pem"
    assert env["Q_A2A_REDIS_TLS_CA_FILE"] == "/etc/q-a2a-gateway/redis-ca/ca.crt"
    assert env["Q_A2A_DATABASE_SSL_CERT"] == "/etc/q-a2a-gateway/database-client/tls.crt"
    assert env["Q_A2A_DATABASE_SSL_KEY"] == "/etc/q-a2a-gateway/database-client/tls.key"
    assert env["Q_A2A_UPSTREAM_TLS_CA_FILE"] == "/etc/q-a2a-gateway/upstream-ca/ca.crt"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["upstream-ca"] == "/etc/q-a2a-gateway/upstream-ca"
    assert mounts["database-client"] == "/etc/q-a2a-gateway/database-client"
    assert mounts["database-ca"] == "/etc/q-a2a-gateway/database-ca"
    assert mounts["redis-ca"] == "/etc/q-a2a-gateway/redis-ca"
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["database-ca"]["secret"] == {
        "secretName": "pg-ca",
        "items": [{"key": "root.pem", "path": "root.pem"}],
    }
    assert volumes["redis-ca"]["secret"]["secretName"] == "redis-ca"
    assert volumes["database-client"]["secret"] == {
        "secretName": "pg-client",
        "defaultMode": 0o440,
        "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}],
    }
    assert gateway_toml(docs)["upstream"]["url"] == "https://q-internal.q-system.svc:8443"
    # The migration Job connects to the same database the same way.
    job = one(docs, "Job")["spec"]["template"]["spec"]
    (migrate,) = job["containers"]
    job_env = {e["name"]: e.get("value") for e in migrate["env"]}
    assert job_env["Q_A2A_DATABASE_SSLMODE"] == "verify-full"
    assert job_env["Q_A2A_DATABASE_SSL_ROOT_CERT"] == "/etc/q-a2a-gateway/database-ca/root.pem"
    assert job_env["Q_A2A_DATABASE_SSL_KEY"] == "/etc/q-a2a-gateway/database-client/tls.key"
    assert migrate["volumeMounts"] == [
        {"name": "database-ca", "mountPath": "/etc/q-a2a-gateway/database-ca", "readOnly": True},
        {"name": "database-client", "mountPath": "/etc/q-a2a-gateway/database-client", "readOnly": True},
    ]
    assert [v["secret"]["secretName"] for v in job["volumes"]] == ["pg-ca", "pg-client"]


def test_database_tls_is_verify_full_by_default():
    _, docs = rendered({})
    env = {e["name"]: e.get("value") for e in gateway_container(docs)["env"]}
    assert env["Q_A2A_DATABASE_SSLMODE"] == "verify-full"
    assert "Q_A2A_DATABASE_SSL_ROOT_CERT" not in env  # the image's trust store


def test_access_feed_and_outage_settings_reach_the_gateway():
    _, docs = rendered({})
    defaults = {
        "stranger_introspections_in_flight": 32,
        "unknown_token_rate": 20,
        "unknown_token_burst": 40,
        "trusted_proxies": ["127.0.0.0/8", "::1/128"],
    }
    assert gateway_toml(docs)["auth"] == {
        "access_feed_trust_ms": 1000,
        "feed_long_poll_ms": 300,
        "outage_read_grace_seconds": 0,
        **defaults,
    }
    _, docs = rendered(
        {"gateway": {"auth": {"accessFeedTrustMs": 800, "feedLongPollMs": 200, "outageReadGraceSeconds": 60}}}
    )
    assert gateway_toml(docs)["auth"] == {
        "access_feed_trust_ms": 800,
        "feed_long_poll_ms": 200,
        "outage_read_grace_seconds": 60,
        **defaults,
    }


def test_unknown_token_limits_and_trusted_proxies_reach_the_gateway():
    _, docs = rendered(
        {
            "gateway": {
                "auth": {
                    "strangerIntrospectionsInFlight": 16,
                    "unknownTokenRate": 5,
                    "unknownTokenBurst": 10,
                    "trustedProxies": ["10.244.0.0/16", "fd00::/8"],
                }
            }
        }
    )
    auth = gateway_toml(docs)["auth"]
    assert (
        auth["stranger_introspections_in_flight"],
        auth["unknown_token_rate"],
        auth["unknown_token_burst"],
        auth["trusted_proxies"],
    ) == (16, 5, 10, ["10.244.0.0/16", "fd00::/8"])

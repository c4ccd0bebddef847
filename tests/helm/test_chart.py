"""Checks the Helm chart with Helm itself: `helm lint --strict` and `helm template` (Helm 3,
installed by scripts/test into .tools/bin) for every values variant below, every rendered
document parsed as YAML, `values.yaml` validated against `values.schema.json` (and Helm made to
refuse unsafe values through that schema), every object validated against the Kubernetes
OpenAPI schemas bundled in kubernetes-validate (offline, strict: unknown fields are errors),
then what the gateway needs: ports, probes, the migration hook, the security context, the PDB,
secret references and proxy timeouts above the 110 s observation window. The monitoring objects
(dashboard, alert rules) are checked in test_monitoring.py.

Not checked: anything a cluster decides (admission, scheduling, whether images exist), the
PrometheusRule against the Prometheus Operator's CRD schema (not available offline; its rules
go through promtool instead), and the nginx/Envoy snippets in the chart README beyond their
timeout values.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from chart import CHART, K8S_VERSION, NAMESPACE, ROOT, lint, template, template_raw, tool, values  # noqa: E402

WINDOW_SECONDS = 110

VARIANTS = {
    "default": {},
    "sidecar-tls": {"gateway": {"tls": {"enabled": True, "secretName": "gw-tls"}}},
    "standalone": {"mode": "standalone", "gateway": {"profileEnabled": True}},
    "standalone-minimal": {
        "mode": "standalone",
        "migrations": {"enabled": False},
        "podDisruptionBudget": {"enabled": False},
        "proxy": {"ingress": {"enabled": False}},
    },
    "card-signing": {
        "cardSigning": {"secretName": "q-card-keys", "activeKey": "2026-12", "publishKeys": True}
    },
    "monitoring": {
        "monitoring": {
            "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Q"}},
            "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        }
    },
}

# Custom resources: no schema in kubernetes-validate (checked by test_monitoring.py).
CUSTOM_KINDS = {"PrometheusRule"}


def rendered(variant: str):
    return values(VARIANTS[variant]), template(VARIANTS[variant])


def of_kind(docs, kind):
    return [doc for _, doc in docs if doc["kind"] == kind]


def one(docs, kind):
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def gateway_container(docs):
    deployment = one(docs, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "q-a2a-gateway")


def gateway_config_map(docs):
    """The gateway's own ConfigMap (the monitoring variant adds the dashboard's)."""
    (found,) = [d for d in of_kind(docs, "ConfigMap") if "gateway.toml" in d["data"]]
    return found


def gateway_toml(docs):
    return tomllib.loads(gateway_config_map(docs)["data"]["gateway.toml"])


@pytest.fixture(scope="module")
def schema():
    return json.loads((CHART / "values.schema.json").read_text())


def test_helm_is_helm_3():
    version = subprocess.run(
        [tool("helm"), "version", "--template", "{{.Version}}"], capture_output=True, text=True
    ).stdout
    assert version.startswith("v3."), version


def test_values_match_the_schema(schema):
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(defaults, schema)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_lint_strict(variant):
    result = lint(VARIANTS[variant])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout
    # --strict turns warnings into failures; nothing above INFO is tolerated.
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize(
    "bad",
    [
        {"mode": "daemonset"},
        {"proxy": {"readTimeoutSeconds": 110}},
        {"gateway": {"observationWindowSeconds": 300}},
        {"containerSecurityContext": {"readOnlyRootFilesystem": False}},
        {"containerSecurityContext": {"allowPrivilegeEscalation": True}},
        {"podSecurityContext": {"runAsNonRoot": False}},
        {"secrets": {"name": ""}},
        {"gateway": {"databaseUrl": "postgres://inline"}},
        {"cardSigning": {"publishKeys": True}},
        {"cardSigning": {"activeKey": "2026-12"}},
        {"cardSigning": {"secretName": "q-card-keys", "activeKey": "no spaces"}},
        {"cardSigning": {"secretName": "q-card-keys", "privateKey": "-----BEGIN PRIVATE KEY-----"}},
        {"gateway": {"auth": {"outageReadGraceSeconds": 61}}},
        {"gateway": {"auth": {"accessFeedTrustMs": 1001}}},
        {"gateway": {"auth": {"strangerIntrospectionsInFlight": 128}}},
        {"gateway": {"auth": {"unknownTokenRate": 0}}},
        {"gateway": {"auth": {"trustedProxies": ["ingress.local"]}}},
        {"database": {"sslmode": "require"}},
        {"upstream": {"url": "ftp://q"}},
        {"networkPolicy": {"metricsFrom": []}},
    ],
)
def test_schema_refuses_unsafe_values(schema, bad):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values(bad), schema)
    # Helm applies the same schema before rendering anything.
    result = template_raw(bad)
    assert result.returncode != 0, result.stdout[:500]
    assert "schema" in result.stderr, result.stderr


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_is_valid_kubernetes(variant, schema):
    merged, docs = rendered(variant)
    jsonschema.validate(merged, schema)
    assert docs
    for source, doc in docs:
        assert doc["metadata"]["namespace"] == NAMESPACE, source
        if doc["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(copy.deepcopy(doc), K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{source}: {doc['kind']}: {e.message} at {list(e.path)}")


def test_default_is_a_q_api_deployment_with_the_gateway_sidecar():
    _, docs = rendered("default")
    kinds = sorted(doc["kind"] for _, doc in docs)
    assert kinds == sorted(
        ["ConfigMap", "Deployment", "Service", "Job", "PodDisruptionBudget", "Ingress", "NetworkPolicy"]
    )
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["name"] == "q-q-api"
    names = [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    assert names == ["q-api", "q-a2a-gateway"]
    # The sidecar reaches Q over loopback.
    config = gateway_toml(docs)
    assert config["upstream"]["url"] == "http://127.0.0.1:8090"
    assert config["profile_enabled"] is False


def test_standalone_is_the_gateway_alone_reaching_q_by_url():
    _, docs = rendered("standalone")
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["name"] == "q-q-a2a-gateway"
    names = [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    assert names == ["q-a2a-gateway"]
    config = gateway_toml(docs)
    assert config["upstream"]["url"] == "https://q-api-internal"
    assert config["profile_enabled"] is True
    ports = [p["name"] for p in one(docs, "Service")["spec"]["ports"]]
    assert ports == ["a2a", "metrics"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ports_and_probes(variant):
    merged, docs = rendered(variant)
    container = gateway_container(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"a2a": 8080, "metrics": 9090}
    config = gateway_toml(docs)
    assert config["listen"] == "0.0.0.0:8080"
    assert config["metrics_listen"] == "0.0.0.0:9090"
    scheme = "HTTPS" if merged["gateway"]["tls"]["enabled"] else "HTTP"
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "a2a",
        "scheme": scheme,
    }
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "a2a",
        "scheme": scheme,
    }
    # Readiness checks take up to 1 s each (run concurrently): the probe waits longer.
    assert container["readinessProbe"]["timeoutSeconds"] >= 2
    service_ports = {p["name"]: p["port"] for p in one(docs, "Service")["spec"]["ports"]}
    assert service_ports["a2a"] == 8080 and service_ports["metrics"] == 9090


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_security_context_and_resources(variant):
    _, docs = rendered(variant)
    pods = [d["spec"]["template"]["spec"] for d in of_kind(docs, "Deployment") + of_kind(docs, "Job")]
    for pod in pods:
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["privileged"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert c["resources"]["requests"]["cpu"]
            assert c["resources"]["limits"]["memory"]


@pytest.mark.parametrize("variant", ["default", "standalone"])
def test_migration_job_is_a_pre_install_and_pre_upgrade_hook(variant):
    _, docs = rendered(variant)
    job = one(docs, "Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(annotations["helm.sh/hook-weight"]) < 0
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["args"] == ["migrate"]
    assert container["image"] == gateway_container(docs)["image"]
    # It runs before the ConfigMap exists: everything from the (pre-existing) Secret.
    assert "volumeMounts" not in container
    assert container["env"] == [
        {
            "name": "Q_A2A_DATABASE_URL",
            "valueFrom": {"secretKeyRef": {"name": "q-a2a-gateway", "key": "database-url"}},
        },
        {"name": "Q_A2A_DATABASE_SSLMODE", "value": "verify-full"},
    ]


def test_no_migration_job_when_disabled():
    _, docs = rendered("standalone-minimal")
    assert of_kind(docs, "Job") == []
    assert of_kind(docs, "PodDisruptionBudget") == []
    assert of_kind(docs, "Ingress") == []


def test_pod_disruption_budget_selects_the_pods():
    _, docs = rendered("default")
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert one(docs, "Deployment")["spec"]["replicas"] > pdb["spec"]["minAvailable"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_credentials_come_only_from_the_secret(variant):
    _, docs = rendered(variant)
    env = {e["name"]: e for e in gateway_container(docs)["env"]}
    for name, key in [
        ("Q_A2A_DATABASE_URL", "database-url"),
        ("Q_A2A_REDIS_URL", "redis-url"),
        ("Q_A2A_CREDENTIAL_KEYS", "credential-keys"),
        ("Q_A2A_UPSTREAM_SERVICE_TOKEN", "upstream-service-token"),
        ("Q_A2A_CURSOR_KEY", "cursor-key"),
    ]:
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "q-a2a-gateway", "key": key}
        assert "value" not in env[name]
    assert env["Q_A2A_CREDENTIAL_ACTIVE_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "q-a2a-gateway",
        "key": "credential-active-key",
        "optional": True,
    }
    assert env["Q_A2A_CONFIG"]["value"] == "/etc/q-a2a-gateway/config/gateway.toml"
    mounts = {m["name"]: m for m in gateway_container(docs)["volumeMounts"]}
    assert mounts["config"] == {
        "name": "config",
        "mountPath": "/etc/q-a2a-gateway/config",
        "readOnly": True,
    }
    config_text = gateway_config_map(docs)["data"]["gateway.toml"]
    assert "service_token" not in config_text
    assert "postgres://" not in config_text and "redis://" not in config_text


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_replicas_share_the_cursor_key_and_know_they_are_several(variant):
    _, docs = rendered(variant)
    env = {e["name"]: e for e in gateway_container(docs)["env"]}
    replicas = one(docs, "Deployment")["spec"]["replicas"]
    # The gateway refuses to start with Q_A2A_REPLICAS above 1 and no cursor key; the chart
    # always passes both, the key from the Secret.
    assert env["Q_A2A_REPLICAS"]["value"] == str(replicas)
    assert env["Q_A2A_CURSOR_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "cursor-key"
    assert "optional" not in env["Q_A2A_CURSOR_KEY"]["valueFrom"]["secretKeyRef"]


def test_tls_variant_mounts_the_secret_and_configures_the_listener():
    _, docs = rendered("sidecar-tls")
    config = gateway_toml(docs)
    assert config["tls"] == {
        "cert_file": "/etc/q-a2a-gateway/tls/tls.crt",
        "key_file": "/etc/q-a2a-gateway/tls/tls.key",
    }
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "tls", "secret": {"secretName": "gw-tls"}} in pod["volumes"]
    mounts = {m["name"]: m for m in gateway_container(docs)["volumeMounts"]}
    assert mounts["tls"]["mountPath"] == "/etc/q-a2a-gateway/tls"
    ingress = one(docs, "Ingress")
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "HTTPS"


def test_card_signing_mounts_its_secret_and_configures_the_keys():
    _, docs = rendered("card-signing")
    assert gateway_toml(docs)["card_signing"] == {
        "keys_dir": "/etc/q-a2a-gateway/card-signing",
        "active_key": "2026-12",
        "publish_keys": True,
    }
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "card-signing")
    assert volume["secret"] == {"secretName": "q-card-keys", "defaultMode": 0o440}
    mounts = {m["name"]: m for m in gateway_container(docs)["volumeMounts"]}
    assert mounts["card-signing"] == {
        "name": "card-signing",
        "mountPath": "/etc/q-a2a-gateway/card-signing",
        "readOnly": True,
    }
    # The keys are files from the Secret, never values or environment variables.
    env = gateway_container(docs)["env"]
    assert not [e for e in env if "CARD_SIGNING" in e["name"]]
    # The migration Job needs no signing key.
    job = one(docs, "Job")
    assert "card-signing" not in json.dumps(job)


def test_cards_are_unsigned_unless_a_secret_is_named():
    _, docs = rendered("default")
    assert "card_signing" not in gateway_toml(docs)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert all(v["name"] != "card-signing" for v in pod["volumes"])


@pytest.mark.parametrize("variant", ["default", "standalone"])
def test_proxy_routes_v1_a2a_to_the_gateway_with_timeouts_above_the_window(variant):
    _, docs = rendered(variant)
    ingress = one(docs, "Ingress")
    annotations = ingress["metadata"]["annotations"]
    read = int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"])
    send = int(annotations["nginx.ingress.kubernetes.io/proxy-send-timeout"])
    assert read > WINDOW_SECONDS and send > WINDOW_SECONDS
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    config = gateway_toml(docs)
    # preflight checks the configured value; it must be the deployed one.
    assert config["proxy_read_timeout_seconds"] == read
    assert config["limits"]["observation_window_seconds"] <= WINDOW_SECONDS
    assert config["upstream"]["request_timeout_ms"] < WINDOW_SECONDS * 1000
    paths = {
        p["path"]: p["backend"]["service"]["port"]["name"]
        for p in ingress["spec"]["rules"][0]["http"]["paths"]
    }
    assert paths["/v1/a2a"] == "a2a"
    assert "metrics" not in paths.values(), "metrics are never exposed through the proxy"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_shutdown_grace_fits_the_termination_grace(variant):
    _, docs = rendered(variant)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > gateway_toml(docs)["shutdown_grace_seconds"]


def test_documented_proxy_snippets_exceed_the_window():
    readme = (CHART / "README.md").read_text()
    nginx = [int(v) for v in re.findall(r"proxy_read_timeout\s+(\d+)s;", readme)]
    # Route timeouts (request and stream idle) only: lines marked as connection keep-alive
    # limits are checked below, against the gateway's idle limit instead.
    envoy = [
        int(m.group(1))
        for line in readme.splitlines()
        if "idle limit" not in line
        for m in [re.search(r"(?:timeout|idle_timeout):\s*(\d+)s", line)]
        if m
    ]
    assert nginx and envoy
    assert all(v > WINDOW_SECONDS for v in nginx + envoy)
    assert "proxy_buffering off;" in readme


def test_documented_upstream_keepalive_stays_below_the_gateway_idle_limit():
    readme = (CHART / "README.md").read_text()
    config = tomllib.loads((ROOT / "config" / "gateway.toml").read_text())
    idle_limit = config["limits"]["header_read_timeout_seconds"]
    keepalive = [
        int(m.group(1))
        for line in readme.splitlines()
        if "idle limit" in line
        for m in [re.search(r"(?:keepalive_timeout\s+|idle_timeout:\s*)(\d+)s", line)]
        if m
    ]
    assert len(keepalive) == 2, "an nginx and an Envoy keep-alive example"
    assert all(v < idle_limit for v in keepalive), (keepalive, idle_limit)


def documented_config_keys() -> set[str]:
    """Key paths of config/gateway.toml, commented-out keys included (the gateway's config
    refuses unknown keys, and a unit test parses that file with the same rules)."""
    keys, section = set(), ""
    for raw in (ROOT / "config" / "gateway.toml").read_text().splitlines():
        line = raw.strip()
        if m := re.fullmatch(r"\[([a-z_.]+)\]", line):
            section = m.group(1) + "."
        elif m := re.fullmatch(r"#?\s*([a-z_]+)\s*=.*", line):
            keys.add(section + m.group(1))
    return keys


def flatten(table: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in table.items():
        if isinstance(value, dict):
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out.add(prefix + key)
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_config_uses_only_keys_the_gateway_knows(variant):
    _, docs = rendered(variant)
    unknown = flatten(gateway_toml(docs)) - documented_config_keys()
    assert not unknown, f"gateway.toml keys the gateway would refuse: {unknown}"


# The profile's figures (observation window, execution deadline, observer bounds): the chart
# ships them by rendering the window and leaving the others to the gateway's built-in defaults,
# which tests/it/lifecycle/window.rs asserts (3,600 s, 256, 16, 4).
PROFILE_FIGURES = {
    ("limits", "observation_window_seconds"): WINDOW_SECONDS,
    ("upstream", "execution_timeout_seconds"): 3600,
    ("observers", "global"): 256,
    ("observers", "per_tenant"): 16,
    ("observers", "per_principal"): 4,
}
PROFILE_ENV = {
    "Q_A2A_OBSERVATION_WINDOW_SECONDS",
    "Q_A2A_EXECUTION_TIMEOUT_SECONDS",
    "Q_A2A_OBSERVERS_GLOBAL",
    "Q_A2A_OBSERVERS_PER_TENANT",
    "Q_A2A_OBSERVERS_PER_PRINCIPAL",
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_chart_ships_the_profiles_figures(variant):
    _, docs = rendered(variant)
    config = gateway_toml(docs)
    assert config["limits"]["observation_window_seconds"] == WINDOW_SECONDS
    for (table, key), figure in PROFILE_FIGURES.items():
        # Rendered, it must be the profile's figure; absent, the gateway's default is.
        assert config.get(table, {}).get(key, figure) == figure, f"{table}.{key}"
    overridden = {e["name"] for e in gateway_container(docs).get("env", [])} & PROFILE_ENV
    assert not overridden, f"the chart overrides the profile's figures: {overridden}"

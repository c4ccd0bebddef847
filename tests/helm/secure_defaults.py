"""What a rendered release must hold to deploy securely, as one function over the rendered
objects: `violations(values, docs)` lists every breach, so a test asserts the list is empty for
each values variant and that each kind of breach is reported.

- Pods meet the Pod Security Standard "restricted" (Kubernetes 1.30): no host namespaces,
  ports or paths, only the restricted volume types, non-root (pod or every container, and no
  UID 0), no privilege or escalation, every capability dropped (NET_BIND_SERVICE the only one
  added back), RuntimeDefault or Localhost seccomp, no unsafe sysctls or AppArmor/SELinux
  overrides. Also, beyond the standard: a read-only root filesystem and no service-account
  token.
- A NetworkPolicy selects the gateway's pods, for ingress and egress.
- In standalone mode Q is reached over https://, unless upstream.allowInsecureUpstream is set.
"""

from __future__ import annotations

import tomllib

RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def pod_specs(docs) -> list[tuple[str, dict]]:
    """(object name, pod spec) of every workload rendered."""
    out = []
    for _, doc in docs:
        if doc["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            out.append((f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]["spec"]))
        elif doc["kind"] == "Pod":
            out.append((f"Pod/{doc['metadata']['name']}", doc["spec"]))
    return out


def _pod_violations(where: str, pod: dict) -> list[str]:
    found = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"{where}: {field}")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"{where}: volume {volume['name']} of type {sorted(kinds)}")
    pod_sc = pod.get("securityContext", {})
    for sysctl in pod_sc.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"{where}: sysctl {sysctl['name']}")
    if pod_sc.get("runAsUser") == 0:
        found.append(f"{where}: pod runAsUser 0")
    if pod.get("automountServiceAccountToken") is not False:
        found.append(f"{where}: service-account token mounted")
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    if not containers:
        found.append(f"{where}: no containers")
    for c in containers:
        cw = f"{where} container {c['name']}"
        sc = c.get("securityContext", {})

        def either(key, sc=sc):
            return sc.get(key, pod_sc.get(key))

        if either("runAsNonRoot") is not True:
            found.append(f"{cw}: runAsNonRoot is not true")
        if sc.get("runAsUser") == 0:
            found.append(f"{cw}: runAsUser 0")
        if sc.get("privileged"):
            found.append(f"{cw}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{cw}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            found.append(f"{cw}: capabilities not dropped (drop: [ALL])")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{cw}: capabilities added {caps['add']}")
        seccomp = (either("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{cw}: seccomp profile {seccomp!r}")
        apparmor = (either("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            found.append(f"{cw}: AppArmor profile {apparmor!r}")
        selinux = either("seLinuxOptions") or {}
        if selinux.get("type") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            found.append(f"{cw}: SELinux options {selinux}")
        if sc.get("procMount", "Default") != "Default":
            found.append(f"{cw}: procMount {sc['procMount']}")
        if sc.get("readOnlyRootFilesystem") is not True:
            found.append(f"{cw}: root filesystem writable")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                found.append(f"{cw}: hostPort {port['hostPort']}")
    return found


def _network_policy_violations(docs) -> list[str]:
    workloads = [doc for _, doc in docs if doc["kind"] == "Deployment"]
    policies = [doc for _, doc in docs if doc["kind"] == "NetworkPolicy"]
    found = []
    for deployment in workloads:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [
            p
            for p in policies
            if p["spec"]["podSelector"].get("matchLabels", {}).items() <= labels.items()
            and not p["spec"]["podSelector"].get("matchExpressions")
        ]
        types = {t for p in covering for t in p["spec"].get("policyTypes", [])}
        if not covering:
            found.append(f"Deployment/{deployment['metadata']['name']}: no NetworkPolicy selects its pods")
        elif types != {"Ingress", "Egress"}:
            found.append(
                f"Deployment/{deployment['metadata']['name']}: NetworkPolicy covers only {sorted(types)}"
            )
    return found


def _upstream_violations(values: dict, docs) -> list[str]:
    if values["mode"] != "standalone":
        return []
    found = []
    for _, doc in docs:
        if doc["kind"] == "ConfigMap" and "gateway.toml" in doc.get("data", {}):
            url = tomllib.loads(doc["data"]["gateway.toml"])["upstream"]["url"]
            if not url.startswith("https://") and not values["upstream"].get("allowInsecureUpstream"):
                found.append(f"standalone upstream {url} is not https:// and not explicitly allowed")
    return found


def violations(values: dict, docs) -> list[str]:
    """Every breach of the rules above in the objects rendered for `values`."""
    found = []
    for where, pod in pod_specs(docs):
        found += _pod_violations(where, pod)
    found += _network_policy_violations(docs)
    found += _upstream_violations(values, docs)
    return found

"""Runs the Helm chart's objects with `podman kube play` (Debian's podman 4.3 with runc, as
scripts/lib.sh's ensure_podman sets it up) against this machine's PostgreSQL and Redis.

What podman 4.3 lacks, and what this module does instead (each the controller's part, not
the chart's):

- No Job kind: the migration Job's pod template runs as a Pod, as the Job controller would.
- A Deployment with N replicas starts N pods on the same host ports: each replica is played
  as the Deployment with one replica under its own name (`<deployment>-<suffix>`).
- No Secret kind usable by secretKeyRef: the Secret is created with `podman secret create`
  in the shape podman reads (a JSON object of base64 values).
- No Service: the test reaches each pod through a `hostPort` on 127.0.0.1 added to its
  ports, and `ServiceProxy` stands in for the Service in front of the replicas.
- Probes are not run (podman would need systemd for them): `wait_ready` polls the readiness
  probe's own path and port as the kubelet would.
- terminationGracePeriodSeconds is not the stop timeout: `Replica.stop` sends SIGTERM and
  waits that long before SIGKILL, as the kubelet does.

Pods use slirp4netns networking with the host's loopback reachable at 10.0.2.2, so every
connection, the pods' and the test's, stays on this machine.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
VERSION = re.search(r'^version = "(.+)"$', (ROOT / "Cargo.toml").read_text(), re.M).group(1)
GATEWAY_IMAGE = "localhost/q-a2a-gateway"
UPSTREAM_IMAGE = "localhost/q-reference-upstream"
NETWORK = "slirp4netns:allow_host_loopback=true"
# The host's loopback as a pod sees it through slirp4netns.
HOST_FROM_POD = "10.0.2.2"


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {result.returncode}\n{result.stderr}")
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create_secret(name: str, data: dict[str, str]) -> None:
    podman("secret", "rm", name, check=False)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump({k: base64.b64encode(v.encode()).decode() for k, v in data.items()}, f)
        f.flush()
        podman("secret", "create", name, f.name)


def play(objects: list[dict]) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump_all(objects, f)
        f.flush()
        podman("kube", "play", "--network", NETWORK, f.name)


def of_kind(docs, kind) -> list[dict]:
    return [copy.deepcopy(doc) for _, doc in docs if doc["kind"] == kind]


def job_as_pod(job: dict) -> dict:
    template = job["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{job['metadata']['name']}-0", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }


def run_job(docs, timeout: float) -> subprocess.CompletedProcess:
    """Runs the rendered Job's pod to its end; returns its container's logs. Fails unless it
    exits 0 within `timeout` (the Job's activeDeadlineSeconds at most)."""
    (job,) = of_kind(docs, "Job")
    timeout = min(timeout, job["spec"]["activeDeadlineSeconds"])
    pod = job_as_pod(job)
    (container,) = pod["spec"]["containers"]
    name = f"{pod['metadata']['name']}-{container['name']}"
    podman("pod", "rm", "-f", pod["metadata"]["name"], check=False)
    play([pod])
    waited = podman("wait", name, timeout=timeout)
    logs = podman("logs", name)
    assert waited.stdout.strip() == "0", f"{name} exited {waited.stdout}\n{logs.stdout}{logs.stderr}"
    podman("pod", "rm", "-f", pod["metadata"]["name"])
    return logs


class Replica:
    """One pod of the rendered Deployment, reachable at `url` (its a2a port) on 127.0.0.1."""

    def __init__(self, docs, suffix: str, host_ports: dict[str, int]):
        (deployment,) = of_kind(docs, "Deployment")
        self.grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        deployment["metadata"]["name"] = f"{deployment['metadata']['name']}-{suffix}"
        deployment["spec"]["replicas"] = 1
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"]:
            for port in container.get("ports", []):
                port["hostIP"] = "127.0.0.1"
                port["hostPort"] = host_ports.get(port["name"]) or free_port()
        gateway = next(c for c in pod["containers"] if c["name"] == "q-a2a-gateway")
        self.probe = gateway["readinessProbe"]
        self.ports = {p["name"]: p["hostPort"] for p in gateway["ports"]}
        self.url = f"http://127.0.0.1:{self.ports['a2a']}"
        self.pod = f"{deployment['metadata']['name']}-pod-0"
        self.container = f"{self.pod}-q-a2a-gateway"
        self.containers = [c["name"] for c in pod["containers"]]
        self.objects = of_kind(docs, "ConfigMap") + [deployment]
        self.started = None

    def start(self) -> "Replica":
        self.delete()  # a pod of that name left by an interrupted run
        self.started = time.monotonic()
        play(self.objects)
        return self

    def wait_ready(self, timeout: float = 60) -> float:
        """Polls the readiness probe (its path on its port) until it passes; returns the
        seconds since `start`."""
        get = self.probe["httpGet"]
        assert get["port"] == "a2a" and get["scheme"] == "HTTP", get
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = httpx.get(f"{self.url}{get['path']}", timeout=self.probe["timeoutSeconds"])
                if last.status_code == 200:
                    return time.monotonic() - self.started
            except httpx.HTTPError as e:
                last = e
            state = podman("inspect", "--format", "{{.State.Status}}", self.container, check=False)
            assert "exited" not in state.stdout, f"{self.container} exited:\n{self.logs()}"
            time.sleep(0.2)
        raise AssertionError(f"{self.pod} not ready within {timeout} s: {last}\n{self.logs()}")

    def logs(self) -> str:
        result = podman("logs", self.container, check=False)
        return result.stdout + result.stderr

    def stop(self) -> float:
        """SIGTERM to the pod's containers, SIGKILL after terminationGracePeriodSeconds, then
        the pod's sandbox (its network), as the kubelet does; returns the seconds the
        containers took to stop. (`podman pod stop` alone stops the sandbox at once too, which
        cuts the published ports while the containers still drain.)"""
        names = [f"{self.pod}-{c}" for c in self.containers]
        started = time.monotonic()
        podman("stop", "-t", str(self.grace), *names, timeout=self.grace + 30)
        took = time.monotonic() - started
        podman("pod", "stop", self.pod, timeout=60)
        return took

    def exit_code(self) -> int:
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", self.container).stdout)

    def delete(self) -> None:
        podman("pod", "rm", "-f", self.pod, check=False)


class ServiceProxy:
    """The Service in front of the replicas, on 127.0.0.1: each connection goes to the first
    backend that accepts it, bytes relayed both ways until either side closes."""

    def __init__(self):
        self.backends: list[int] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket):
        upstream = None
        for port in list(self.backends):
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
                upstream.settimeout(None)
                break
            except OSError:
                continue
        if upstream is None:
            client.close()
            return

        def pipe(src, dst):
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)

    def close(self):
        self.listener.close()


def psql(admin_url: str, sql: str, database: str | None = None) -> str:
    url = admin_url if database is None else admin_url.rsplit("/", 1)[0] + "/" + database
    result = subprocess.run(
        ["psql", url, "-Atqc", sql], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def admin_url() -> str:
    return os.environ.get(
        "Q_A2A_TEST_DATABASE_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres"
    )

"""The chart, run: `helm template` renders it for sidecar and standalone mode, and podman
plays what it rendered (pods.py says what podman 4.3 lacks and what stands in for it) with the
images scripts/image built, against this machine's PostgreSQL and Redis:

- the images: non-root, no shell, CA bundle, within their size bound;
- the migration Job's pod completes; the Deployment's pods pass their readiness probe (the
  seconds from `kube play` to ready are the image's start-up time, within its bound);
- the official SDK client example (examples/a2a/client.py) completes a task through a pod's
  port (sidecar: Q is the reference upstream in the pod's q-api container);
- standalone, two replicas behind a stand-in Service, one reference upstream pod: a replica
  is deleted while a stream is open through it and replaced; the client recovers with the
  same messageId through the Service, and Q holds one run for the task;
- a pod given SIGTERM while a blocking SendMessage is in flight answers it, exits 0 and stops
  within terminationGracePeriodSeconds; the task is committed and completed.

Every connection is to 127.0.0.1 (the pods reach the host's loopback through slirp4netns).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helm"))
from chart import template  # noqa: E402
from pods import (  # noqa: E402
    GATEWAY_IMAGE,
    HOST_FROM_POD,
    ROOT,
    UPSTREAM_IMAGE,
    VERSION,
    Replica,
    ServiceProxy,
    admin_url,
    create_secret,
    free_port,
    play,
    podman,
    psql,
    run_job,
)

EXAMPLE = ROOT / "examples" / "a2a" / "client.py"
PYTHON = ROOT / ".venv" / "bin" / "python"
ALICE = "tok-alice"
SERVICE_TOKEN = json.loads((ROOT / "config" / "q-fixtures.json").read_text())["service_token"]
SECRET = "q-a2a-gateway"
# Bounds the README states for the images (measured values are printed; see README).
GATEWAY_IMAGE_MAX_MB = 30
UPSTREAM_IMAGE_MAX_MB = 15
READY_WITHIN_SECONDS = 10


def mb(image: str) -> float:
    return int(podman("image", "inspect", "--format", "{{.Size}}", f"{image}:{VERSION}").stdout) / 1e6


@pytest.fixture(scope="module", autouse=True)
def images():
    for image in (GATEWAY_IMAGE, UPSTREAM_IMAGE):
        found = podman("image", "exists", f"{image}:{VERSION}", check=False)
        assert found.returncode == 0, f"{image}:{VERSION} is missing: run scripts/image"


@pytest.fixture(scope="module")
def database():
    name = f"q_a2a_pods_{uuid.uuid4().hex[:12]}"
    psql(admin_url(), f"CREATE DATABASE {name}")
    yield name
    psql(admin_url(), f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def secret_for(database: str) -> None:
    base = admin_url().rsplit("/", 1)[0].replace("127.0.0.1", HOST_FROM_POD)
    create_secret(
        SECRET,
        {
            "database-url": f"{base}/{database}",
            "redis-url": f"redis://{HOST_FROM_POD}:6379",
            "credential-keys": "k1:" + base64.b64encode(os.urandom(32)).decode(),
            "upstream-service-token": SERVICE_TOKEN,
            "cursor-key": uuid.uuid4().hex,
        },
    )


def chart_values(mode: str, public_url: str, upstream_url: str | None = None) -> dict:
    values = {
        "mode": mode,
        "image": {"repository": GATEWAY_IMAGE, "tag": VERSION, "pullPolicy": "Never"},
        "gateway": {"profileEnabled": True, "publicBaseUrl": public_url},
        # The machine's PostgreSQL serves no TLS (the chart's default is verify-full).
        "database": {"sslmode": "disable"},
        "proxy": {"ingress": {"enabled": False}},
        "secrets": {"name": SECRET},
    }
    if mode == "sidecar":
        values["qApi"] = {"image": {"repository": UPSTREAM_IMAGE, "tag": VERSION, "pullPolicy": "Never"}}
    else:
        # The reference upstream serves plain HTTP: allowed here on purpose.
        values["upstream"] = {"url": upstream_url, "allowInsecureUpstream": True}
    return values


def run_example(agent_url: str, message_id: str | None = None, text: str | None = None, agent="ag-writer"):
    env = {k: v for k, v in os.environ.items() if not k.startswith("Q_A2A_") and k != "Q_API_KEY"}
    env.update({"Q_A2A_AGENT_URL": f"{agent_url}/v1/a2a/agents/{agent}", "Q_API_KEY": ALICE})
    if message_id:
        env["Q_A2A_MESSAGE_ID"] = message_id
    return subprocess.run(
        [str(PYTHON), str(EXAMPLE)] + ([text] if text else []),
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
    )


def printed(stdout: str, label: str) -> str:
    line = next((l for l in stdout.splitlines() if l.startswith(f"{label}:")), None)
    assert line, f"no {label!r} line in:\n{stdout}"
    return line.split(":", 1)[1].strip()


def completed(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert printed(result.stdout, "state") == "TASK_STATE_COMPLETED", result.stdout
    return printed(result.stdout, "task id")


def rpc(url: str, agent: str, method: str, params: dict, timeout: float = 30) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/a2a/agents/{agent}/rpc",
        json={"jsonrpc": "2.0", "id": "1", "method": method, "params": params},
        headers={"Authorization": f"Bearer {ALICE}", "A2A-Version": "1.0"},
        timeout=timeout,
    )


def message(message_id: str, text: str) -> dict:
    return {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}


def test_images_are_small_non_root_and_shell_less():
    gateway, upstream = mb(GATEWAY_IMAGE), mb(UPSTREAM_IMAGE)
    print(f"\nimage sizes: {GATEWAY_IMAGE} {gateway:.1f} MB, {UPSTREAM_IMAGE} {upstream:.1f} MB")
    assert gateway <= GATEWAY_IMAGE_MAX_MB and upstream <= UPSTREAM_IMAGE_MAX_MB
    config = json.loads(podman("image", "inspect", f"{GATEWAY_IMAGE}:{VERSION}").stdout)[0]["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["/usr/local/bin/q-a2a-gateway"] and config["Cmd"] == ["serve"]
    image = f"{GATEWAY_IMAGE}:{VERSION}"
    no_shell = podman("run", "--rm", "--entrypoint", "/bin/sh", image, "-c", "true", check=False)
    assert no_shell.returncode != 0
    # The one-shot commands are in the same binary.
    helped = podman("run", "--rm", "--network", "none", image, "--help")
    for command in ("serve", "migrate", "preflight", "retired-report", "tenant", "credentials"):
        assert command in helped.stdout, helped.stdout
    # Debian's CA bundle, readable by the non-root user (TLS to PostgreSQL, Redis and Q).
    export = subprocess.run(
        f"podman create --name ca-check-{os.getpid()} {image} >/dev/null && "
        f"podman export ca-check-{os.getpid()} | tar -t; podman rm ca-check-{os.getpid()} >/dev/null",
        shell=True, capture_output=True, text=True, timeout=60,
    )
    files = set(export.stdout.split())
    assert "etc/ssl/certs/ca-certificates.crt" in files, sorted(files)[:20]
    assert not any(f.startswith(("bin/", "usr/bin/", "sbin/")) for f in files), sorted(files)


@pytest.fixture(scope="module")
def sidecar(database):
    secret_for(database)
    port = free_port()
    docs = template(chart_values("sidecar", f"http://127.0.0.1:{port}"))
    logs = run_job(docs, timeout=120)
    assert "migrations: applied 20261009_030000_a2a_status" in logs.stdout, logs.stdout
    replica = Replica(docs, "a", {"a2a": port})
    try:
        replica.start()
        ready = replica.wait_ready()
        print(f"\nsidecar pod ready {ready:.2f} s after kube play")
        assert ready <= READY_WITHIN_SECONDS
        yield replica
    finally:
        replica.stop()
        replica.delete()


def test_sidecar_pod_serves_the_sdk_example(sidecar):
    assert httpx.get(f"{sidecar.url}/healthz", timeout=2).status_code == 200
    ready = httpx.get(f"{sidecar.url}/readyz", timeout=3)
    assert ready.status_code == 200, ready.text
    result = run_example(sidecar.url, text="Summarise the A2A profile")
    completed(result)
    assert f"-> {sidecar.url}/v1/a2a/agents/ag-writer/rpc (JSONRPC 1.0)" in result.stdout, result.stdout


def test_sidecar_pod_stops_on_sigterm_within_the_grace(sidecar):
    stopped_in = sidecar.stop()
    print(f"\nsidecar pod stopped {stopped_in:.2f} s after SIGTERM (grace {sidecar.grace} s)")
    assert stopped_in < sidecar.grace
    for container in sidecar.containers:
        code = podman("inspect", "--format", "{{.State.ExitCode}}", f"{sidecar.pod}-{container}").stdout
        assert code.strip() == "0", f"{container} exited {code}"


@pytest.fixture(scope="module")
def standalone(database):
    secret_for(database)
    upstream_port = free_port()
    upstream_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"q-reference-upstream-{os.getpid()}"},
        "spec": {
            "containers": [
                {
                    "name": "q",
                    "image": f"{UPSTREAM_IMAGE}:{VERSION}",
                    "imagePullPolicy": "Never",
                    "ports": [{"containerPort": 8090, "hostPort": upstream_port, "hostIP": "127.0.0.1"}],
                    "securityContext": {"runAsNonRoot": True, "readOnlyRootFilesystem": True},
                }
            ]
        },
    }
    play([upstream_pod])
    service = ServiceProxy()
    replicas = []
    try:
        upstream = f"http://127.0.0.1:{upstream_port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{upstream}/internal/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the reference upstream pod never answered"
            time.sleep(0.2)
        docs = template(chart_values("standalone", service.url, f"http://{HOST_FROM_POD}:{upstream_port}"))
        run_job(docs, timeout=120)

        def replica(suffix: str) -> Replica:
            r = Replica(docs, suffix, {}).start()
            replicas.append(r)
            r.wait_ready()
            service.backends.append(r.ports["a2a"])
            return r

        yield {"upstream": upstream, "service": service, "replica": replica, "database": database}
    finally:
        for r in replicas:
            r.delete()
        podman("pod", "rm", "-f", upstream_pod["metadata"]["name"], check=False)
        service.close()


def runs_of(upstream: str, task_id: str) -> list:
    response = httpx.get(f"{upstream}/admin/runs", params={"workflow_id": f"a2a-task-{task_id}"}, timeout=10)
    response.raise_for_status()
    return response.json()["runs"]


def test_replica_replaced_under_an_open_stream_leaves_one_run(standalone):
    service, upstream = standalone["service"], standalone["upstream"]
    # Q's deduplication off: a second create after the replica went away would be a second
    # run in Q's record, not hidden by Q.
    httpx.post(f"{upstream}/admin/workflow-dedup", json={"enabled": False}, timeout=10).raise_for_status()
    a = standalone["replica"]("a")
    standalone["replica"]("b")
    assert service.backends[0] == a.ports["a2a"], "new connections go to replica a first"
    completed(run_example(service.url))

    message_id, text = str(uuid.uuid4()), "A long note, streamed while its replica goes away."
    states = []
    with httpx.stream(
        "POST",
        f"{service.url}/v1/a2a/agents/ag-slower/rpc",
        json={"jsonrpc": "2.0", "id": "s", "method": "SendStreamingMessage", "params": message(message_id, text)},
        headers={"Authorization": f"Bearer {ALICE}", "A2A-Version": "1.0"},
        timeout=60,
    ) as stream:
        assert stream.status_code == 200, stream.read()
        frames = (json.loads(line[5:]) for line in stream.iter_lines() if line.startswith("data:"))
        snapshot = next(frames)["result"]["task"]
        task_id = snapshot["id"]
        # The stream is open through replica a: delete it (SIGTERM, then removal).
        stopped_in = a.stop()
        try:
            for frame in frames:
                result = frame.get("result", {})
                update = result.get("statusUpdate") or result.get("task") or {}
                states.append(update.get("status", {}).get("state"))
        except (httpx.RemoteProtocolError, httpx.ReadError):
            states.append("cut")  # the replica went away mid-stream, as a client sees it
    print(f"\nstream through replica a: {states or 'closed'} after it stopped in {stopped_in:.2f} s")
    assert "TASK_STATE_COMPLETED" not in states, "the run (about 7 s) outlived the deleted replica"
    assert stopped_in < a.grace, stopped_in
    assert a.exit_code() == 0, a.logs()
    a.delete()
    service.backends.remove(a.ports["a2a"])

    # The replacement replica, then the client recovers through the Service.
    standalone["replica"]("c")
    again = run_example(service.url, message_id=message_id, text=text, agent="ag-slower")
    assert completed(again) == task_id
    runs = runs_of(upstream, task_id)
    print(f"recovered task {task_id} through the Service: {len(runs)} run in Q")
    assert len(runs) == 1
    tasks = psql(
        admin_url(),
        f"SELECT count(*) FROM a2a_tasks WHERE message_id = '{message_id}'",
        database=standalone["database"],
    )
    assert tasks == "1"


def test_sigterm_answers_in_flight_requests_and_stops_within_the_grace(standalone):
    replica = standalone["replica"]("d")
    answer = {}

    def send():
        answer["response"] = rpc(replica.url, "ag-slow", "SendMessage", message(str(uuid.uuid4()), "drain me"), 60)

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(1.0)  # in flight: ag-slow answers in about 4 s
    assert sender.is_alive()
    stopped_in = replica.stop()
    sender.join(30)
    print(f"\npod with a request in flight stopped {stopped_in:.2f} s after SIGTERM (grace {replica.grace} s)")
    assert stopped_in < replica.grace
    assert replica.exit_code() == 0, replica.logs()
    response = answer["response"]
    assert response.status_code == 200, response.text
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    # Nothing lost: Q ran it once and the store committed it completed.
    standalone["service"].backends.remove(replica.ports["a2a"])
    assert len(runs_of(standalone["upstream"], task["id"])) == 1
    stored = psql(
        admin_url(),
        f"SELECT state FROM a2a_tasks WHERE task_id = '{task['id']}'",
        database=standalone["database"],
    )
    assert stored == "TASK_STATE_COMPLETED"

"""The benchmark runner behind scripts/bench (which builds, starts the services and the gateway
stack and installs the tools, then runs this). Every scenario is measured against the gateway
and its baselines in the same run, interleaved round by round, and reported as medians and
ratios: absolute numbers on a shared 2-core machine drift, ratios taken minutes apart much less.
Beside them, the Q calls the gateway makes per A2A request, from the reference upstream's
per-route request counts (`/admin/stats` `requests`) read before and after each gateway run.

Environment (set by scripts/bench): BENCH_GATEWAY_URL, BENCH_GATEWAY_PID, BENCH_UPSTREAM_URL,
BENCH_SERVICE_TOKEN, BENCH_BIN_DIR, BENCH_HYPER_BIN, BENCH_OHA, BENCH_PY_DB_URL,
BENCH_PGBENCH_DB_URL, BENCH_HOLDER_BIN, PG_ADMIN_URL, BENCH_METRICS_URL (the gateway's /metrics: allocations per
request when its build counts them), BENCH_DB_URL (the gateway's database), plus the gateway's own Q_A2A_* (to start extra instances
for the startup measurement).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import multiprocessing
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import chart  # noqa: E402
import held_streams  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WRK_SCRIPT = ROOT / "bench" / "wrk" / "request.lua"
TICKS = os.sysconf("SC_CLK_TCK")
AGENT = "ag-writer"
CONNECTIONS = 32
PG_CLIENTS = 16  # the gateway's database pool size (config/gateway.toml: database.pool_size)


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# --- processes ----------------------------------------------------------------------------------

class Proc:
    """A server process whose CPU and memory are read from /proc."""

    def __init__(self, name: str, pid: int | None):
        self.name, self.pid = name, pid

    def ticks(self) -> int | None:
        if not self.pid:
            return None
        return bl.cpu_ticks(Path(f"/proc/{self.pid}/stat").read_text())

    def status(self, key: str) -> int | None:
        if not self.pid:
            return None
        return bl.status_kib(Path(f"/proc/{self.pid}/status").read_text(), key)

    def reset_peak(self) -> None:
        """Resets VmHWM to the current RSS (clear_refs 5), so each run reports its own peak."""
        if self.pid:
            try:
                Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            except OSError:
                pass


def spawn_listening(cmd: list[str], env: dict | None = None, timeout: float = 60.0,
                    stderr=subprocess.DEVNULL):
    """Starts cmd and waits for its `listening on URL` line; returns (Popen, url, seconds)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True)
    deadline = started + timeout
    while time.perf_counter() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{cmd[0]} exited before listening")
        if line.startswith("listening on "):
            return proc, line.split()[-1].strip(), time.perf_counter() - started
    proc.kill()
    raise RuntimeError(f"{cmd[0]} did not listen within {timeout}s")


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- requests -----------------------------------------------------------------------------------

def rpc_body(method: str, params: dict, rpc_id: str = "1") -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params})


def send_params(message_id: str, text: str = "Summarise the A2A profile",
                immediately: bool = True) -> dict:
    params = {"message": {"messageId": message_id, "role": "ROLE_USER",
                          "parts": [{"text": text}]}}
    if immediately:
        params["configuration"] = {"returnImmediately": True}
    return params


def headers_for(token: str, version: str = "1.0", json_body: bool = True) -> dict:
    h = {"Authorization": f"Bearer {token}", "A2A-Version": version}
    if json_body:
        h["Content-Type"] = "application/json"
    return h


@dataclass
class Shape:
    """One HTTP request shape, replayed by the load generator."""
    method: str
    url: str
    headers: dict
    body: str = ""
    expect: str = ""


@dataclass
class Target:
    name: str
    proc: Proc | None
    shape: Shape | None = None      # for wrk/oha targets
    pgbench: str | None = None      # for the pgbench target: its script


@dataclass
class Scenario:
    name: str
    title: str
    targets: list[Target]
    rate: int | None = None          # fixed request rate (oha), else closed loop (wrk)
    writes: bool = False             # its requests leave work behind (tasks Q runs)
    runs: list[dict] = field(default_factory=list)


# --- load generators ----------------------------------------------------------------------------

def run_wrk(shape: Shape, seconds: float, tag: str, connections: int = CONNECTIONS) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        report = f.name
    env = dict(os.environ,
               BENCH_METHOD=shape.method, BENCH_BODY=shape.body, BENCH_EXPECT=shape.expect,
               BENCH_HEADERS="\n".join(f"{k}: {v}" for k, v in shape.headers.items()),
               BENCH_ID_PREFIX=f"{tag}-{uuid.uuid4().hex[:12]}", BENCH_REPORT=report)
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s",
           "-s", str(WRK_SCRIPT), shape.url]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, timeout=seconds + 60)
    data = json.loads(Path(report).read_text())
    os.unlink(report)
    lat = data["latency_us"]
    errors = sum(data["errors"].values()) + data["unexpected"]
    return {
        "requests": data["requests"],
        "seconds": data["duration_us"] / 1e6,
        "rps": data["requests"] / (data["duration_us"] / 1e6),
        "p50_ms": lat["p50"] / 1000, "p99_ms": lat["p99"] / 1000, "p999_ms": lat["p999"] / 1000,
        "errors": errors,
        "error_kinds": {kind: n for kind, n in
                        {**data["errors"], "unexpected": data["unexpected"]}.items() if n},
    }


def run_oha(oha: str, shape: Shape, seconds: float, rate: int) -> dict:
    cmd = [oha, "-z", f"{max(1, round(seconds))}s", "-q", str(rate), "-c", str(CONNECTIONS),
           "--latency-correction", "--no-tui", "--output-format", "json", "-m", shape.method]
    for k, v in shape.headers.items():
        cmd += ["-H", f"{k}: {v}"]
    if shape.body:
        cmd += ["-d", shape.body]
    cmd.append(shape.url)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=seconds + 60)
    data = json.loads(out.stdout)
    summary, pct = data["summary"], data["latencyPercentiles"]
    codes = data.get("statusCodeDistribution", {})
    ok = sum(n for code, n in codes.items() if str(code).startswith("2"))
    total = sum(codes.values())
    return {
        "requests": total,
        "seconds": summary["total"],
        "rps": summary["requestsPerSec"],
        "p50_ms": pct["p50"] * 1000, "p99_ms": pct["p99"] * 1000,
        "p999_ms": pct["p99.9"] * 1000,
        # Requests still in flight when -z ends are cut by oha itself: not the server's errors.
        "errors": (total - ok) + sum(n for kind, n in data.get("errorDistribution", {}).items()
                                     if kind != "aborted due to deadline"),
        "error_kinds": {**{f"HTTP {c}": n for c, n in codes.items() if not str(c).startswith("2")},
                        **data.get("errorDistribution", {})},
    }


def run_pgbench(script: str, db_url: str, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "admit.sql"
        path.write_text(script)
        cmd = ["pgbench", "-n", "-M", "prepared", "-c", str(PG_CLIENTS), "-j", "1",
               "-T", str(max(1, round(seconds))), "-f", str(path), "-l",
               f"--log-prefix={tmp}/pgb", db_url]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tmp,
                             timeout=seconds + 60)
        latencies = []
        for log_file in Path(tmp).glob("pgb*"):
            for line in log_file.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 3:
                    latencies.append(int(parts[2]) / 1000.0)
    tps = next(float(line.split()[2]) for line in out.stdout.splitlines()
               if line.startswith("tps = "))
    failed = next((int(line.split(":")[1].split()[0]) for line in out.stdout.splitlines()
                   if line.startswith("number of failed transactions")), 0)
    return {
        "requests": len(latencies), "seconds": seconds, "rps": tps,
        "p50_ms": bl.percentile(latencies, 50), "p99_ms": bl.percentile(latencies, 99),
        "p999_ms": bl.percentile(latencies, 99.9), "errors": failed,
    }


class QStats:
    """Reads Q's per-route request counts (`/admin/stats` `requests` of the reference
    upstream), to tell how many Q calls the gateway made per A2A request; and, from the
    gateway's `/metrics` when its build counts them (`--features alloc-count`), the allocations
    it made."""

    def __init__(self, upstream: str, metrics_url: str | None = None):
        self.url = f"{upstream}/admin/stats"
        self.metrics_url = metrics_url

    def allocations(self) -> float | None:
        if not self.metrics_url:
            return None
        r = httpx.get(f"{self.metrics_url}/metrics", timeout=10)
        r.raise_for_status()
        return bl.prometheus_value(r.text, "a2a_allocations_total")

    def requests(self) -> dict[str, int]:
        r = httpx.get(self.url, timeout=10)
        r.raise_for_status()
        return r.json()["requests"]


# After the load, before the second reading: calls the gateway makes for requests it already
# answered (a SendMessage's dispatch) land in the measurement that caused them.
Q_SETTLE_SECONDS = 0.5


def measure(target: Target, scenario: Scenario, seconds: float, oha: str | None,
            pg_url: str, q_stats: QStats | None = None) -> dict:
    """One timed run of one target, with the server's CPU and peak RSS over it and, for the
    gateway, the calls Q received over it."""
    proc = target.proc
    if proc:
        proc.reset_peak()
    counting = q_stats is not None and target.name.startswith("gateway")
    q_before = q_stats.requests() if counting else None
    allocs_before = q_stats.allocations() if counting else None
    t0, c0 = time.perf_counter(), proc.ticks() if proc else None
    if target.pgbench:
        result = run_pgbench(target.pgbench, pg_url, seconds)
    elif scenario.rate:
        result = run_oha(oha, target.shape, seconds, scenario.rate)
    else:
        result = run_wrk(target.shape, seconds, f"{scenario.name}-{target.name}")
    wall = time.perf_counter() - t0
    if proc:
        cpu = (proc.ticks() - c0) / TICKS
        result["cpu_cores"] = cpu / wall
        result["cpu_us_per_req"] = cpu * 1e6 / result["requests"] if result["requests"] else None
        result["peak_rss_mib"] = (proc.status("VmHWM") or 0) / 1024
    if counting:
        time.sleep(Q_SETTLE_SECONDS)
        deltas = bl.request_deltas(q_before, q_stats.requests())
        result["q_requests"] = deltas
        result["q_calls_per_request"] = bl.q_calls_per_request(deltas, result["requests"])
        allocs_after = q_stats.allocations()
        if allocs_before is not None and allocs_after is not None and result["requests"]:
            result["allocs_per_req"] = (allocs_after - allocs_before) / result["requests"]
    result["target"] = target.name
    return result


# --- setup --------------------------------------------------------------------------------------

def post(client: httpx.Client, url: str, token: str, method: str, params: dict) -> dict:
    r = client.post(url, headers=headers_for(token), content=rpc_body(method, params))
    r.raise_for_status()
    return r.json()


def seed(client: httpx.Client, base: str, nonce: str, list_count: int) -> dict:
    """A completed task (GetTask), a repeatable message (SendMessage repeat) and list_count tasks
    of another principal (ListTasks), through the server's own A2A interface."""
    rpc = f"{base}/rpc"
    done = post(client, rpc, "tok-alice", "SendMessage",
                send_params(f"seed-done-{nonce}", immediately=False))
    task = done["result"]["task"]
    deadline = time.time() + 30
    while task["status"]["state"] != "TASK_STATE_COMPLETED" and time.time() < deadline:
        time.sleep(0.2)
        task = post(client, rpc, "tok-alice", "GetTask", {"id": task["id"]})["result"]
    if task["status"]["state"] != "TASK_STATE_COMPLETED":
        raise RuntimeError(f"seed task at {base} did not complete: {task['status']}")
    post(client, rpc, "tok-alice", "SendMessage", send_params(f"seed-repeat-{nonce}"))
    for i in range(list_count):
        post(client, rpc, "tok-bob", "SendMessage", send_params(f"seed-list-{nonce}-{i}"))
    listed = post(client, rpc, "tok-bob", "ListTasks", {"pageSize": 50})["result"]
    if len(listed["tasks"]) != 50:
        raise RuntimeError(f"ListTasks at {base} returned {len(listed['tasks'])} tasks, not 50")
    return {"task_id": task["id"], "repeat_id": f"seed-repeat-{nonce}"}


def shapes_for(base: str, seeded: dict) -> dict[str, Shape]:
    rpc = f"{base}/rpc"
    return {
        "card": Shape("GET", f"{base}/.well-known/agent-card.json",
                      headers_for("tok-alice", json_body=False), expect='"supportedInterfaces"'),
        "get_task": Shape("POST", rpc, headers_for("tok-alice"),
                          rpc_body("GetTask", {"id": seeded["task_id"]}),
                          expect="TASK_STATE_COMPLETED"),
        "list_tasks": Shape("POST", rpc, headers_for("tok-bob"),
                            rpc_body("ListTasks", {"pageSize": 50}), expect='"tasks"'),
        "send_fresh": Shape("POST", rpc, headers_for("tok-alice"),
                            rpc_body("SendMessage", send_params("@ID@")), expect='"task"'),
        "send_repeat": Shape("POST", rpc, headers_for("tok-alice"),
                             rpc_body("SendMessage", send_params(seeded["repeat_id"])),
                             expect='"task"'),
        "version_rejected": Shape("POST", rpc, headers_for("tok-alice", version="0.3"),
                                  rpc_body("GetTask", {"id": seeded["task_id"]}),
                                  expect="-32009"),
    }


RUNNING_AGENT = "ag-approver"


def running_task(client: httpx.Client, gateway: str, upstream: str, service_token: str,
                 nonce: str) -> tuple[str, str]:
    """A task on ag-approver, sent through the gateway, whose run waits for an approval nobody
    gives: its id, and its run's id in Q."""
    task = post(client, f"{gateway}/v1/a2a/agents/{RUNNING_AGENT}/rpc", "tok-alice",
                "SendMessage", send_params(f"seed-running-{nonce}"))["result"]["task"]
    deadline = time.time() + 30
    while time.time() < deadline:
        r = client.get(f"{upstream}/internal/v1/runs/by-workflow/a2a-task-{task['id']}",
                       headers={"Authorization": f"Bearer {service_token}"})
        if r.status_code == 200 and r.json()["status"] == "awaiting_approval":
            return task["id"], r.json()["id"]
        time.sleep(0.2)
    raise RuntimeError(f"the running task {task['id']} never waited for its approval")


def check_shape(client: httpx.Client, shape: Shape) -> None:
    """Every request shape is checked once before it is timed: a fast wrong answer is no result."""
    body = shape.body.replace("@ID@", f"check-{uuid.uuid4().hex}")
    r = client.request(shape.method, shape.url, headers=shape.headers, content=body or None)
    if r.status_code != 200 or shape.expect not in r.text:
        raise RuntimeError(f"{shape.method} {shape.url}: HTTP {r.status_code}, "
                           f"expected {shape.expect!r} in {r.text[:300]!r}")


# --- streaming ----------------------------------------------------------------------------------

SETTLE_LIMIT_SECONDS = 300


def settle(db_url: str, upstream: str, service_token: str) -> dict:
    """Waits (at most SETTLE_LIMIT_SECONDS) until the reconciler has projected every run change
    Q's feed held when the wait began (its saved feed position, `a2a_feed_position`, at the
    feed's head): the states and artifacts of the tasks earlier scenarios made are committed,
    and what is measured next is not that backlog. Returns the wait and the backlog it began
    with."""
    r = httpx.get(f"{upstream}/internal/v1/changes/runs?after=0&wait_ms=0&limit=1",
                  headers={"Authorization": f"Bearer {service_token}"}, timeout=10)
    r.raise_for_status()
    head = r.json()["head"]

    def position() -> int:
        out = subprocess.run(["psql", "-qAt", db_url, "-c",
                              "SELECT cursor FROM a2a_feed_position WHERE id = 1"],
                             check=True, capture_output=True, text=True, timeout=30)
        return int(out.stdout.strip() or 0)

    started, first = time.perf_counter(), position()
    at = first
    while at < head and time.perf_counter() - started < SETTLE_LIMIT_SECONDS:
        time.sleep(0.5)
        at = position()
    return {"waited_s": time.perf_counter() - started, "backlog_changes": max(head - first, 0),
            "caught_up": at >= head}


def approve_in_child(upstream: str, service_token: str,
                     runs: list[tuple[str, str]]) -> list[float]:
    """Approves `runs` from a child process, one every 4 ms: the latency of each event, not a
    queue of them at once. Returns when each approval request was sent (wall clock)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(approve_paced, (upstream, service_token, runs))


def approve_paced(upstream: str, service_token: str, runs: list[tuple[str, str]]) -> list[float]:
    async def paced() -> list[float]:
        started = [0.0] * len(runs)
        headers = {"Authorization": f"Bearer {service_token}"}
        async with httpx.AsyncClient(timeout=30) as client:
            async def approve(i: int, run_id: str, approval_id: str) -> None:
                started[i] = time.time()
                r = await client.post(
                    f"{upstream}/internal/v1/runs/{run_id}/approvals/{approval_id}/approve",
                    headers=headers, json={"principal_id": "p-alice"})
                r.raise_for_status()

            sent = []
            for i, (run_id, approval_id) in enumerate(runs):
                sent.append(asyncio.create_task(approve(i, run_id, approval_id)))
                await asyncio.sleep(0.004)
            await asyncio.gather(*sent)
        return started

    return asyncio.run(paced())


def approved_event_at(r: httpx.Response) -> float | None:
    """When Q stamped the `running` event that follows the run's wait for approval."""
    r.raise_for_status()
    waited = False
    for event in r.json()["events"]:
        if event["status"] == "awaiting_approval":
            waited = True
        elif waited and event["status"] == "running":
            return rfc3339(event["at"])
    return None


def rfc3339(at: str) -> float:
    """Seconds since the epoch of an RFC 3339 UTC timestamp (fractions beyond µs dropped)."""
    whole, _, frac = at.rstrip("Z").partition(".")
    base = dt.datetime.fromisoformat(whole).replace(tzinfo=dt.timezone.utc).timestamp()
    return base + (float("0." + frac[:6]) if frac else 0.0)


async def streaming_scenario(gateway: str, upstream: str, service_token: str, gw: Proc,
                             streams: int, q_stats: QStats, holder: str) -> dict:
    """`streams` concurrent SubscribeToTask streams on tasks waiting for approval (ag-approver):
    RSS per open stream, then the time from Q's status change (the `running` event the approval
    made, stamped by Q) to the SSE statusUpdate arriving, and the Q calls the gateway made per
    A2A request over it all (the benchmark's own calls to Q, to find and approve the runs and
    read their events, taken out). The streams are read by examples/bench_stream_holder (one
    HTTP/1.1 connection each), which notes when each stream's first statusUpdate comes off its
    socket; the approvals are sent by another process. The time from each approval request is
    reported beside."""
    base = f"{gateway}/v1/a2a/agents/ag-approver"
    q_headers = {"Authorization": f"Bearer {service_token}"}
    nonce = uuid.uuid4().hex[:8]
    own_calls = {"run_by_workflow": 0, "approvals": 0, "approve": 0, "run_events": 0}
    q_before = q_stats.requests()
    limits = httpx.Limits(max_connections=streams + 16, max_keepalive_connections=streams + 16)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        async def create(i: int) -> str:
            r = await client.post(f"{base}/rpc", headers=headers_for("tok-alice"),
                                  content=rpc_body("SendMessage", send_params(f"obs-{nonce}-{i}")))
            return r.json()["result"]["task"]["id"]

        sem = asyncio.Semaphore(16)

        async def bounded(coro):
            async with sem:
                return await coro

        task_ids = await asyncio.gather(*(bounded(create(i)) for i in range(streams)))

        async def waiting_run(task_id: str) -> tuple[str, str]:
            """Q's run of the task once it waits for approval, and the pending approval."""
            for _ in range(200):
                own_calls["run_by_workflow"] += 1
                r = await client.get(f"{upstream}/internal/v1/runs/by-workflow/a2a-task-{task_id}",
                                     headers=q_headers)
                if r.status_code == 200 and r.json()["status"] == "awaiting_approval":
                    run_id = r.json()["id"]
                    own_calls["approvals"] += 1
                    a = await client.get(f"{upstream}/internal/v1/runs/{run_id}/approvals",
                                         headers=q_headers)
                    pending = [x for x in a.json()["approvals"] if x["status"] == "pending"]
                    if pending:
                        return run_id, pending[0]["id"]
                await asyncio.sleep(0.1)
            raise RuntimeError(f"task {task_id} never waited for approval")

        runs = await asyncio.gather(*(bounded(waiting_run(t)) for t in task_ids))
        await asyncio.sleep(1.0)
        rss_before = gw.status("VmRSS")

        reader = held_streams.Holder(holder, f"{base}/rpc", "tok-alice", "h1", task_ids)
        try:
            opened = await asyncio.get_running_loop().run_in_executor(None, reader.opened)
            errors = list(opened.get("errors", []))
            open_streams = opened.get("opened", 0)
            await asyncio.sleep(1.0)
            rss_open = gw.status("VmRSS")

            approvals = asyncio.get_running_loop().run_in_executor(
                None, approve_in_child, upstream, service_token, runs)
            approved_at = await approvals
            own_calls["approve"] += len(runs)
            # The events follow their approvals within milliseconds; the holder reports when
            # each arrived once it stops.
            await asyncio.sleep(2.0)
            held = await asyncio.get_running_loop().run_in_executor(None, reader.stop)
        finally:
            reader.kill()
        status_at = held.get("status_at", {})
        arrived: list[float | None] = [status_at.get(t) for t in task_ids]
        await asyncio.sleep(Q_SETTLE_SECONDS)
        deltas = bl.subtract_calls(bl.request_deltas(q_before, q_stats.requests()), own_calls)
        # Each stream is two A2A requests: the SendMessage that made its task, and the
        # SubscribeToTask.
        a2a_requests = 2 * streams
        events_at = []
        for run_id, _ in runs:
            own_calls["run_events"] += 1
            events_at.append(approved_event_at(await client.get(
                f"{upstream}/internal/v1/runs/{run_id}/events?after_seq=0&wait_ms=0",
                headers=q_headers)))
        latencies = [(a - b) * 1000 for a, b in zip(arrived, events_at)
                     if a is not None and b is not None]
        from_request = [(a - b) * 1000 for a, b in zip(arrived, approved_at)
                        if a is not None and b is not None]
        return {
            "streams": streams, "open_streams": open_streams, "errors": errors[:5],
            "rss_before_kib": rss_before, "rss_open_kib": rss_open,
            "kib_per_stream": (rss_open - rss_before) / open_streams if open_streams else None,
            "events": len(latencies),
            "event_p50_ms": bl.percentile(latencies, 50),
            "event_p99_ms": bl.percentile(latencies, 99),
            "event_max_ms": max(latencies) if latencies else None,
            "from_request_p50_ms": bl.percentile(from_request, 50),
            "from_request_p99_ms": bl.percentile(from_request, 99),
            "q_requests": deltas, "q_a2a_requests": a2a_requests,
            "q_calls_per_request": bl.q_calls_per_request(deltas, a2a_requests),
            "q_calls_by_route": bl.q_calls_by_route([{"q_requests": deltas,
                                                      "requests": a2a_requests}]),
        }


# --- startup and idle ---------------------------------------------------------------------------

def startup_samples(bin_dir: Path, count: int) -> list[dict]:
    """Starts extra gateway instances (same configuration, own ports): time from exec to the
    `listening on` line, and RSS once idle."""
    samples = []
    for _ in range(count):
        env = dict(os.environ, Q_A2A_LISTEN="127.0.0.1:0", Q_A2A_METRICS_LISTEN="127.0.0.1:0",
                   Q_A2A_RECONCILER_ENABLED="false")
        proc, _url, seconds = spawn_listening([str(bin_dir / "q-a2a-gateway"), "serve"], env)
        time.sleep(2.0)
        samples.append({"startup_ms": seconds * 1000,
                        "idle_rss_kib": Proc("gw", proc.pid).status("VmRSS")})
        stop(proc)
    return samples


# --- report -------------------------------------------------------------------------------------

def summarize(scenario: Scenario) -> dict[str, dict]:
    by_target: dict[str, dict] = {}
    for target in scenario.targets:
        runs = [r for r in scenario.runs if r["target"] == target.name]
        keys = ["rps", "p50_ms", "p99_ms", "p999_ms", "cpu_cores", "cpu_us_per_req"]
        summary = {k: bl.median(r.get(k) for r in runs) for k in keys}
        summary["peak_rss_mib"] = max((r.get("peak_rss_mib") or math.nan for r in runs),
                                      default=math.nan)
        if any(r.get("allocs_per_req") is not None for r in runs):
            summary["allocs_per_req"] = bl.median(r.get("allocs_per_req") for r in runs)
        summary["errors"] = sum(r["errors"] for r in runs)
        summary["rounds"] = len(runs)
        if any("q_requests" in r for r in runs):
            counted = [r for r in runs if r.get("q_requests") is not None]
            summary["q_calls_per_request"] = bl.median(r["q_calls_per_request"] for r in counted)
            summary["q_a2a_requests"] = sum(r["requests"] for r in counted)
            summary["q_calls_by_route"] = bl.q_calls_by_route(counted)
        by_target[target.name] = summary
    return by_target


def targets_table(results: dict) -> tuple[list[str], list[list[str]]]:
    headers = ["Scenario", "Target", "req/s", "p50 ms", "p99 ms", "p99.9 ms", "CPU cores",
               "CPU µs/req", "allocs/req", "peak RSS MiB", "errors", "gateway ÷ target (req/s)",
               "Q calls / A2A req"]
    rows = []
    for name, sc in results["scenarios"].items():
        gw = sc["targets"].get("gateway", {})
        for tname, t in sc["targets"].items():
            rel = ("" if tname.startswith("gateway")
                   else bl.fmt(bl.ratio(gw.get("rps"), t["rps"]), 2) + "x")
            calls = bl.fmt(t["q_calls_per_request"], 2) if "q_calls_per_request" in t else ""
            rows.append([sc["title"], bl.TARGET_LABEL.get(tname, tname), bl.fmt(t["rps"]),
                         bl.fmt(t["p50_ms"], 2), bl.fmt(t["p99_ms"], 2), bl.fmt(t["p999_ms"], 2),
                         bl.fmt(t["cpu_cores"], 2), bl.fmt(t["cpu_us_per_req"], 0),
                         bl.fmt(t.get("allocs_per_req", math.nan), 0),
                         bl.fmt(t["peak_rss_mib"], 1), str(t["errors"]), rel, calls])
    return headers, rows


def evaluate_targets(results: dict) -> list[dict]:
    """Every target judged over its rounds (`bl.judge`): a ratio or a difference is taken round
    by round, between targets measured one after the other in that round."""
    sc = results["scenarios"]

    def rounds(scenario, target, key):
        return bl.per_round(sc.get(scenario, {}).get("runs", []), target, key)

    def ratios(scenario, a, b, key="rps"):
        return bl.paired(rounds(scenario, a, key), rounds(scenario, b, key), bl.ratio)

    out = []

    def add(goal, values, bound, higher, shown):
        judged = bl.judge(values, bound, higher)
        out.append({"target": goal, "value": judged["value"], "bound": bound,
                    "low": judged["low"], "high": judged["high"], "rounds": judged["rounds"],
                    "verdict": judged["verdict"], "shown": shown(judged)})

    def times(digits):
        return lambda j: bl.spread(j, digits, "x")

    add("GetTask throughput ≥ 25x Python a2a-sdk", ratios("get_task", "gateway", "python"), 25,
        True, times(1))
    add("GetTask (completed): ≥ 0.3x raw hyper", ratios("get_task", "gateway", "hyper"), 0.3,
        True, times(2))
    add("GetTask p99 ≤ 0.1x Python a2a-sdk's",
        ratios("get_task", "gateway", "python", "p99_ms"), 0.1, False, times(3))
    for name in ("version_rejected", "card"):
        add(f"{sc.get(name, {}).get('title', name)}: ≥ 0.5x raw hyper",
            ratios(name, "gateway", "hyper"), 0.5, True, times(2))
    # At a fixed rate, a GetTask that reads Q (a running task: one read of its run per
    # request) against that same read sent to Q directly, in the same round.
    added = bl.paired(rounds("get_task_rate", "gateway_running", "p99_ms"),
                      rounds("get_task_rate", "upstream", "p99_ms"), lambda a, b: a - b)
    running_calls = bl.median(rounds("get_task_rate", "gateway_running", "q_calls_per_request"))
    add("Added p99 of a GetTask that reads Q (a running task) over that read sent to Q directly, "
        "at 1,000 req/s ≤ 0.5 ms", added, 0.5, False,
        lambda j: f"{bl.spread(j, 2, ' ms')}; Q calls per request "
                  f"{bl.fmt(running_calls, 2)}")
    send = sc.get("send_fresh", {}).get("runs", [])
    gw_send = bl.per_round(send, "gateway", "rps")
    add("SendMessage(returnImmediately) ≥ 0.5x pgbench of its insert",
        bl.paired(gw_send, bl.per_round(send, "pgbench", "rps"), bl.ratio), 0.5, True, times(2))
    add("SendMessage(returnImmediately) ≥ 0.3x pgbench of a single-row insert",
        bl.paired(gw_send, bl.per_round(send, "pgbench_row", "rps"), bl.ratio), 0.3, True,
        times(2))
    idle = [s / 1024 for s in results.get("startup", {}).get("idle_rss_kib_samples", [])]
    add("Idle RSS ≤ 20 MB", idle, 20 * 1e6 / 2**20, False,
        lambda j: bl.spread(j, 1, " MiB").replace("rounds", "instances"))
    for protocol, name, bound in (("h2", "HTTP/2", 8), ("h1", "HTTP/1.1", 16)):
        per = [r.get("kib_per_stream") for r in held_streams.find_all(results, protocol, 256)]
        add(f"≤ {bound} KiB per open stream over {name} (256 open)", per, bound, False,
            lambda j: bl.spread(j, 1, " KiB"))
    for protocol, name in (("h2", "HTTP/2"), ("h1", "HTTP/1.1")):
        runs = held_streams.find_all(results, protocol, 10_000)
        # Held: every stream opened and none ended while held.
        held = [r["open_streams"] - (r["ended_early"] or 0) for r in runs]

        def shown(j, runs=runs):
            if not runs:
                return "-"
            rss = [max(r["rss_open_kib"], r["rss_held_kib"]) / 1024 for r in runs]
            per = [r["kib_per_stream"] for r in runs if r["kib_per_stream"] is not None]
            return (f"{bl.fmt(j['low'], 0)} to {bl.fmt(j['high'], 0)} held over {len(runs)} "
                    f"round{'s' if len(runs) != 1 else ''}, RSS {bl.fmt(min(rss), 0)}–{bl.fmt(max(rss), 0)} MiB "
                    f"({bl.fmt(min(per), 1)}–{bl.fmt(max(per), 1)} KiB each)")
        add(f"10,000 open streams on one replica hold ({name})", held, 10_000, True, shown)
    streaming = results.get("streaming_rounds", [])
    add("A Q event reaches every open stream within 10 ms p99",
        [r.get("event_p99_ms") for r in streaming], 10, False,
        lambda j: f"{bl.spread(j, 2, ' ms')} p99 over {results.get('streaming', {}).get('events', 0)} "
                  f"streams each")
    # Warm reads ask Q nothing; what remains is background work amortised over the run (the
    # token's re-introspection every 5 s, the reconciler's passes): at most 1 call per 1,000.
    for name, goal in (("get_task", "GetTask of a completed task"), ("card", "Card (warm)"),
                       ("list_tasks", "ListTasks page (warm)")):
        add(f"{goal}: 0 Q calls per request (≤ 0.001)",
            rounds(name, "gateway", "q_calls_per_request"), 0.001, False,
            lambda j: bl.spread(j, 4))
    return out


def render_markdown(results: dict) -> str:
    m = results["machine"]
    lines = [f"Run {results['date']} ({results['mode']} mode: {results['rounds']} interleaved "
             f"round(s) of {results['seconds']:g} s per target; medians). Machine: "
             f"{m['nproc']} cores, {m['cpu']}, {m['memory_gib']:.0f} GiB; "
             f"load generators share those cores.", ""]
    headers, rows = targets_table(results)
    lines += [bl.markdown_table(headers, rows), ""]
    headers, rows = bl.calls_table(results)
    if rows:
        lines += ["Q calls per A2A request: the requests Q received while the gateway was under "
                  "load (its feed long polls, marked `(feed)`, not counted in the total), "
                  "divided by the A2A requests completed.", "",
                  bl.markdown_table(headers, rows), ""]
    st = results.get("streaming")
    if st:
        lines += [bl.markdown_table(
            ["Streams", "open", "RSS before MiB", "RSS open MiB", "KiB per stream",
             "event p50 ms", "event p99 ms", "event max ms", "events",
             "from approval request p50 / p99 ms"],
            [[str(st["streams"]), str(st["open_streams"]), bl.fmt(st["rss_before_kib"] / 1024, 1),
              bl.fmt(st["rss_open_kib"] / 1024, 1), bl.fmt(st["kib_per_stream"], 1),
              bl.fmt(st["event_p50_ms"], 2), bl.fmt(st["event_p99_ms"], 2),
              bl.fmt(st["event_max_ms"], 2), str(st["events"]),
              f'{bl.fmt(st.get("from_request_p50_ms"), 2)} / '
              f'{bl.fmt(st.get("from_request_p99_ms"), 2)}']]),
            "Event times run from the `running` event Q stamped when it took the approval to the "
            "statusUpdate coming off the client's socket (examples/bench_stream_holder.rs, "
            "one HTTP/1.1 connection per stream; the approvals come from another process).",
            ""]
    if results.get("held_streams"):
        lines += ["Streams held open by examples/bench_stream_holder.rs, each measurement on a "
                  "fresh gateway instance:", "",
                  bl.markdown_table(*held_streams.table(results["held_streams"])), ""]
    su = results.get("startup")
    if su:
        started = su.get("startup_ms_samples", [])
        lines += [f"Startup (exec to `listening on`, median of {su['samples']} instances): "
                  f"{bl.fmt(su['startup_ms'], 1)} ms"
                  + (f" ({bl.fmt(min(started), 1)}–{bl.fmt(max(started), 1)})" if started else "")
                  + f"; idle RSS {bl.fmt(su['idle_rss_mib'], 1)} MiB.", ""]
    if results.get("streaming_rounds") and len(results["streaming_rounds"]) > 1:
        p99s = ", ".join(bl.fmt(r["event_p99_ms"], 2) for r in results["streaming_rounds"])
        lines += [f"The streaming table shows the round with the median event p99; the event p99 "
                  f"of each round: {p99s} ms.", ""]
    lines += ["Each target is judged over its rounds: the median decides; MET when every round "
              "meets it too, UNSTEADY when the median does and some round does not, MISS when "
              "the median does not. A ratio or a difference is taken within each round.", "",
              bl.markdown_table(
        ["Target", "Measured: median (lowest–highest round)", "Verdict"],
        [[g["target"], g["shown"], g["verdict"]] for g in results["targets"]]), ""]
    return "\n".join(lines)


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    mem_kib = bl.status_kib(Path("/proc/meminfo").read_text(), "MemTotal") or 0
    return {"nproc": os.cpu_count(), "cpu": cpu, "memory_gib": mem_kib / 2**20,
            "kernel": platform.release()}


def json_safe(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


# --- main ---------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one round of 3 s per target")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--held-streams", default="256,10000",
                        help="comma-separated stream counts of the held_streams scenario")
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--perf", metavar="DIR",
                        help="record the gateway with `perf record -g` during its first timed "
                             "run of each scenario into DIR/SCENARIO.data (use a build with "
                             "symbols: BENCH_CARGO_PROFILE=profiling scripts/bench ...)")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = args.seconds or (3.0 if args.quick else 8.0)
    only = set(args.only.split(",")) if args.only else None
    env = os.environ
    gateway_url, upstream_url = env["BENCH_GATEWAY_URL"], env["BENCH_UPSTREAM_URL"]
    service_token = env["BENCH_SERVICE_TOKEN"]
    bin_dir = Path(env["BENCH_BIN_DIR"])
    oha = env.get("BENCH_OHA")
    gw = Proc("gateway", int(env["BENCH_GATEWAY_PID"]))
    q_stats = QStats(upstream_url, env.get("BENCH_METRICS_URL"))
    nonce = uuid.uuid4().hex[:10]

    results: dict = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                     "mode": "quick" if args.quick else "full", "rounds": rounds,
                     "seconds": seconds, "machine": machine(), "connections": CONNECTIONS,
                     "scenarios": {}}
    results["gateway_idle_rss_kib_before_load"] = gw.status("VmRSS")

    log("startup and idle RSS of fresh gateway instances")
    samples = startup_samples(bin_dir, 1 if args.quick else 3)
    results["startup"] = {
        "samples": len(samples),
        "startup_ms": bl.median(s["startup_ms"] for s in samples),
        "startup_ms_samples": [s["startup_ms"] for s in samples],
        "idle_rss_mib": bl.median(s["idle_rss_kib"] for s in samples) / 1024,
        "idle_rss_kib_samples": [s["idle_rss_kib"] for s in samples],
    }

    py_proc = hyper_proc = None
    try:
        log("starting the Python a2a-sdk baseline (uvicorn, 1 worker) and the raw hyper ceiling")
        py_proc, py_url, _ = spawn_listening(
            [sys.executable, str(ROOT / "bench" / "python_baseline.py"),
             "--database-url", env["BENCH_PY_DB_URL"], "--pool-size", str(PG_CLIENTS)])
        hyper_proc, hyper_url, _ = spawn_listening([env["BENCH_HYPER_BIN"], "127.0.0.1:0"])
        py, hyper = Proc("python", py_proc.pid), Proc("hyper", hyper_proc.pid)

        gw_base = f"{gateway_url}/v1/a2a/agents/{AGENT}"
        py_base = f"{py_url}/v1/a2a/agents/{AGENT}"
        with httpx.Client(timeout=30) as client:
            log("seeding tasks through each server's A2A interface")
            gw_seed = seed(client, gw_base, nonce, 60)
            py_seed = seed(client, py_base, nonce, 60)
            gws, pys = shapes_for(gw_base, gw_seed), shapes_for(py_base, py_seed)
            # The raw ceiling gets the gateway's exact requests; it answers them all alike.
            hy = {k: Shape(s.method, hyper_url + s.url[len(gateway_url):], s.headers, s.body,
                           '"ok"') for k, s in gws.items()}
            # A task that stays running (ag-approver, waiting for an approval nobody gives):
            # its GetTask reads its run from Q on every request; the fixed-rate scenario sends
            # that same read to Q directly beside it.
            running_id, running_run = running_task(client, gateway_url, upstream_url,
                                                   service_token, nonce)
            running_get = Shape("POST", f"{gateway_url}/v1/a2a/agents/{RUNNING_AGENT}/rpc",
                                headers_for("tok-alice"), rpc_body("GetTask", {"id": running_id}),
                                expect="TASK_STATE_INPUT_REQUIRED")
            upstream_read = Shape("GET", f"{upstream_url}/internal/v1/runs/{running_run}",
                                  {"Authorization": f"Bearer {service_token}"},
                                  expect='"awaiting_approval"')
            # The trivial table of the single-row ceiling, beside the gateway's schema.
            subprocess.run(["psql", "-q", env["BENCH_PGBENCH_DB_URL"], "-c", bl.SINGLE_ROW_SETUP],
                           check=True, stdout=subprocess.DEVNULL, timeout=60)
            pg_script = bl.pgbench_script(
                bl.read_admit_sql(ROOT),
                json.dumps({"role": "ROLE_USER", "messageId": "pgbench",
                            "parts": [{"text": "Summarise the A2A profile"}]}))

            def T(name, proc, shape=None, pgbench=None):
                return Target(name, proc, shape, pgbench)

            scenarios = [
                Scenario("card", "Authenticated card",
                         [T("gateway", gw, gws["card"]), T("python", py, pys["card"]),
                          T("hyper", hyper, hy["card"])]),
                Scenario("get_task", "GetTask (completed)",
                         [T("gateway", gw, gws["get_task"]), T("python", py, pys["get_task"]),
                          T("hyper", hyper, hy["get_task"])]),
                Scenario("list_tasks", "ListTasks (page of 50)",
                         [T("gateway", gw, gws["list_tasks"]),
                          T("python", py, pys["list_tasks"])]),
                Scenario("send_fresh", "SendMessage returnImmediately, fresh messageIds",
                         [T("gateway", gw, gws["send_fresh"]), T("python", py, pys["send_fresh"]),
                          T("pgbench", None, pgbench=pg_script),
                          T("pgbench_row", None, pgbench=bl.SINGLE_ROW_SCRIPT)],
                         writes=True),
                Scenario("send_repeat", "SendMessage returnImmediately, repeated messageId",
                         [T("gateway", gw, gws["send_repeat"]),
                          T("python", py, pys["send_repeat"])], writes=True),
                Scenario("version_rejected", "Version-rejected request (A2A-Version 0.3)",
                         [T("gateway", gw, gws["version_rejected"]),
                          T("python", py, pys["version_rejected"]),
                          T("hyper", hyper, hy["version_rejected"])]),
            ]
            if oha:
                scenarios.append(Scenario(
                    "get_task_rate", "GetTask at 1,000 req/s (oha, corrected)",
                    [T("gateway", gw, gws["get_task"]), T("gateway_running", gw, running_get),
                     T("upstream", None, upstream_read)],
                    rate=1000))
            scenarios = [s for s in scenarios if only is None or s.name in only]
            for sc in scenarios:
                for target in sc.targets:
                    if target.shape:
                        check_shape(client, target.shape)

        after_writes = False
        for sc in scenarios:
            # A scenario after the sends starts once the replica has committed what they left
            # (the runs' states and outputs), as the streaming scenario does: measured on a
            # stack busy with that backlog, a read measures the backlog too.
            settled = None
            if after_writes and not sc.writes:
                settled = settle(env["BENCH_DB_URL"], upstream_url, service_token)
                log(f"{sc.name}: waited {settled['waited_s']:.1f} s for the reconciler to "
                    f"project a backlog of {settled['backlog_changes']} run changes")
            after_writes = after_writes or sc.writes
            log(f"{sc.name}: warm-up, then {rounds} round(s) × {len(sc.targets)} targets")
            for target in sc.targets:
                measure(target, sc, 1.0, oha, env["BENCH_PGBENCH_DB_URL"])
            for rnd in range(rounds):
                order = sc.targets if rnd % 2 == 0 else list(reversed(sc.targets))
                for target in order:
                    recorder = None
                    if args.perf and rnd == 0 and target.name == "gateway":
                        Path(args.perf).mkdir(parents=True, exist_ok=True)
                        recorder = subprocess.Popen(
                            ["perf", "record", "-F", "499", "-g", "-p", str(gw.pid), "-o",
                             str(Path(args.perf) / f"{sc.name}.data")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        time.sleep(0.5)
                    result = measure(target, sc, seconds, oha, env["BENCH_PGBENCH_DB_URL"],
                                     q_stats)
                    if recorder:
                        recorder.send_signal(signal.SIGINT)
                        recorder.wait(timeout=60)
                    result["round"] = rnd
                    sc.runs.append(result)
                    log(f"  {sc.name} {target.name} round {rnd}: {result['rps']:.0f} req/s, "
                        f"p99 {result['p99_ms']:.2f} ms, errors {result['errors']}")
            results["scenarios"][sc.name] = {"title": sc.title, "rate": sc.rate,
                                             "targets": summarize(sc), "runs": sc.runs}
            if settled is not None:
                results["scenarios"][sc.name]["settled"] = settled
    finally:
        stop(py_proc)
        stop(hyper_proc)

    if only is None or "streaming" in only:
        streaming = []
        for rnd in range(rounds):
            settled = settle(env["BENCH_DB_URL"], upstream_url, service_token)
            log(f"streaming round {rnd}: {args.streams} concurrent SubscribeToTask streams on "
                f"ag-approver (after {settled['waited_s']:.1f} s for the reconciler to catch up)")
            result = asyncio.run(
                streaming_scenario(gateway_url, upstream_url, service_token, gw, args.streams,
                                   q_stats, env["BENCH_HOLDER_BIN"]))
            result["settled"] = settled
            result["round"] = rnd
            log(f"  event p99 {bl.fmt(result['event_p99_ms'], 2)} ms over {result['events']}")
            streaming.append(result)
        results["streaming_rounds"] = streaming
        # The table shows the round whose event p99 is the median; the verdict takes them all.
        results["streaming"] = sorted(
            streaming, key=lambda r: (math.isnan(r["event_p99_ms"]), r["event_p99_ms"])
        )[(len(streaming) - 1) // 2]

    if only is None or "held_streams" in only:
        counts = [int(c) for c in args.held_streams.split(",")]
        log(f"held_streams: {counts} SubscribeToTask streams over HTTP/2 and HTTP/1.1, each on "
            f"a fresh gateway")
        results["held_streams"] = held_streams.scenario(
            gateway_url, bin_dir, env["BENCH_HOLDER_BIN"], counts, rounds,
            headers_for("tok-alice"), lambda mid: rpc_body("SendMessage", send_params(mid)),
            spawn_listening, stop, lambda pid, key: Proc("gw", pid).status(key), log)

    results["targets"] = evaluate_targets(results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(json_safe(results), indent=2) + "\n")
    markdown = render_markdown(results)
    (out / "latest.md").write_text(markdown)
    if chart.render_chart(json.loads((out / "latest.json").read_text()), out / "latest.png") is None:
        log("no request scenario in this run: no chart (an older latest.png removed)")
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())

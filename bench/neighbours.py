"""The neighbours benchmark behind `scripts/bench --neighbours` (which builds, starts the
services, one reference upstream and one gateway replica with the shipped configuration, its
rate limit on, and outbound calls allowed to loopback, then runs this).

What one tenant's traffic may take from another's on a shared replica. A victim tenant
(t-acme: Alice reads, Bob writes and holds a stream) runs a fixed-rate workload: GetTask of a
completed task, ListTasks whose answer is over 16 KiB (a page of 20 tasks with their artifacts,
about 50 KiB), SendMessage (returnImmediately, fresh messageIds), and one SubscribeToTask
stream on a task waiting for an approval nobody gives, which must live through the phase. It
runs alone, then during each attack by another tenant (t-globex, Carol), in the same run, each
attack a phase of its own:

- listing flood: Carol's tenant admin pages through her tenant's outbound registrations
  (`GET /v1/a2a/agents?pageSize=100`) several listings at a time, the registrations (hundreds)
  each with a discovered card of about 60 KiB, served by a local HTTP server on 127.0.0.1;
- introspection flood: hundreds of requests in flight with made-up bearer tokens from made-up
  client addresses while Q takes 100 ms per introspection (the reference upstream's faults),
  judged against a baseline phase of its own, the victim alone while Q takes as long ("Q's
  introspection slow, no flood"): the victim's own tokens are checked with Q again every 5 s
  (auth.cache_ttl_ms), so Q's latency reaches the victim's p99 whatever the flood does;
- stalled readers: HTTP/2 cleartext connections whose stream windows are 0, holding ListTasks
  answers of about 1 MiB and 31 KiB they never read;
- a principal at its rate limit: Carol sending GetTask as fast as she can;
- store-saturating ListTasks: Carol's pages of 100 tasks with their artifacts (messages of
  8 KiB: about 0.8 MiB each) from many workers at once.

Per phase: the victim's success rate, p50 and p99 per method, whether its stream survived,
the replica's peak RSS (VmHWM, reset before the phase, and the highest VmRSS sampled) and
whether it restarted (same pid and start time, still answering /healthz); each judged against
its target (neighbours_report.py). And what the phase cost, to tell an attack that holds
something in the gateway from a machine out of cores: the CPU of the gateway, of Q, of the
PostgreSQL backends of the benchmark's database, of the victim's and the attacker's clients
and of the whole machine (/proc), PostgreSQL's transactions, the attacker's request rate and
how its requests were answered. A full run writes bench/results/neighbours.{md,json}; a
`--quick` one writes .bench/neighbours-quick.{md,json} (git-ignored), never the results.

Environment (set by scripts/bench): BENCH_GATEWAY_URL, BENCH_GATEWAY_PID, BENCH_UPSTREAM_URL,
BENCH_UPSTREAM_PID, BENCH_SERVICE_TOKEN, BENCH_METRICS_URL, BENCH_DB_URL.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import http.server
import json
import math
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import neighbours_load as load  # noqa: E402
import neighbours_report as nr  # noqa: E402
from run import TICKS, Proc, json_safe, log, machine, settle  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

VICTIM_TENANT, ATTACKER_TENANT = "t-acme", "t-globex"
# The victim's rates (requests per second), each method from two workers. Alice's reads (36/s)
# and Bob's sends (20/s) stay under the shipped per-principal rate (50/s): the victim is never
# refused for its own traffic.
VICTIM_RATES = {"GetTask": 24, "ListTasks": 12, "SendMessage": 20}
VICTIM_WORKERS = 2
VICTIM_LIST_PAGE = 20
VICTIM_TASKS = 25
VICTIM_TEXT = 2_000
# The stalled readers' tasks: ~31 KiB each, a page of 30 about 0.9 MiB (under the 1 MiB result
# bound), kept waiting for approval so a status filter lists them alone.
STALLED_TASKS = 30
STALLED_TEXT = 31_000
# The store-saturating pages: 100 completed tasks with their artifacts.
STORE_TASKS = 100
STORE_TEXT = 8_000
CARD_BYTES = 60 * 1024
SETTLE_PAUSE_S = 2.0


# --- calls for the setup ----------------------------------------------------------------------

class Setup:
    """The setup's calls to the gateway (waiting out 429s: the rate limit is on) and to the
    reference upstream's admin routes."""

    def __init__(self, gateway: str, upstream: str, service_token: str):
        self.gateway, self.upstream, self.service_token = gateway, upstream, service_token
        self.http = httpx.Client(timeout=30)

    def call(self, method: str, path: str, token: str, body=None, a2a: bool = True,
             ok=(200, 201)) -> dict:
        headers = {"Authorization": f"Bearer {token}"}
        if a2a:
            headers["A2A-Version"] = "1.0"
        for _ in range(200):
            r = self.http.request(method, f"{self.gateway}{path}", headers=headers,
                                  json=body)
            if r.status_code == 429:
                time.sleep(load.retry_after(r.headers))
                continue
            if r.status_code not in ok:
                raise RuntimeError(f"{method} {path}: HTTP {r.status_code} {r.text[:300]}")
            return r.json() if r.content else {}
        raise RuntimeError(f"{method} {path}: refused 429 200 times")

    def rpc(self, agent: str, token: str, method: str, params: dict) -> dict:
        doc = self.call("POST", f"/v1/a2a/agents/{agent}/rpc", token,
                        {"jsonrpc": "2.0", "id": "s", "method": method, "params": params})
        if "result" not in doc:
            raise RuntimeError(f"{method} on {agent}: {json.dumps(doc)[:300]}")
        return doc["result"]

    def send(self, agent: str, token: str, text: str) -> str:
        return self.rpc(agent, token, "SendMessage", {
            "message": {"messageId": f"nb-{uuid.uuid4().hex}", "role": "ROLE_USER",
                        "parts": [{"text": text}]},
            "configuration": {"returnImmediately": True}})["task"]["id"]

    def wait_total(self, agent: str, token: str, status: str, count: int,
                   limit_s: float = 120) -> None:
        deadline = time.time() + limit_s
        while True:
            total = self.rpc(agent, token, "ListTasks",
                             {"status": status, "pageSize": 1})["totalSize"]
            if total >= count:
                return
            if time.time() > deadline:
                raise RuntimeError(f"{agent}: {total} tasks {status}, not {count}")
            time.sleep(0.5)

    def admin(self, path: str, body: dict) -> None:
        self.http.post(f"{self.upstream}/admin{path}", json=body).raise_for_status()

    def page_bytes(self, agent: str, token: str, params: dict) -> tuple[int, int]:
        """The tasks on a ListTasks page and the size of its answer."""
        r = self.http.post(f"{self.gateway}/v1/a2a/agents/{agent}/rpc",
                           headers=load.a2a_headers(token),
                           content=load.rpc("ListTasks", params))
        r.raise_for_status()
        return len(r.json()["result"]["tasks"]), len(r.content)


class CardServer:
    """Serves a large agent card at any path ending in /.well-known/agent-card.json, on
    127.0.0.1 (outbound.allow_cidrs lets the gateway reach it)."""

    def __init__(self):
        card_holder: dict = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                if self.path.endswith("/.well-known/agent-card.json"):
                    body = card_holder["card"]
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                else:
                    body = b"{}"
                    self.send_response(404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        card_holder["card"] = nr.large_card(f"{self.base}/agents/0/rpc", CARD_BYTES)
        self.card_bytes = len(card_holder["card"])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def seed_victim(s: Setup) -> dict:
    """Alice's completed tasks (ListTasks pages of ~50 KiB, a GetTask target) and Bob's task
    waiting for approval (the stream's)."""
    ids = [s.send("ag-writer", "tok-alice", ("victim task %d " % i) * (VICTIM_TEXT // 14))
           for i in range(VICTIM_TASKS)]
    stream_task = s.send("ag-approver", "tok-bob", "wait for an approval nobody gives")
    s.wait_total("ag-writer", "tok-alice", "TASK_STATE_COMPLETED", VICTIM_TASKS)
    s.wait_total("ag-approver", "tok-bob", "TASK_STATE_INPUT_REQUIRED", 1)
    tasks, size = s.page_bytes("ag-writer", "tok-alice",
                               {"pageSize": VICTIM_LIST_PAGE, "includeArtifacts": True})
    if tasks != VICTIM_LIST_PAGE or not 16 * 1024 < size < 1024 * 1024:
        raise RuntimeError(f"the victim's ListTasks page: {tasks} tasks, {size} bytes")
    return {"get_task_id": ids[0], "stream_task_id": stream_task, "list_page_bytes": size}


def seed_attacker(s: Setup) -> dict:
    """Carol's tasks: ~31 KiB ones waiting for approval (the stalled readers' pages, listed by
    status), a completed one (the rate-limited GetTask) and 100 completed ones of 8 KiB with
    their artifacts committed (the store-saturating pages)."""
    s.admin("/agents/ag-globex/approval", {"required": True})
    try:
        for i in range(STALLED_TASKS):
            s.send("ag-globex", "tok-carol", ("s%02d " % i) * (STALLED_TEXT // 4))
        s.wait_total("ag-globex", "tok-carol", "TASK_STATE_INPUT_REQUIRED", STALLED_TASKS)
    finally:
        s.admin("/agents/ag-globex/approval", {"required": False})
    get_target = s.send("ag-globex", "tok-carol", "a short one")
    for i in range(STORE_TASKS):
        s.send("ag-globex", "tok-carol", ("heavy %03d " % i) * (STORE_TEXT // 10))
    s.wait_total("ag-globex", "tok-carol", "TASK_STATE_COMPLETED", STORE_TASKS + 1)
    store_params = {"pageSize": STORE_TASKS, "includeArtifacts": True,
                    "status": "TASK_STATE_COMPLETED"}
    store_page = s.page_bytes("ag-globex", "tok-carol", store_params)
    large = s.page_bytes("ag-globex", "tok-carol",
                         {"pageSize": STALLED_TASKS, "status": "TASK_STATE_INPUT_REQUIRED"})
    small = s.page_bytes("ag-globex", "tok-carol",
                         {"pageSize": 1, "status": "TASK_STATE_INPUT_REQUIRED"})
    if large[0] != STALLED_TASKS or small[0] != 1 or store_page[0] < STORE_TASKS // 2:
        raise RuntimeError(f"attacker pages: {large}, {small}, {store_page}")
    return {"get_task_id": get_target, "store_params": store_params,
            "store_page": store_page, "large_page": large, "small_page": small}


def register_agents(s: Setup, cards: CardServer, count: int) -> dict:
    """`count` registrations of Carol's tenant, each discovered (two at a time: the
    principal's discovery slots), each card stored."""
    started = time.perf_counter()
    ids = [s.call("POST", "/v1/a2a/agents", "tok-carol-admin",
                  {"name": f"neighbour-{i}", "endpoint": f"{cards.base}/agents/{i}/rpc"},
                  a2a=False)["id"] for i in range(count)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda i: s.call("POST", f"/v1/a2a/agents/{i}/discover",
                                       "tok-carol-admin", a2a=False), ids))
    one = s.call("GET", f"/v1/a2a/agents/{ids[-1]}", "tok-carol-admin", a2a=False)
    if not isinstance(one.get("discoveredCard"), dict):
        raise RuntimeError(f"no discovered card: {json.dumps(one)[:300]}")
    return {"registrations": count, "card_bytes": cards.card_bytes,
            "seconds": time.perf_counter() - started}


# --- the replica ------------------------------------------------------------------------------

class RssSampler:
    """The highest VmRSS of the replica, read every 50 ms while it runs."""

    def __init__(self, proc: Proc):
        self.proc, self.peak_kib, self.running = proc, 0, True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            try:
                self.peak_kib = max(self.peak_kib, self.proc.status("VmRSS") or 0)
            except OSError:
                return
            time.sleep(0.05)

    def stop(self) -> int:
        self.running = False
        self.thread.join(timeout=5)
        return self.peak_kib


def peak_reset(proc: Proc) -> bool:
    """Resets VmHWM (Proc.reset_peak); whether it took (the peak then reads the RSS of now)."""
    proc.reset_peak()
    hwm, rss = proc.status("VmHWM"), proc.status("VmRSS")
    return hwm is not None and rss is not None and hwm <= rss + 1024


def same_replica(proc: Proc, started: int, gateway: str) -> bool:
    """Still the process that started (pid and start time), not a zombie, and answering."""
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except OSError:
        return False
    if nr.start_time(stat) != started or stat[stat.rindex(")") + 2] == "Z":
        return False
    try:
        return httpx.get(f"{gateway}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def counters(metrics_url: str | None) -> dict:
    """The refusal counters of the replica's /metrics (each summed over its labels)."""
    if not metrics_url:
        return {}
    try:
        text = httpx.get(f"{metrics_url}/metrics", timeout=10).text
    except httpx.HTTPError:
        return {}
    names = ["a2a_response_buffer_refusals_total", "a2a_stalled_connections_closed_total",
             "a2a_introspections_shed_total", "a2a_unknown_tokens_limited_total",
             "a2a_store_share_refusals_total"]
    return {n: nr.metric_sum(text, n) for n in names}


def pg_reading(db_url: str) -> tuple[int | None, dict[int, tuple[int, int]]]:
    """The benchmark database's transactions so far, and each of its backends' start time and
    CPU ticks (`{pid: (start, ticks)}`); (None, {}) when psql fails."""
    try:
        out = subprocess.run(["psql", "-qAt", db_url, "-c", nr.PG_READING_SQL], check=True,
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None, {}
    xacts, pids = nr.parse_pg_reading(out)
    backends = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        backends[pid] = (nr.start_time(stat), bl.cpu_ticks(stat))
    return xacts, backends


class CostMeter:
    """What a phase cost, from the moment it is made to `stop`: the CPU of the gateway, of Q
    (the reference upstream), of the benchmark database's PostgreSQL backends and of the
    machine, each in % of one core, and PostgreSQL's transactions per second."""

    def __init__(self, gw: Proc, upstream: Proc, db_url: str):
        self.gw, self.upstream, self.db_url = gw, upstream, db_url
        self.cores = os.cpu_count() or 1
        self.xacts, self.backends = pg_reading(db_url)
        self.gw_ticks, self.up_ticks = self._ticks(gw), self._ticks(upstream)
        self.machine = nr.machine_ticks(Path("/proc/stat").read_text())
        self.started = time.perf_counter()

    @staticmethod
    def _ticks(proc: Proc) -> int | None:
        try:
            return proc.ticks()
        except OSError:
            return None

    def stop(self, victim_cpu_s: float | None, attacker_cpu_s: float | None) -> dict:
        seconds = time.perf_counter() - self.started
        machine_now = nr.machine_ticks(Path("/proc/stat").read_text())
        gw_now, up_now = self._ticks(self.gw), self._ticks(self.upstream)
        xacts, backends = pg_reading(self.db_url)

        def delta(now, then):
            return None if now is None or then is None else now - then

        def client(cpu_s):
            return math.nan if cpu_s is None else 100.0 * cpu_s / seconds

        return {
            "seconds": seconds, "cores": self.cores,
            "gateway_cpu_pct": nr.cpu_pct(delta(gw_now, self.gw_ticks), TICKS, seconds),
            "upstream_cpu_pct": nr.cpu_pct(delta(up_now, self.up_ticks), TICKS, seconds),
            "postgres_cpu_pct": nr.cpu_pct(nr.ticks_used(self.backends, backends)
                                           if backends else None, TICKS, seconds),
            "postgres_backends": len(backends),
            "postgres_xact_per_s": (delta(xacts, self.xacts) / seconds
                                    if delta(xacts, self.xacts) is not None else math.nan),
            "victim_cpu_pct": client(victim_cpu_s),
            "attacker_cpu_pct": client(attacker_cpu_s),
            "machine_busy_pct": nr.machine_busy_pct(self.machine, machine_now, self.cores),
        }


# --- the phases -------------------------------------------------------------------------------

def attack_configs(seeded: dict) -> dict:
    a = seeded["attacker"]
    return {
        "listing": {"token": "tok-carol-admin", "workers": 8, "ramp_s": 1.0},
        "introspection": {"agent": "ag-globex", "workers": 300, "ramp_s": 1.5},
        "stalled": {"agent": "ag-globex", "token": "tok-carol", "in_flight": 6,
                    "large_connections": 12, "per_large": 12,
                    "large_params": {"pageSize": STALLED_TASKS,
                                     "status": "TASK_STATE_INPUT_REQUIRED"},
                    "small_connections": 8, "per_small": 64,
                    "small_params": {"pageSize": 1, "status": "TASK_STATE_INPUT_REQUIRED"}},
        "rate_limit": {"agent": "ag-globex", "token": "tok-carol", "method": "GetTask",
                       "params": {"id": a["get_task_id"]}, "workers": 64, "ramp_s": 1.0},
        "store": {"agent": "ag-globex", "token": "tok-carol", "method": "ListTasks",
                  "params": a["store_params"], "workers": 32, "pause_s": 0.02,
                  "ramp_s": 1.0},
    }


def describe_attacks(cfg: dict, seeded: dict) -> dict[str, str]:
    a, s = cfg["attacks"], seeded["attacker"]
    reg = seeded["registrations"]
    return {
        "listing": f"{a['listing']['workers']} listings at a time by Carol's tenant admin, "
                   f"pageSize 100, through {reg['registrations']} registrations, each with a "
                   f"discovered card of {reg['card_bytes'] / 1024:.0f} KiB",
        "introspection_alone": "no attacker; Q takes "
                               f"{nr.INTROSPECT_DELAY_MS} ms per introspection, as during the "
                               "introspection flood: the victim's own tokens, whose "
                               "introspections are reused for 5 s (auth.cache_ttl_ms), each "
                               "wait for Q about once per 5 s. The introspection flood's p99s "
                               "are judged against this phase's",
        "introspection": f"{a['introspection']['workers']} requests in flight, each a fresh "
                         "made-up token from a made-up client address (X-Forwarded-For through "
                         f"the trusted loopback proxy); Q takes {nr.INTROSPECT_DELAY_MS} ms per "
                         "introspection (the victim's tokens' too); a request refused at once "
                         "waits 100 ms before its next",
        "stalled": f"{a['stalled']['large_connections']} HTTP/2 connections holding pages of "
                   f"{s['large_page'][1] / 1024:.0f} KiB (at most {a['stalled']['per_large']} "
                   f"each), then {a['stalled']['small_connections']} holding pages of "
                   f"{s['small_page'][1] / 1024:.0f} KiB (at most {a['stalled']['per_small']} "
                   f"each), stream windows 0, {a['stalled']['in_flight']} requests waiting at "
                   "once; each connection stops at its first refusal",
        "rate_limit": f"GetTask from {a['rate_limit']['workers']} connections, each sending "
                      "again as soon as it is answered",
        "store": f"ListTasks pages of {s['store_page'][0]} tasks with their artifacts "
                 f"({s['store_page'][1] / 1024:.0f} KiB) from {a['store']['workers']} "
                 f"workers; a refused one waits {a['store']['pause_s'] * 1000:.0f} ms",
    }


def run_phase(name: str, rnd: int, cfg: dict, env: dict, gw: Proc, upstream: Proc,
              started: int, victims: concurrent.futures.ProcessPoolExecutor,
              seconds: float) -> dict:
    ctx = multiprocessing.get_context("spawn")
    waited = settle(env["BENCH_DB_URL"], env["BENCH_UPSTREAM_URL"], env["BENCH_SERVICE_TOKEN"])
    before = counters(env.get("BENCH_METRICS_URL"))
    hwm_reset = peak_reset(gw)
    rss_start = gw.status("VmRSS") or 0
    sampler = RssSampler(gw)
    attacker = results = stop_event = None
    attack: dict = {}
    victim: dict = {}
    q_slow = name in nr.Q_SLOW_PHASES
    if q_slow:
        httpx.post(f"{env['BENCH_UPSTREAM_URL']}/admin/faults",
                   json={"introspect_delay_ms": nr.INTROSPECT_DELAY_MS,
                         "introspect_delay_count": 1_000_000},
                   timeout=10).raise_for_status()
    meter = CostMeter(gw, upstream, env["BENCH_DB_URL"])
    try:
        if name not in nr.BASELINE_PHASES:
            ready, stop_event, results = ctx.Event(), ctx.Event(), ctx.Queue()
            attacker = ctx.Process(target=load.attack_main,
                                   args=(name, cfg, ready, stop_event, seconds + 60, results))
            attacker.start()
            if not ready.wait(timeout=60):
                log(f"  {name}: the attack was not under way within 60 s; measuring anyway")
        victim = victims.submit(load.victim_main, cfg, seconds).result(timeout=seconds + 120)
    finally:
        if attacker is not None:
            stop_event.set()
            try:
                attack = results.get(timeout=60)
            except Exception as e:  # noqa: BLE001 - a lost tally is reported, not fatal
                attack = {"error": f"no tally: {e}"}
            attacker.join(timeout=30)
            if attacker.is_alive():
                attacker.kill()
        costs = meter.stop(victim.get("cpu_seconds"), attack.get("cpu_seconds"))
        if q_slow:
            httpx.post(f"{env['BENCH_UPSTREAM_URL']}/admin/faults",
                       json={"introspect_delay_count": 0}, timeout=10).raise_for_status()
    time.sleep(0.5)
    sampled = sampler.stop()
    hwm = gw.status("VmHWM") or 0
    peak_kib = max(sampled, hwm) if hwm_reset else sampled
    after = counters(env.get("BENCH_METRICS_URL"))
    return {
        "round": rnd, "phase": name, "victim": nr.victim_summary(victim),
        "attacker": attack, "peak_rss_mib": peak_kib / 1024, "start_rss_mib": rss_start / 1024,
        "vmhwm_mib": hwm / 1024,
        "sampled_rss_mib": sampled / 1024, "vmhwm_reset": hwm_reset,
        "restarted": not same_replica(gw, started, env["BENCH_GATEWAY_URL"]),
        "counters": nr.metric_deltas(before, after), "settled": waited, "costs": costs,
    }


def log_phase(r: dict) -> None:
    v, c = r["victim"], r["costs"]
    per = ", ".join(f"{m} p99 {bl.fmt(v['methods'][m]['p99_ms'], 1)} ms" for m in nr.METHODS)
    log(f"  {r['phase']} round {r['round']}: victim {bl.fmt(v['overall']['success_pct'], 1)} % "
        f"ok ({per}), stream {'survived' if v['stream']['survived'] else 'LOST'}, peak RSS "
        f"{bl.fmt(r['peak_rss_mib'], 1)} MiB, restarted {r['restarted']}; CPU % of a core: "
        f"gateway {bl.fmt(c['gateway_cpu_pct'], 0)}, PostgreSQL "
        f"{bl.fmt(c['postgres_cpu_pct'], 0)}, machine {bl.fmt(c['machine_busy_pct'], 0)} of "
        f"{c['cores'] * 100}; attacker {bl.fmt(r['attacker'].get('requests_per_s'), 0)} req/s, "
        f"{nr.describe_tally(r['attacker'].get('answers', {}))}"
        + (f" {r['attacker']['error']}" if r["attacker"].get("error") else ""))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--neighbours", action="store_true", help="(scripts/bench's switch)")
    parser.add_argument("--quick", action="store_true",
                        help="one round of 4 s phases, 100 registrations; results to "
                             ".bench/neighbours-quick.{md,json}")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--registrations", type=int)
    attacks = [p for p in nr.PHASES if p not in nr.BASELINE_PHASES]
    parser.add_argument("--only", help=f"comma-separated attacks ({','.join(attacks)}); the "
                                       "victim alone and each attack's baseline run too")
    parser.add_argument("--out", help="directory of the results")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = args.seconds or (4.0 if args.quick else 8.0)
    registrations = args.registrations or (100 if args.quick else 300)
    try:
        phases = nr.phases_to_run(args.only)
    except ValueError as e:
        parser.error(str(e))
    out = Path(args.out) if args.out else (
        ROOT / ".bench" if args.quick else ROOT / "bench" / "results")
    stem = "neighbours-quick" if args.quick and not args.out else "neighbours"
    env = dict(os.environ)
    gateway = env["BENCH_GATEWAY_URL"]
    gw = Proc("gateway", int(env["BENCH_GATEWAY_PID"]))
    upstream = Proc("upstream", int(env.get("BENCH_UPSTREAM_PID") or 0) or None)
    started = nr.start_time(Path(f"/proc/{gw.pid}/stat").read_text())
    t0 = time.perf_counter()

    s = Setup(gateway, env["BENCH_UPSTREAM_URL"], env["BENCH_SERVICE_TOKEN"])
    cards = CardServer()
    log("seeding the victim's tasks (t-acme) and the attacker's (t-globex)")
    seeded = {"victim": seed_victim(s), "attacker": seed_attacker(s)}
    if "listing" in phases:
        log(f"registering {registrations} remote agents in t-globex, each card discovered")
        seeded["registrations"] = register_agents(s, cards, registrations)
    else:
        seeded["registrations"] = {"registrations": 0, "card_bytes": cards.card_bytes}
    cfg = {
        "gateway": gateway,
        "victim": {"agent": "ag-writer", "reader_token": "tok-alice", "writer_token": "tok-bob",
                   "get_task_id": seeded["victim"]["get_task_id"],
                   "list_page_size": VICTIM_LIST_PAGE, "rates": VICTIM_RATES,
                   "workers": VICTIM_WORKERS, "stream_agent": "ag-approver",
                   "stream_task_id": seeded["victim"]["stream_task_id"]},
        "attacks": attack_configs(seeded),
    }
    setup_s = time.perf_counter() - t0
    log(f"set up in {setup_s:.0f} s; {rounds} round(s) of {len(phases)} phases, "
        f"{seconds:.0f} s each")

    runs: dict[str, list] = {p: [] for p in phases}
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as victims:
        # The victim's tokens introspected and its connections' first costs paid.
        victims.submit(load.victim_main, dict(cfg, victim=dict(cfg["victim"],
                                                               stream_task_id=None)),
                       2.0).result(timeout=120)
        for rnd in range(rounds):
            for name in phases:
                r = run_phase(name, rnd, cfg, env, gw, upstream, started, victims, seconds)
                log_phase(r)
                runs[name].append(r)
                time.sleep(SETTLE_PAUSE_S)

    results: dict = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": "quick" if args.quick else "full", "rounds_run": rounds, "seconds": seconds,
        "machine": machine(),
        "config": {"victim_tenant": VICTIM_TENANT, "attacker_tenant": ATTACKER_TENANT,
                   "victim_rates": VICTIM_RATES, "victim_workers": VICTIM_WORKERS,
                   "rate_limit": f"{env.get('Q_A2A_RATE_LIMIT_PER_SECOND', '50')}/s, burst "
                                 f"{env.get('Q_A2A_RATE_LIMIT_BURST', '100')} per principal",
                   "introspect_delay_ms": nr.INTROSPECT_DELAY_MS, "attacks": cfg["attacks"]},
        "seeded": seeded, "phases": {},
        "attacks": {k: v for k, v in describe_attacks(cfg, seeded).items() if k in phases},
        "setup_seconds": setup_s,
    }
    judged = nr.judge_runs(runs)
    for name in phases:
        results["phases"][name] = {"title": nr.PHASES[name], "rounds": runs[name],
                                   "targets": judged[name]}
    results["total_seconds"] = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(json_safe(results), indent=2) + "\n")
    markdown = nr.render(results)
    (out / f"{stem}.md").write_text(markdown)
    print(markdown)
    log(f"results in {out / stem}.{{md,json}} ({results['total_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

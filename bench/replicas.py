"""The replica benchmark behind `scripts/bench --replicas N` (which builds, starts the services,
one reference upstream and N gateways on one PostgreSQL database and one Redis, then runs this).

Each scenario loads every replica at once (one wrk per replica, CONNECTIONS split between them,
as a load balancer would) and reports per replica and in total: requests per second, CPU per
request and per core, and what each A2A request cost the shared services, from their own
counters: PostgreSQL transactions, table scans and rows written (pg_stat_database and
pg_stat_user_tables of the gateways' database), Redis commands (INFO stats), calls to Q (the
reference upstream's per-route counts, feed long polls excluded). The figures feed the sizing
formula of docs/operations.md ("Capacity"); the run prints it for the example load there.

Environment (set by scripts/bench): BENCH_GATEWAY_URLS, BENCH_GATEWAY_PIDS (space-separated,
one per replica), BENCH_UPSTREAM_URL, BENCH_SERVICE_TOKEN, BENCH_DB_URL, BENCH_REDIS_URL.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import capacity as cap  # noqa: E402
from run import (AGENT, CONNECTIONS, TICKS, Proc, QStats, check_shape, json_safe,  # noqa: E402
                 log, machine, run_wrk, seed, shapes_for)

ROOT = Path(__file__).resolve().parent.parent
# In this order: the fresh sends come last, so the work their tasks cause after they are
# answered (the run feed reporting each run's end, its output committed) is counted with them,
# within the run and the settling time after it, and with no other scenario.
SCENARIOS = {
    "card": "Authenticated card",
    "version_rejected": "Version-rejected request (A2A-Version 0.3)",
    "get_task": "GetTask (completed)",
    "list_tasks": "ListTasks (page of 50)",
    "send_repeat": "SendMessage returnImmediately, repeated messageId",
    "send_fresh": "SendMessage returnImmediately, fresh messageIds",
}
EXAMPLE = cap.EXAMPLE


def pg_stats(db_url: str) -> dict[str, int]:
    out = subprocess.run(["psql", "-Atq", db_url, "-c", cap.PG_STATS_SQL], check=True,
                         capture_output=True, text=True, timeout=60)
    return cap.parse_pg_stats(out.stdout)


def pg_connections(db_url: str) -> int:
    """Connections to the gateways' database, this reading's own excluded."""
    out = subprocess.run(
        ["psql", "-Atq", db_url, "-c",
         "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
         "AND pid <> pg_backend_pid()"],
        check=True, capture_output=True, text=True, timeout=60)
    return int(out.stdout.strip())


def redis_total(redis_url: str) -> int:
    out = subprocess.run(["redis-cli", "-u", redis_url, "INFO", "stats"], check=True,
                         capture_output=True, text=True, timeout=30)
    return cap.redis_commands(out.stdout)


def measure(name: str, shapes: list, procs: list[Proc], seconds: float, env: dict,
            q_stats: QStats) -> dict:
    """One timed run of every replica at once, with the shared services' counters around it."""
    connections = max(4, CONNECTIONS // len(shapes))
    time.sleep(cap.PG_STATS_SETTLE_SECONDS)
    pg_before, redis_before = pg_stats(env["BENCH_DB_URL"]), redis_total(env["BENCH_REDIS_URL"])
    q_before = q_stats.requests()
    ticks_before = [p.ticks() for p in procs]
    t0 = time.perf_counter()
    # One worker per replica's wrk and one for the connection sampler: every wrk starts at once.
    with ThreadPoolExecutor(len(shapes) + 1) as pool:
        peak_connections = pool.submit(watch_connections, env["BENCH_DB_URL"], seconds)
        runs = list(pool.map(lambda shape: run_wrk(shape, seconds, name, connections), shapes))
    wall = time.perf_counter() - t0
    for run, proc, before in zip(runs, procs, ticks_before):
        run["cpu_seconds"] = (proc.ticks() - before) / TICKS
        run["cpu_cores"] = run["cpu_seconds"] / wall
        run["cpu_us_per_req"] = cap.per_request(run["cpu_seconds"] * 1e6, run["requests"])
    redis_after = redis_total(env["BENCH_REDIS_URL"])
    time.sleep(cap.PG_STATS_SETTLE_SECONDS)
    pg_after = pg_stats(env["BENCH_DB_URL"])
    q_deltas = bl.request_deltas(q_before, q_stats.requests())
    total = cap.combine(runs)
    requests = total["requests"]
    total.update({
        "pg_connections_peak": peak_connections.result(),
        "pg_per_request": {k: cap.per_request(pg_after[k] - pg_before[k], requests)
                           for k in cap.PG_FIELDS},
        # The two INFO calls of this reading are the only ones the benchmark makes.
        "redis_per_request": cap.per_request(redis_after - redis_before - 1, requests),
        "q_calls_per_request": bl.q_calls_per_request(q_deltas, requests),
        "q_requests": q_deltas,
    })
    return {"replicas": runs, "total": total}


def watch_connections(db_url: str, seconds: float) -> int:
    """The most connections the gateways held to their database, sampled through a run."""
    peak, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        peak = max(peak, pg_connections(db_url))
        time.sleep(0.5)
    return peak


def costs(results: dict) -> dict[str, cap.MethodCost]:
    out = {}
    for name, sc in results["scenarios"].items():
        t = sc["total"]
        out[name] = cap.MethodCost(cpu_us=t["cpu_us_per_req"],
                                   pg_transactions=t["pg_per_request"]["transactions"],
                                   redis_commands=t["redis_per_request"],
                                   q_calls=t["q_calls_per_request"])
    return out


def render(results: dict) -> str:
    n = results["replica_count"]
    lines = [f"Run {results['date']}: {n} gateway replica(s) on one PostgreSQL database and one "
             f"Redis, one reference upstream; {results['seconds']:.0f} s per scenario, every "
             f"replica loaded at once (wrk, {results['connections_per_replica']} connections "
             f"each). Machine: {results['machine']['nproc']} cores, shared by the replicas, "
             "the load generators, PostgreSQL and Redis.", ""]
    rows = []
    for name, sc in results["scenarios"].items():
        t = sc["total"]
        per = " / ".join(bl.fmt(r["rps"], 0) for r in sc["replicas"])
        pg = t["pg_per_request"]
        rows.append([sc["title"], bl.fmt(t["rps"], 0), per, bl.fmt(t["cpu_us_per_req"], 0),
                     bl.fmt(t["rps_per_core"], 0), bl.fmt(pg["transactions"], 2),
                     bl.fmt(pg["scans"], 2), bl.fmt(pg["rows_written"], 2),
                     str(t["pg_connections_peak"]), bl.fmt(t["redis_per_request"], 3),
                     bl.fmt(t["q_calls_per_request"], 2), str(t["errors"])])
    lines += [bl.markdown_table(
        ["Scenario", "req/s total", "req/s per replica", "CPU µs/req", "req/s per core",
         "PG transactions/req", "PG scans/req", "PG rows written/req", "PG connections (peak)",
         "Redis commands/req", "Q calls/req", "errors"], rows), ""]
    sized = results.get("example")
    if sized:
        lines += [f"Sized from these figures (docs/operations.md, \"Sizing\"): "
                  f"{EXAMPLE.rps:,.0f} req/s ({', '.join(f'{s:.0%} {m}' for m, s in EXAMPLE.mix.items())}) "
                  f"and {EXAMPLE.streams:,} open streams need {bl.fmt(sized['cores'], 2)} cores: "
                  f"{sized['replicas']} replicas of 1 core, {sized['pg_connections']} PostgreSQL "
                  f"connections, {bl.fmt(sized['pg_transactions_per_s'], 0)} transactions/s, "
                  f"{bl.fmt(sized['redis_commands_per_s'], 0)} Redis commands/s, "
                  f"{bl.fmt(sized['q_calls_per_s'], 0)} Q calls/s, "
                  f"{bl.fmt(sized['rss_mib_per_replica'], 0)} MiB RSS per replica.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--quick", action="store_true", help="3 s per scenario")
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    seconds = 3.0 if args.quick else args.seconds
    env = os.environ
    urls = env["BENCH_GATEWAY_URLS"].split()
    procs = [Proc(f"gateway-{i + 1}", int(pid))
             for i, pid in enumerate(env["BENCH_GATEWAY_PIDS"].split())]
    if len(urls) != args.replicas or len(procs) != args.replicas:
        raise SystemExit(f"expected {args.replicas} gateways, got {urls} / {procs}")
    q_stats = QStats(env["BENCH_UPSTREAM_URL"])
    names = [n for n in SCENARIOS if not args.only or n in args.only.split(",")]
    nonce = uuid.uuid4().hex[:10]

    with httpx.Client(timeout=30) as client:
        log(f"seeding tasks through replica 1 of {len(urls)}")
        seeded = seed(client, f"{urls[0]}/v1/a2a/agents/{AGENT}", nonce, 60)
        shapes = [shapes_for(f"{u}/v1/a2a/agents/{AGENT}", seeded) for u in urls]
        for per_replica in shapes:
            for name in names:
                check_shape(client, per_replica[name])

    results: dict = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "replica_count": len(urls), "seconds": seconds, "machine": machine(),
        "connections_per_replica": max(4, CONNECTIONS // len(urls)), "scenarios": {}}
    for name in names:
        log(f"{name}: warm-up, then {seconds:.0f} s on {len(urls)} replica(s) at once")
        with ThreadPoolExecutor(len(urls)) as pool:
            list(pool.map(lambda s: run_wrk(s[name], 1.0, f"{name}-warm"), shapes))
        run = measure(name, [s[name] for s in shapes], procs, seconds, env, q_stats)
        run["title"] = SCENARIOS[name]
        results["scenarios"][name] = run
        t = run["total"]
        kinds = [r.get("error_kinds") for r in run["replicas"] if r.get("error_kinds")]
        log(f"  {name}: {t['rps']:.0f} req/s in total, {t['cpu_us_per_req']:.0f} µs CPU/req, "
            f"errors {t['errors']}{f' {kinds}' if kinds else ''}")
    if set(EXAMPLE.mix) <= set(results["scenarios"]):
        results["example"] = cap.size(EXAMPLE, costs(results))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"replicas-{len(urls)}"
    (out / f"{stem}.json").write_text(json.dumps(json_safe(results), indent=2) + "\n")
    markdown = render(results)
    (out / f"{stem}.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())

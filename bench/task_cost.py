"""The per-task cost benchmark behind `scripts/bench --task-cost` (which builds, starts
PostgreSQL, Redis, the reference upstream and one gateway on a database of its own, then runs
this).

Each round: the idle replica alone for --idle-seconds (its background rate: feed, reconciler,
retention), then --tasks fresh SendMessage returnImmediately calls (8 at a time), waited for
until every task is COMPLETED in the database, each interval read PostgreSQL's counters
(bench/task_cost_math.py STATS_SQL: pg_stat_database, pg_stat_wal, pg_stat_user_tables) and
the gateway's `a2a_store_calls_total` around it, settled so every backend has reported. Per
task: the loaded interval minus the background rate over its length, over the tasks. Reports
the median of the rounds with their spread (bench/results/task-cost.{md,json}, or
.bench/task-cost-quick.* with --quick).

Environment (set by scripts/bench): BENCH_GATEWAY_URL, BENCH_METRICS_URL, BENCH_DB_URL.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402
import task_cost_math as tc  # noqa: E402
from run import (AGENT, headers_for, json_safe, log, machine, rpc_body,  # noqa: E402
                 send_params)

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = 8


def psql(db_url: str, sql: str) -> str:
    out = subprocess.run(["psql", "-Atq", db_url, "-c", sql], check=True,
                         capture_output=True, text=True, timeout=60)
    return out.stdout


def store_calls(metrics_url: str) -> float:
    """The sum of the gateway's a2a_store_calls_total over its labels."""
    text = httpx.get(f"{metrics_url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("a2a_store_calls_total{"))


def read(env: dict) -> tc.Reading:
    return tc.Reading(time.monotonic(), tc.parse_stats(psql(env["BENCH_DB_URL"], tc.STATS_SQL)),
                      store_calls(env["BENCH_METRICS_URL"]))


def send_all(base: str, prefix: str, tasks: int) -> None:
    """The sends, CONCURRENCY at a time, each worker on a keep-alive connection of its own."""
    rpc = f"{base}/rpc"
    local = threading.local()

    def one(i: int) -> None:
        if not hasattr(local, "client"):
            local.client = httpx.Client(timeout=30)
        r = local.client.post(rpc, headers=headers_for("tok-alice"),
                              content=rpc_body("SendMessage",
                                               send_params(f"{prefix}-{i}", text=f"task {i}")))
        r.raise_for_status()
        if "task" not in r.json().get("result", {}):
            raise RuntimeError(f"send {i} was not admitted: {r.text[:200]}")

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(one, range(tasks)))


def wait_completed(db_url: str, prefix: str, tasks: int, timeout: float) -> int:
    """Polls until every task of `prefix` is COMPLETED; returns the number of polls."""
    sql = ("SELECT count(*) FROM a2a_tasks WHERE state = 'TASK_STATE_COMPLETED' "
           f"AND message_id LIKE '{prefix}-%'")
    deadline, polls = time.monotonic() + timeout, 0
    while True:
        polls += 1
        done = int(psql(db_url, sql).strip())
        if done >= tasks:
            return polls
        if time.monotonic() > deadline:
            raise RuntimeError(f"{done} of {tasks} tasks completed within {timeout} s")
        time.sleep(0.5)


def one_round(env: dict, tasks: int, idle_seconds: float) -> dict:
    time.sleep(tc.SETTLE_SECONDS)
    r0 = read(env)
    time.sleep(idle_seconds)
    r1 = read(env)
    idle = tc.interval(r0, r1, own_statements=1)
    prefix = f"tc-{uuid.uuid4().hex[:12]}"
    t0 = time.monotonic()
    send_all(f"{env['BENCH_GATEWAY_URL']}/v1/a2a/agents/{AGENT}", prefix, tasks)
    sent = time.monotonic() - t0
    polls = wait_completed(env["BENCH_DB_URL"], prefix, tasks, timeout=120)
    time.sleep(tc.SETTLE_SECONDS)
    r2 = read(env)
    work = tc.interval(r1, r2, own_statements=1 + polls)
    rate = tc.background_rate(idle)
    return {"tasks": tasks, "send_seconds": sent, "sends_per_second": tasks / sent,
            "idle": idle, "background_per_second": rate, "work": work,
            "per_task": tc.per_task(work, rate, tasks)}


def render(results: dict) -> str:
    rounds = results["rounds"]
    lines = [f"**Per-task PostgreSQL cost**, run {results['when']}, build "
             f"{results.get('build', 'this checkout')}.", "",
             f"{results['tasks']} fresh SendMessage returnImmediately calls per round to "
             f"completion (agent {results['agent']}), {len(rounds)} rounds; the idle "
             f"replica's background rate measured over {results['idle_seconds']:.0f} s before "
             "each round and subtracted. Sent "
             f"{bl.fmt(tc.median_and_spread([r['sends_per_second'] for r in rounds])[0], 0)} "
             f"a second ({CONCURRENCY} at a time): the run feed's answers hold more changes, "
             "and cost less per task, the more tasks a second there are. Median (min–max over "
             f"rounds). Machine: {results['machine']['nproc']} cores, "
             f"{results['machine']['cpu']}.", ""]
    rows = []
    for key, name, digits in tc.REPORT:
        med, lo, hi = tc.median_and_spread([r["per_task"][key] for r in rounds])
        rows.append([name, bl.fmt(med, digits), f"{bl.fmt(lo, digits)}–{bl.fmt(hi, digits)}"])
    lines += ["**Per task, send to completion**", "",
              bl.markdown_table(["Figure", "Median", "Spread"], rows), ""]
    rows = []
    for key, name, digits in tc.REPORT:
        if key == "task_hot_ratio":
            continue
        med, lo, hi = tc.median_and_spread([r["background_per_second"][key] for r in rounds])
        rows.append([name, bl.fmt(med, digits), f"{bl.fmt(lo, digits)}–{bl.fmt(hi, digits)}"])
    lines += ["**Idle replica, per second**", "",
              bl.markdown_table(["Figure", "Median", "Spread"], rows), ""]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task-cost", action="store_true", help="(passed through by scripts/bench)")
    ap.add_argument("--quick", action="store_true", help="one round of 100 tasks, 10 s idle")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--idle-seconds", type=float, default=30.0)
    ap.add_argument("--stem", default="task-cost",
                    help="results' file name, without extension (e.g. task-cost-before for "
                         "an earlier build through BENCH_STACK_BIN)")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.tasks, args.idle_seconds = 1, 100, 10.0
    env = dict(os.environ)
    rounds = []
    for n in range(args.rounds):
        log(f"task cost: round {n + 1} of {args.rounds} ({args.tasks} tasks)")
        rounds.append(one_round(env, args.tasks, args.idle_seconds))
        log("  per task: " + ", ".join(f"{k} {rounds[-1]['per_task'][k]:.2f}"
                                       for k in ("transactions", "task_updates",
                                                 "task_hot_ratio", "wal_bytes")))
    results = {"when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "build": os.environ.get("BENCH_BUILD", "this checkout"),
               "machine": machine(), "agent": AGENT, "tasks": args.tasks,
               "idle_seconds": args.idle_seconds, "rounds": rounds}
    out_dir = ROOT / (".bench" if args.quick else "bench/results")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{args.stem}-quick" if args.quick else args.stem
    (out_dir / f"{stem}.json").write_text(json.dumps(json_safe(results), indent=2) + "\n")
    (out_dir / f"{stem}.md").write_text(render(results))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

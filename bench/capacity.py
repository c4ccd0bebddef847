"""Pure helpers of the replica benchmark (bench/replicas.py, `scripts/bench --replicas N`) and of
the sizing formula in docs/operations.md ("Capacity"): readings of PostgreSQL's and Redis's own
counters, per-request figures, the replicas combined, and the deployment a stated load needs.
No I/O, so tests/bench checks them (and the worked example the docs print) in milliseconds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import benchlib as bl

# The columns read from pg_stat_database and pg_stat_user_tables, in the order of PG_STATS_SQL.
PG_FIELDS = ("transactions", "scans", "rows_written")

# One row: transactions (commits + rollbacks) in the database, and over its tables the scans
# (sequential + index) and rows written (inserted + updated + deleted).
PG_STATS_SQL = (
    "SELECT d.xact_commit + d.xact_rollback, "
    "coalesce(sum(t.seq_scan + coalesce(t.idx_scan, 0)), 0), "
    "coalesce(sum(t.n_tup_ins + t.n_tup_upd + t.n_tup_del), 0) "
    "FROM pg_stat_database d LEFT JOIN pg_stat_user_tables t ON true "
    "WHERE d.datname = current_database() GROUP BY d.xact_commit, d.xact_rollback"
)

# PostgreSQL flushes a busy backend's counters at most once a second and an idle one's within
# 10 s (PGSTAT_IDLE_INTERVAL): a reading this long after the load has stopped holds all of it.
PG_STATS_SETTLE_SECONDS = 11.0


def parse_pg_stats(line: str) -> dict[str, int]:
    """The `a|b|c` line psql -At prints for PG_STATS_SQL."""
    return bl.parse_row(line, PG_FIELDS)


def redis_commands(info_stats: str) -> int:
    """total_commands_processed from the text of Redis's `INFO stats`."""
    for line in info_stats.splitlines():
        if line.startswith("total_commands_processed:"):
            return int(line.split(":", 1)[1])
    raise ValueError("no total_commands_processed in INFO stats")


def per_request(delta: float | None, requests: int) -> float:
    """delta / requests; NaN when either is unknown, or no request completed."""
    if delta is None or not requests:
        return math.nan
    return delta / requests


def combine(replicas: Sequence[dict]) -> dict:
    """The replicas' runs of one scenario (each with requests, seconds, rps, cpu_seconds,
    errors) as one deployment: total and per-replica throughput, CPU per request over all of
    them, and requests per second per core busy (1e6 / CPU µs per request)."""
    requests = sum(r["requests"] for r in replicas)
    cpu = sum(r["cpu_seconds"] for r in replicas)
    rps = [r["rps"] for r in replicas]
    cpu_us = cpu * 1e6 / requests if requests else math.nan
    return {
        "replicas": len(replicas),
        "requests": requests,
        "rps": sum(rps),
        "rps_min": min(rps) if rps else math.nan,
        "rps_max": max(rps) if rps else math.nan,
        "cpu_us_per_req": cpu_us,
        "rps_per_core": 1e6 / cpu_us if cpu_us and not math.isnan(cpu_us) else math.nan,
        "errors": sum(r["errors"] for r in replicas),
    }


@dataclass(frozen=True)
class MethodCost:
    """What one A2A request of a method costs, as the replica benchmark measures it."""
    cpu_us: float          # gateway CPU µs per request
    pg_transactions: float  # PostgreSQL transactions per request
    redis_commands: float  # Redis commands per request
    q_calls: float         # calls to Q per request (feed long polls excluded)


@dataclass(frozen=True)
class Deployment:
    """A stated load: requests per second, the share of each method, open streams."""
    rps: float
    mix: dict[str, float]
    streams: int
    cores_per_replica: float = 1.0
    # Busy share of a replica's CPU at the stated load: the rest absorbs bursts.
    utilisation: float = 0.5
    pool_size: int = 16
    # Per open stream, and a replica's peak RSS under load with no stream open: the largest of
    # the full benchmark's scenarios (docs/performance.md), rounded up.
    kib_per_stream: float = 44.0
    busy_rss_mib: float = 60.0
    # The process-wide budget of answer bytes its clients have not taken yet
    # (limits.response_buffer_bytes): at most this much more when clients stall.
    response_budget_mib: float = 64.0
    # Observer lease lifetime (observers.ttl_ms): each replica renews the leases of its open
    # streams every third of it, in one Redis call per `renew_batch` leases (src/lease.rs).
    lease_ttl_s: float = 15.0
    renew_batch: int = 128


# The load docs/operations.md sizes as its example: 5,000 A2A requests per second, 10 % of them
# sends, and 2,000 open streams.
EXAMPLE = Deployment(
    rps=5000, streams=2000,
    mix={"send_fresh": 0.10, "get_task": 0.60, "list_tasks": 0.05, "card": 0.25})


def size(load: Deployment, costs: dict[str, MethodCost]) -> dict:
    """The deployment a load needs (docs/operations.md, "Sizing"):

    cores     = rps × Σ share × cpu_us / 1e6
    replicas  = max(2, ceil(cores / (cores_per_replica × utilisation)) + 1)   (one spare)
    postgres  = replicas × (pool_size + 1) connections; rps × Σ share × transactions per second
    redis     = rps × Σ share × commands per second (+ per replica, one lease renewal call per
                128 of its streams every TTL/3)
    q         = rps × Σ share × calls per second
    memory    = busy RSS + response budget + streams / (replicas - 1) × KiB per stream, per
                replica (a replica lost, its streams reopen on the others)
    """
    share = sum(load.mix.values())
    if not math.isclose(share, 1.0, abs_tol=1e-9):
        raise ValueError(f"the mix's shares add up to {share}, not 1")
    missing = set(load.mix) - set(costs)
    if missing:
        raise ValueError(f"no measured cost for {sorted(missing)}")

    def weighted(field: str) -> float:
        return sum(s * getattr(costs[m], field) for m, s in load.mix.items())

    cores = load.rps * weighted("cpu_us") / 1e6
    replicas = max(2, math.ceil(cores / (load.cores_per_replica * load.utilisation)) + 1)
    return {
        "cores": cores,
        "replicas": replicas,
        "pg_connections": replicas * (load.pool_size + 1),
        "pg_transactions_per_s": load.rps * weighted("pg_transactions"),
        "redis_commands_per_s": load.rps * weighted("redis_commands")
        + replicas * math.ceil(load.streams / replicas / load.renew_batch) * 3 / load.lease_ttl_s,
        "q_calls_per_s": load.rps * weighted("q_calls"),
        "rss_mib_per_replica": load.busy_rss_mib
        + load.response_budget_mib
        + load.streams / (replicas - 1) * load.kib_per_stream / 1024,
    }

"""Pure helpers of the per-task cost benchmark (bench/task_cost.py, `scripts/bench --task-cost`):
what PostgreSQL does for one task from its SendMessage to its completion, read from
PostgreSQL's own counters, with the idle replica's background work subtracted. No I/O, so
tests/bench checks the arithmetic in milliseconds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import benchlib as bl
import capacity as cap

# The columns of STATS_SQL, in order.
FIELDS = (
    "transactions",    # pg_stat_database: commits + rollbacks in the gateway's database
    "wal_bytes",       # pg_stat_wal: the whole cluster's WAL (the bench runs alone on it)
    "rows_inserted",   # pg_stat_user_tables, over the database's tables
    "rows_updated",
    "rows_hot_updated",
    "rows_deleted",
    "scans",           # sequential + index scans, over the database's tables
    "task_inserts",    # the same for a2a_tasks alone
    "task_updates",
    "task_hot_updates",
)

# One row, one statement (so one transaction of its own): see FIELDS.
STATS_SQL = (
    "SELECT d.xact_commit + d.xact_rollback, "
    "(SELECT wal_bytes FROM pg_stat_wal)::bigint, "
    "coalesce(sum(t.n_tup_ins), 0), coalesce(sum(t.n_tup_upd), 0), "
    "coalesce(sum(t.n_tup_hot_upd), 0), coalesce(sum(t.n_tup_del), 0), "
    "coalesce(sum(t.seq_scan + coalesce(t.idx_scan, 0)), 0), "
    "coalesce(sum(t.n_tup_ins) FILTER (WHERE t.relname = 'a2a_tasks'), 0), "
    "coalesce(sum(t.n_tup_upd) FILTER (WHERE t.relname = 'a2a_tasks'), 0), "
    "coalesce(sum(t.n_tup_hot_upd) FILTER (WHERE t.relname = 'a2a_tasks'), 0) "
    "FROM pg_stat_database d LEFT JOIN pg_stat_user_tables t ON true "
    "WHERE d.datname = current_database() GROUP BY d.xact_commit, d.xact_rollback"
)

# A reading this long after the work has stopped holds all of it (capacity.py says why).
SETTLE_SECONDS = cap.PG_STATS_SETTLE_SECONDS


def parse_stats(line: str) -> dict[str, int]:
    """The `a|b|…` line psql -At prints for STATS_SQL."""
    return bl.parse_row(line, FIELDS)


def delta(before: dict, after: dict) -> dict[str, float]:
    return {k: float(after[k] - before[k]) for k in before}


@dataclass
class Reading:
    """Counters at one moment: PostgreSQL's (FIELDS) and the gateway's store calls."""
    at: float  # seconds, monotonic
    pg: dict
    store_calls: float


def interval(a: Reading, b: Reading, own_statements: int) -> dict[str, float]:
    """What happened between two readings. `own_statements` are the benchmark's own
    statements in the database between them (each a transaction of its own, writing nothing):
    the earlier reading itself, and any completion polls."""
    d = delta(a.pg, b.pg)
    d["transactions"] -= own_statements
    d["store_calls"] = b.store_calls - a.store_calls
    d["seconds"] = b.at - a.at
    return d


def background_rate(idle: dict[str, float]) -> dict[str, float]:
    """Per second of an idle interval (from `interval`)."""
    seconds = idle["seconds"]
    if seconds <= 0:
        raise ValueError("an idle interval needs a positive length")
    return {k: v / seconds for k, v in idle.items() if k != "seconds"}


def per_task(work: dict[str, float], rate: dict[str, float], tasks: int) -> dict[str, float]:
    """A loaded interval's counters with the background rate over its length taken out, per
    task; with the HOT share of a2a_tasks' updates and of all updates."""
    if tasks <= 0:
        raise ValueError("no tasks")
    seconds = work["seconds"]
    out = {k: (work[k] - rate.get(k, 0.0) * seconds) / tasks
           for k in work if k != "seconds"}
    out["task_hot_ratio"] = share(out["task_hot_updates"], out["task_updates"])
    out["hot_ratio"] = share(out["rows_hot_updated"], out["rows_updated"])
    return out


def share(part: float, whole: float) -> float:
    if whole <= 0:
        return math.nan
    return max(0.0, min(1.0, part / whole))


def median_and_spread(values: Sequence[float]) -> tuple[float, float, float]:
    """Median, min and max of the rounds' values (NaN ignored; all NaN gives NaN)."""
    xs = sorted(v for v in values if not math.isnan(v))
    if not xs:
        return math.nan, math.nan, math.nan
    mid = len(xs) // 2
    median = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return median, xs[0], xs[-1]


# What each figure is called in the report, and how many digits it gets.
REPORT = (
    ("transactions", "PostgreSQL transactions", 2),
    ("store_calls", "gateway store calls (statements)", 2),
    ("task_inserts", "a2a_tasks rows inserted", 2),
    ("task_updates", "a2a_tasks rows updated", 2),
    ("task_hot_updates", "of which HOT", 2),
    ("task_hot_ratio", "a2a_tasks HOT share", 2),
    ("rows_inserted", "rows inserted, all tables", 2),
    ("rows_updated", "rows updated, all tables", 2),
    ("rows_deleted", "rows deleted, all tables", 2),
    ("scans", "table scans, all tables", 2),
    ("wal_bytes", "WAL bytes", 0),
)

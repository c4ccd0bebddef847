"""Pure helpers of the benchmark runner (bench/run.py): statistics, /proc readings, ratios,
target verdicts, Q calls per A2A request, the results table, and the admit statement taken
from the gateway's source.
No I/O beyond what each function names, so tests/bench checks them in milliseconds."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Iterable, Sequence

# How each target of a scenario is named in the results table and the chart.
TARGET_LABEL = {
    "gateway": "gateway", "python": "Python a2a-sdk", "hyper": "raw hyper",
    "pgbench": "pgbench (admit SQL)", "pgbench_row": "pgbench (single-row insert)",
    "upstream": "Q upstream direct",
    "gateway_running": "gateway, a running task",
}


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of unsorted values; NaN for none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if p <= 0:
        return float(ordered[0])
    rank = math.ceil(round(p / 100.0 * len(ordered), 9))  # 99.9% of 1000 is 999, not 1000
    return float(ordered[min(max(rank, 1), len(ordered)) - 1])


def median(values: Iterable[float]) -> float:
    """Median of the values that are numbers (None and NaN skipped); NaN for none."""
    kept = sorted(v for v in values if v is not None and not math.isnan(v))
    if not kept:
        return math.nan
    mid = len(kept) // 2
    return float(kept[mid]) if len(kept) % 2 else (kept[mid - 1] + kept[mid]) / 2.0


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when either is missing or the denominator is 0."""
    if numerator is None or denominator is None:
        return math.nan
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return math.nan
    return numerator / denominator


# --- /proc readings -------------------------------------------------------------------------

def cpu_ticks(stat_line: str) -> int:
    """utime + stime (clock ticks) from the text of /proc/PID/stat. The command name (field 2)
    may contain spaces and parentheses, so fields are counted after the last ')'."""
    rest = stat_line[stat_line.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(rest[11]) + int(rest[12])


def status_kib(status_text: str, key: str) -> int | None:
    """A `kB` value (e.g. VmHWM, VmRSS) from the text of /proc/PID/status."""
    match = re.search(rf"^{key}:\s+(\d+)\s+kB", status_text, re.MULTILINE)
    return int(match.group(1)) if match else None


# --- Q calls per A2A request -----------------------------------------------------------------

# The feed long polls: the gateway's followers hold one open at all times whatever the load,
# so they are no calls of any A2A request.
FEED_ROUTES = frozenset({"run_changes", "access_changes"})


def request_deltas(before: dict, after: dict) -> dict[str, int] | None:
    """Requests per route Q received between two readings of `/admin/stats` `requests` (a route
    absent reads 0), only the routes that moved; None if a count went down (Q's stats were
    reset in between, so the difference means nothing)."""
    deltas = {}
    for route in sorted(set(before) | set(after)):
        delta = after.get(route, 0) - before.get(route, 0)
        if delta < 0:
            return None
        if delta:
            deltas[route] = delta
    return deltas


def subtract_calls(deltas: dict | None, own: dict) -> dict[str, int] | None:
    """The deltas less the calls the benchmark made to Q itself (never below 0)."""
    if deltas is None:
        return None
    left = {route: n - own.get(route, 0) for route, n in deltas.items()}
    return {route: n for route, n in left.items() if n > 0}


def q_calls_per_request(deltas: dict | None, a2a_requests: int) -> float:
    """Q calls per A2A request: the requests Q received over the measurement, feed long polls
    excluded, divided by the A2A requests completed in it; NaN when either is unknown or 0."""
    if deltas is None or not a2a_requests:
        return math.nan
    return sum(n for route, n in deltas.items() if route not in FEED_ROUTES) / a2a_requests


def q_calls_by_route(runs: Sequence[dict]) -> dict[str, float]:
    """Per route, Q calls per A2A request over several measured runs (each with `q_requests`
    and `requests`), feed long polls included and marked by their names; runs without a
    reading are skipped."""
    counted = [r for r in runs if r.get("q_requests") is not None and r.get("requests")]
    total = sum(r["requests"] for r in counted)
    if not total:
        return {}
    by_route: dict[str, int] = {}
    for r in counted:
        for route, n in r["q_requests"].items():
            by_route[route] = by_route.get(route, 0) + n
    return {route: n / total for route, n in sorted(by_route.items())}


def describe_calls(by_route: dict[str, float]) -> str:
    """`get_run 1.00, run_grant 1.00` for the table; feed long polls marked, '-' for none,
    `<0.01` for a route called that rarely (a cached introspection)."""
    if not by_route:
        return "-"
    return ", ".join(f"{route}{' (feed)' if route in FEED_ROUTES else ''} "
                     f"{'<0.01' if 0 < n < 0.01 else f'{n:.2f}'}"
                     for route, n in by_route.items())


def calls_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """Q calls per A2A request of the gateway in each scenario that read them, with the
    per-route breakdown: the rows under the results table."""
    headers = ["Scenario", "A2A requests", "Q calls per A2A request",
               "by route (per A2A request)"]
    rows = []
    for sc in results.get("scenarios", {}).values():
        for name, gw in sc.get("targets", {}).items():
            if not name.startswith("gateway") or "q_calls_per_request" not in gw:
                continue
            title = sc["title"] if name == "gateway" else f"{sc['title']}, {TARGET_LABEL[name]}"
            rows.append([title, fmt(gw.get("q_a2a_requests")),
                         fmt(gw["q_calls_per_request"], 2),
                         describe_calls(gw.get("q_calls_by_route", {}))])
    st = results.get("streaming")
    if st and "q_calls_per_request" in st:
        rows.append([f"{st['streams']} streams (SendMessage + SubscribeToTask each)",
                     fmt(st.get("q_a2a_requests")), fmt(st["q_calls_per_request"], 2),
                     describe_calls(st.get("q_calls_by_route", {}))])
    return headers, rows


# --- targets ----------------------------------------------------------------------------------

def verdict(value: float, bound: float, higher_is_better: bool) -> str:
    """MET / MISS / N/A for a measured value against its bound."""
    if value is None or math.isnan(value):
        return "N/A"
    ok = value >= bound if higher_is_better else value <= bound
    return "MET" if ok else "MISS"


# Fewer rounds than this and a verdict says it stands on too few.
MIN_ROUNDS = 3


def judge(values: Iterable[float], bound: float, higher_is_better: bool) -> dict:
    """A target over its rounds: the median decides, and the spread says how steady it is.

    MET: the median and every round meet the bound. MISS: the median misses it. UNSTEADY: the
    median meets it but some round does not (a target at the edge of what one build moves
    between rounds). Each is followed by how many rounds met, and by "too few rounds" under
    MIN_ROUNDS; N/A without a measurement."""
    kept = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not kept:
        return {"verdict": "N/A", "value": math.nan, "low": math.nan, "high": math.nan,
                "rounds": []}
    middle = median(kept)
    met = sum(1 for v in kept if verdict(v, bound, higher_is_better) == "MET")
    if verdict(middle, bound, higher_is_better) == "MISS":
        word = "MISS"
    elif met == len(kept):
        word = "MET"
    else:
        word = "UNSTEADY"
    detail = f"{met} of {len(kept)} rounds met"
    if len(kept) < MIN_ROUNDS:
        detail += "; too few rounds"
    return {"verdict": f"{word} ({detail})", "value": middle, "low": min(kept),
            "high": max(kept), "rounds": kept}


def per_round(runs: Sequence[dict], target: str, key: str) -> list[float]:
    """`key` of `target`'s timed runs, in round order (NaN where a round lacks it)."""
    mine = sorted((r for r in runs if r.get("target") == target), key=lambda r: r.get("round", 0))
    return [math.nan if r.get(key) is None else float(r[key]) for r in mine]


def paired(a: Sequence[float], b: Sequence[float], combine) -> list[float]:
    """`combine(a[i], b[i])` round by round: each ratio or difference from the targets measured
    one after the other in the same round, not from the medians of different rounds."""
    return [combine(x, y) for x, y in zip(a, b)]


def spread(judged: dict, digits: int, unit: str = "") -> str:
    """'0.53x (0.51-0.55 over 3 rounds)': the median, then the lowest and highest round."""
    if not judged["rounds"]:
        return "-"
    n = len(judged["rounds"])
    return (f"{fmt(judged['value'], digits)}{unit} ({fmt(judged['low'], digits)}–"
            f"{fmt(judged['high'], digits)}{unit} over {n} round{'s' if n != 1 else ''})")


# --- formatting -------------------------------------------------------------------------------

def fmt(value, digits: int = 1) -> str:
    """A number for the table: '-' for missing, thousands separators for large values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int) or (abs(value) >= 1000):
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table; numeric-looking columns are right-aligned."""
    def numeric(col: int) -> bool:
        cells = [r[col] for r in rows if r[col] not in ("-", "")]
        return bool(cells) and all(re.fullmatch(r"[-+]?[\d,.]+[x%]?", c) for c in cells)

    align = ["---:" if numeric(i) else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# --- the gateway's admit statement and the database's ceilings --------------------------------

def admit_sql(store_source: str) -> str:
    """The SQL of the admission insert as the gateway sends it: `ADMIT_INSERT` in
    src/store/tasks.rs with `{COLUMNS}` (src/store/row.rs) expanded. Raises ValueError if the
    source no longer has that shape (the benchmark must then be brought along)."""
    columns = re.search(r'const COLUMNS: &str = "((?:[^"\\]|\\\n\s*)*)";', store_source)
    admit = re.search(r"static ADMIT_INSERT: LazyLock<String> = LazyLock::new\(\|\| \{\s*"
                      r"format!\(\s*\"(.*?)\"\s*\)", store_source, re.DOTALL)
    if not columns or not admit:
        raise ValueError("ADMIT_INSERT or COLUMNS not found in src/store/{tasks,row}.rs")
    cols = re.sub(r"\\\n\s*", "", columns.group(1))
    sql = admit.group(1).replace("{COLUMNS}", cols)
    if not sql.lstrip().startswith("INSERT INTO a2a_tasks") or "ON CONFLICT" not in sql \
            or "$10" not in sql:
        raise ValueError("admit statement changed shape")
    return " ".join(sql.split())


def pgbench_script(sql: str, message_json: str) -> str:
    """A pgbench script running the admit statement with a random messageId per transaction
    (new task and context ids from gen_random_uuid(), as the gateway makes new v4 UUIDs)."""
    values = {
        "$1": "gen_random_uuid()",
        "$2": "'t-acme'",
        "$3": "'p-alice'",
        "$4": "'ag-writer'",
        "$5": "('pgbench-' || :client_id || '-' || :r)",
        "$6": "'" + "0" * 64 + "'",
        "$7": "gen_random_uuid()",
        "$8": "('a2a-task-' || gen_random_uuid())",
        "$9": "'" + message_json.replace("'", "''") + "'::jsonb",
        "$10": "15",
        "$11": "3600",
    }
    # Highest first so $1 does not eat the start of a two-digit placeholder.
    for key in sorted(values, key=lambda k: -int(k[1:])):
        sql = sql.replace(key, values[key])
    return "\\set r random(1, 4611686018427387903)\n" + sql + ";\n"


# The database's own ceiling for one durable write: a single-row INSERT ... ON CONFLICT on a
# table with nothing but a primary key, one transaction (one commit) per row.
SINGLE_ROW_TABLE = "bench_single_row"
SINGLE_ROW_SETUP = (f"CREATE TABLE IF NOT EXISTS {SINGLE_ROW_TABLE} "
                    "(k text PRIMARY KEY, v integer NOT NULL)")
SINGLE_ROW_SCRIPT = ("\\set r random(1, 4611686018427387903)\n"
                     f"INSERT INTO {SINGLE_ROW_TABLE} (k, v) "
                     "VALUES (:client_id || '-' || :r, 1) ON CONFLICT DO NOTHING;\n")


def send_ceiling_ratios(send_targets: dict) -> dict[str, float]:
    """SendMessage(returnImmediately) against the database measured in the same scenario: the
    gateway's req/s over pgbench's tps of the gateway's own admission insert (`admit`) and of a
    single-row insert (`single_row`). NaN where a target is missing."""
    def rps(name):
        return send_targets.get(name, {}).get("rps", math.nan)

    return {"admit": ratio(rps("gateway"), rps("pgbench")),
            "single_row": ratio(rps("gateway"), rps("pgbench_row"))}


def read_admit_sql(root: Path) -> str:
    store = root / "src" / "store"
    # COLUMNS lives with the row's decoding, the statement with the task writes.
    return admit_sql((store / "tasks.rs").read_text() + (store / "row.rs").read_text())


def prometheus_value(text: str, name: str) -> float | None:
    """The value of the unlabelled sample `name` in a Prometheus text exposition, or None."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def parse_row(line: str, fields: Sequence[str]) -> dict[str, int]:
    """The `a|b|c` line `psql -At` prints for a one-row statement, as integers by name."""
    values = line.strip().split("|")
    if len(values) != len(fields):
        raise ValueError(f"expected {len(fields)} columns, got {line!r}")
    return {name: int(v) for name, v in zip(fields, values)}

"""The neighbours benchmark's arithmetic (bench/neighbours.py): what one victim's requests tell
per method, each phase's targets judged over its rounds, the remote card the listing flood's
registrations discover, and the results tables. No I/O, so tests/bench checks them in
milliseconds."""

from __future__ import annotations

import json
import math
import re
from typing import Iterable, Sequence

import benchlib as bl

# The victim's methods, in the order of the tables.
METHODS = ("GetTask", "ListTasks", "SendMessage")

# Q's introspection latency during the introspection flood and its baseline (the reference
# upstream's fault), as the finding the flood stands for measured it.
INTROSPECT_DELAY_MS = 100

# The phases, in the order they run: the victim alone, then during each attack; an attack whose
# conditions slow the victim whatever the attacker does has a baseline phase of its own, the
# victim alone under the same conditions.
PHASES = {
    "alone": "victim alone",
    "listing": "listing flood (outbound registrations)",
    "introspection_alone": f"Q's introspection slow ({INTROSPECT_DELAY_MS} ms), no flood",
    "introspection": f"introspection flood (made-up tokens, Q slow {INTROSPECT_DELAY_MS} ms)",
    "stalled": "stalled readers (HTTP/2 windows at 0)",
    "rate_limit": "a principal at its rate limit",
    "store": "store-saturating ListTasks",
}

# Each attack's p99s are judged against its baseline's in the same round. Q's slow
# introspection also holds up the victim's own tokens (their cached identity lasts
# auth.cache_ttl_ms, 5 s, and is then checked with Q again), so the introspection flood is
# compared with the victim alone while Q is as slow, not with the victim alone.
BASELINES = {"introspection": "introspection_alone"}
# The phases with no attacker (no p99 ratio of their own).
BASELINE_PHASES = ("alone", "introspection_alone")
# The phases during which Q's introspection takes INTROSPECT_DELAY_MS.
Q_SLOW_PHASES = ("introspection_alone", "introspection")


def baseline_of(name: str) -> str | None:
    """The phase a phase's p99s are judged against; None for a baseline itself."""
    if name in BASELINE_PHASES:
        return None
    return BASELINES.get(name, "alone")


def phases_to_run(only: str | None) -> list[str]:
    """The phases of a run, in PHASES order: every attack, or those named in `only`
    (comma-separated), each with its baseline; the victim alone always."""
    attacks = [p for p in PHASES if p not in BASELINE_PHASES]
    if only:
        chosen = [p.strip() for p in only.split(",") if p.strip()]
        unknown = [p for p in chosen if p not in attacks]
        if unknown:
            raise ValueError(f"unknown phase(s) {', '.join(unknown)}; "
                             f"the attacks are {', '.join(attacks)}")
    else:
        chosen = attacks
    wanted = {"alone"} | set(chosen) | {baseline_of(p) for p in chosen}
    return [p for p in PHASES if p in wanted]

# The targets, judged per phase.
SUCCESS_PCT = 100.0
P99_FACTOR = 2.0
# Half the Helm chart's gateway memory limit (256 MiB).
PEAK_RSS_MIB = 128.0
# An open stream silent for longer than this is lost to a client with the official Python
# SDK's default read timeout (5 s); the gateway's keep-alives come every 3 s.
STREAM_SILENCE_S = 5.0

TARGETS = {
    "success": f"victim success {SUCCESS_PCT:.0f} %",
    "stream": "victim stream survived",
    **{f"p99_{m}": f"{m} p99 ≤ {P99_FACTOR:.0f}× baseline" for m in METHODS},
    "rss": f"peak RSS ≤ {PEAK_RSS_MIB:.0f} MiB",
    "restart": "no restart",
}


# --- one request's answer ---------------------------------------------------------------------

def answer_kind(status: int, body: bytes) -> str:
    """How an answer is counted: `200`, `200 rpc -32603` (a JSON-RPC error in a 200),
    `429 rate_limited`, `503 response_buffer_full`, or the bare status when the body names no
    code. A status of 0 is a transport failure (no answer)."""
    if status == 0:
        return "no answer"
    code = None
    try:
        doc = json.loads(body) if body[:1] in (b"{", b"[") else None
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        error = doc.get("error")
        if isinstance(error, str):
            code = error
        elif isinstance(error, dict) and "code" in error:
            code = f"rpc {error['code']}"
    return f"{status} {code}" if code else str(status)


def tally(kinds: Iterable[str]) -> dict[str, int]:
    """How many of each kind, the most frequent first."""
    out: dict[str, int] = {}
    for kind in kinds:
        out[kind] = out.get(kind, 0) + 1
    return tally_counts(out)


def tally_counts(counts: dict[str, int]) -> dict[str, int]:
    """The counts, the most frequent first (ties by name)."""
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def describe_tally(counts: dict[str, int], most: int = 4) -> str:
    """`200: 1,204; 429 rate_limited: 38,113` (the most frequent first), '-' for none."""
    if not counts:
        return "-"
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [f"{kind}: {bl.fmt(n)}" for kind, n in ordered[:most]]
    if len(ordered) > most:
        shown.append(f"{len(ordered) - most} more kinds")
    return "; ".join(shown)


# --- the victim's phase -----------------------------------------------------------------------

def method_summary(samples: Sequence[Sequence]) -> dict:
    """One method's requests, each `[latency_ms, ok, kind]`: how many, how many succeeded, and
    the latency percentiles of all of them (a failure's latency counts too: it is how long the
    victim waited for it)."""
    latencies = [float(s[0]) for s in samples]
    ok = sum(1 for s in samples if s[1])
    return {
        "requests": len(samples), "ok": ok,
        "success_pct": 100.0 * ok / len(samples) if samples else math.nan,
        "p50_ms": bl.percentile(latencies, 50), "p99_ms": bl.percentile(latencies, 99),
        "max_ms": max(latencies) if latencies else math.nan,
        "failures": tally(s[2] for s in samples if not s[1]),
    }


def stream_survived(stream: dict) -> bool:
    """The victim's stream lived through the phase: its task's snapshot came, it did not end,
    and it was never silent for longer than STREAM_SILENCE_S."""
    return bool(stream.get("opened")) and not stream.get("ended_early") \
        and stream.get("longest_gap_s", math.inf) <= STREAM_SILENCE_S


def victim_summary(victim: dict) -> dict:
    """The victim's phase: per method, overall (every request of every method), the stream."""
    methods = {m: method_summary(victim["methods"].get(m, [])) for m in METHODS}
    every = [s for m in METHODS for s in victim["methods"].get(m, [])]
    stream = dict(victim.get("stream", {}))
    stream["survived"] = stream_survived(stream)
    return {"methods": methods, "overall": method_summary(every), "stream": stream}


def p99_ratio(phase: dict, baseline: dict, method: str) -> float:
    """A method's p99 during a phase over its p99 in the phase's baseline (baseline_of), both
    of the same round."""
    return bl.ratio(phase["victim"]["methods"][method]["p99_ms"],
                    baseline["victim"]["methods"][method]["p99_ms"])


def round_values(phase: dict, baseline: dict | None) -> dict[str, float]:
    """One round of one phase, each target's measured value (NaN where it could not be
    measured); a baseline phase (`baseline` None) has no p99 ratios."""
    victim = phase["victim"]
    values = {
        "success": victim["overall"]["success_pct"],
        "stream": 1.0 if victim["stream"]["survived"] else 0.0,
        "rss": phase.get("peak_rss_mib", math.nan),
        "restart": 1.0 if phase.get("restarted") else 0.0,
    }
    if baseline is not None:
        for m in METHODS:
            values[f"p99_{m}"] = p99_ratio(phase, baseline, m)
    return values


# bound, higher is better, how the value is shown
RULES = {
    "success": (SUCCESS_PCT, True, lambda v: f"{bl.fmt(v, 1)} %"),
    "stream": (1.0, True, lambda v: "yes" if v >= 1 else "no"),
    **{f"p99_{m}": (P99_FACTOR, False, lambda v: f"{bl.fmt(v, 2)}x") for m in METHODS},
    "rss": (PEAK_RSS_MIB, False, lambda v: f"{bl.fmt(v, 1)} MiB"),
    "restart": (0.0, False, lambda v: "yes" if v > 0 else "no"),
}


# Targets met or not in each round, judged on every round rather than on the median.
YES_OR_NO = ("stream", "restart")


def judge_phase(rounds: Sequence[dict]) -> dict[str, dict]:
    """Every target of a phase over its rounds (`rounds`: each round's `round_values`), by
    `benchlib.judge`: the median decides, MET only if every round meets it too. A target that
    that does not apply to the phase (in no round's values) is left out; one that applies and
    was not measured is N/A."""
    judged = {}
    for key, (bound, higher, show) in RULES.items():
        if not any(key in r for r in rounds):
            continue
        values = [r.get(key, math.nan) for r in rounds]
        if all(v is None or math.isnan(v) for v in values):
            judged[key] = {"target": TARGETS[key], "bound": bound, "verdict": "N/A",
                           "value": math.nan, "rounds": [], "shown": "-"}
            continue
        if key in YES_OR_NO:
            # Every round counts: a median would hide one lost stream in three.
            kept = [float(v) for v in values if v is not None and not math.isnan(v)]
            met = sum(1 for v in kept if bl.verdict(v, bound, higher) == "MET")
            detail = f"{met} of {len(kept)} rounds met"
            if len(kept) < bl.MIN_ROUNDS:
                detail += "; too few rounds"
            j = {"verdict": f"{'MET' if met == len(kept) else 'MISS'} ({detail})",
                 "value": min(kept) if higher else max(kept), "rounds": kept}
        else:
            j = bl.judge(values, bound, higher)
        shown = show(j["value"])
        if len(j["rounds"]) > 1 and key not in YES_OR_NO:
            shown += f" ({show(j['low'])}–{show(j['high'])})"
        judged[key] = {"target": TARGETS[key], "bound": bound, "verdict": j["verdict"],
                       "value": j["value"], "rounds": j["rounds"], "shown": shown}
    return judged


def judge_runs(runs: dict[str, list[dict]]) -> dict[str, dict[str, dict]]:
    """Every phase's targets (`runs`: each phase's rounds, in order), each round of a phase
    paired with the same round of its baseline (baseline_of)."""
    judged = {}
    for name, rounds in runs.items():
        base = baseline_of(name)
        if base is not None and len(runs.get(base, [])) < len(rounds):
            raise ValueError(f"{name}: its baseline {base} has fewer rounds")
        judged[name] = judge_phase([round_values(r, runs[base][i] if base else None)
                                    for i, r in enumerate(rounds)])
    return judged


def verdict_word(judged: dict) -> str:
    """MET, MISS, UNSTEADY or N/A: the first word of a judged target's verdict."""
    return judged["verdict"].split()[0]


# --- the listing flood's remote card ---------------------------------------------------------

# The gateway's bounds on a discovered card (outbound.max_card_bytes; src/json_bounds.rs CARD).
CARD_MAX_BYTES = 65536
CARD_MAX_STRING = 16 * 1024


def large_card(rpc_url: str, size: int = 60 * 1024) -> bytes:
    """A valid agent card of about `size` bytes (within the gateway's card bounds): its bulk in
    the description and in three skills' descriptions, each string under 16 KiB."""
    if not 4096 <= size <= CARD_MAX_BYTES - 1024:
        raise ValueError(f"card size {size} outside 4 KiB..{CARD_MAX_BYTES - 1024}")
    card = {
        "name": "Neighbour's remote agent",
        "description": "",
        "version": "1.0.0",
        "supportedInterfaces": [{"url": rpc_url, "protocolBinding": "JSONRPC",
                                 "protocolVersion": "1.0"}],
        "capabilities": {"streaming": False, "pushNotifications": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/markdown"],
        "skills": [{"id": f"skill-{i}", "name": f"Skill {i}", "description": "",
                    "tags": ["bench"]} for i in range(3)],
    }
    fixed = len(json.dumps(card, separators=(",", ":")).encode())
    bulk = size - fixed
    holders = [card] + card["skills"]
    each = bulk // len(holders)
    for i, holder in enumerate(holders):
        n = each + (bulk - each * len(holders) if i == 0 else 0)
        holder["description"] = ("lorem ipsum dolor sit amet " * (n // 27 + 1))[:n]
    return json.dumps(card, separators=(",", ":")).encode()


# --- /proc and /metrics -----------------------------------------------------------------------

def start_time(stat_line: str) -> int:
    """The process's start time (clock ticks after boot, field 22) from /proc/PID/stat: with
    the pid, tells the same process from a new one under a reused pid."""
    rest = stat_line[stat_line.rindex(")") + 2:].split()
    return int(rest[19])


def metric_sum(text: str, name: str) -> float | None:
    """The sum of every sample of `name` (all label sets) in a Prometheus text exposition;
    None when there is none."""
    total, seen = 0.0, False
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)")
    for line in text.splitlines():
        match = pattern.match(line)
        if match:
            total += float(match.group(1))
            seen = True
    return total if seen else None


def metric_deltas(before: dict, after: dict) -> dict[str, float]:
    """How much each counter moved between two readings (missing readings count 0), only those
    that moved."""
    out = {}
    for name in sorted(set(before) | set(after)):
        delta = (after.get(name) or 0.0) - (before.get(name) or 0.0)
        if delta:
            out[name] = delta
    return out


# --- what a phase cost ------------------------------------------------------------------------

# A machine whose cores were busy for at least this share of a phase was saturated: what the
# victim waited for then may be a core rather than anything the attack holds in the gateway.
SATURATED_SHARE = 0.9

# The CPU users measured per phase (each in % of one core), in the order of the table.
CPU_USERS = {
    "gateway_cpu_pct": "gateway",
    "postgres_cpu_pct": "PostgreSQL",
    "upstream_cpu_pct": "Q (reference upstream)",
    "victim_cpu_pct": "victim client",
    "attacker_cpu_pct": "attacker client",
}


def cpu_pct(ticks: float | None, ticks_per_s: float, seconds: float) -> float:
    """CPU time in clock ticks over a wall time, in % of one core (200 % is two cores busy);
    NaN when either is missing."""
    if ticks is None or not seconds or seconds <= 0 or not ticks_per_s:
        return math.nan
    return 100.0 * ticks / ticks_per_s / seconds


def machine_ticks(proc_stat: str) -> tuple[int, int]:
    """(busy, total) clock ticks of every core from the `cpu` line of /proc/stat: total is user
    through steal (guest time is already in user and nice), busy is total less idle and
    iowait."""
    for line in proc_stat.splitlines():
        if line.startswith("cpu "):
            fields = [int(f) for f in line.split()[1:9]]
            fields += [0] * (8 - len(fields))
            total = sum(fields)
            return total - fields[3] - fields[4], total
    raise ValueError("no cpu line in /proc/stat")


def machine_busy_pct(before: tuple[int, int], after: tuple[int, int], cores: int) -> float:
    """How busy the machine's cores were between two machine_ticks readings, in % of one core
    (cores × 100 % is every core busy throughout)."""
    busy, total = after[0] - before[0], after[1] - before[1]
    if total <= 0 or not cores:
        return math.nan
    return 100.0 * cores * busy / total


def ticks_used(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> int:
    """The CPU ticks a set of processes used between two readings, each reading
    `{pid: (start time, utime + stime)}`: a process in both (same start time) its difference,
    one that began since (or a reused pid) all of its ticks. One that ended meanwhile is not
    counted: its ticks since the first reading cannot be read."""
    used = 0
    for pid, (started, ticks) in after.items():
        seen = before.get(pid)
        if seen is not None and seen[0] == started:
            used += max(ticks - seen[1], 0)
        else:
            used += ticks
    return used


def parse_pg_reading(text: str) -> tuple[int | None, list[int]]:
    """The output of PG_READING_SQL (psql -At): the database's transactions so far (committed
    and rolled back) and the pids of its backends."""
    xacts, pids = None, []
    for line in text.splitlines():
        kind, _, value = line.strip().partition("|")
        if kind == "x" and value:
            xacts = int(value)
        elif kind == "p" and value:
            pids.append(int(value))
    return xacts, pids


# One reading of the benchmark database's PostgreSQL work: its transactions so far and the
# backends connected to it (but the reading's own).
PG_READING_SQL = (
    "SELECT 'x', xact_commit + xact_rollback FROM pg_stat_database "
    "WHERE datname = current_database() "
    "UNION ALL SELECT 'p', pid FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def largest_cpu_user(costs: dict) -> tuple[str, float]:
    """Which measured CPU user took most of a phase's CPU, and how much (% of one core); the
    machine's busy time that none of them accounts for (Redis, the kernel, any other process
    on the machine) counts as `other processes`. ("-", NaN) when nothing was measured."""
    users = {label: costs.get(key) for key, label in CPU_USERS.items()}
    users = {k: v for k, v in users.items() if v is not None and not math.isnan(v)}
    busy = costs.get("machine_busy_pct")
    if busy is not None and not math.isnan(busy):
        users["other processes"] = max(busy - sum(users.values()), 0.0)
    if not users:
        return "-", math.nan
    label = max(users, key=lambda k: users[k])
    return label, users[label]


def saturated(costs: dict) -> bool:
    """The machine's cores were busy for at least SATURATED_SHARE of the phase."""
    busy, cores = costs.get("machine_busy_pct"), costs.get("cores")
    if busy is None or math.isnan(busy) or not cores:
        return False
    return busy >= SATURATED_SHARE * 100.0 * cores


# --- the report -------------------------------------------------------------------------------

def median_of(rounds: Sequence[dict], *path) -> float:
    values = []
    for r in rounds:
        v = r
        for key in path:
            v = v.get(key, {}) if isinstance(v, dict) else math.nan
        values.append(v if isinstance(v, (int, float)) else math.nan)
    return bl.median(values)


def phase_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """The victim's figures per phase: each the median over the rounds, but the success rate
    (the lowest round), the streams that survived (of the rounds), the peak RSS (the highest
    round) and restarts (any)."""
    headers = ["Phase", "victim success %", "stream survived"]
    # The RSS a phase starts from is what the phases before it left (the allocator keeps what
    # it was given), shown beside the peak.
    headers += [f"{m} p50 / p99 ms" for m in METHODS]
    headers += ["peak RSS MiB (at start)", "restarted"]
    rows = []
    for name, phase in results["phases"].items():
        rounds = phase["rounds"]
        success = min((r["victim"]["overall"]["success_pct"] for r in rounds), default=math.nan)
        survived = sum(1 for r in rounds if r["victim"]["stream"]["survived"])
        row = [phase["title"], bl.fmt(success, 1), f"{survived}/{len(rounds)}"]
        for m in METHODS:
            row.append(f"{bl.fmt(median_of(rounds, 'victim', 'methods', m, 'p50_ms'), 1)} / "
                       f"{bl.fmt(median_of(rounds, 'victim', 'methods', m, 'p99_ms'), 1)}")
        top = max(rounds, key=lambda r: r.get("peak_rss_mib", -1.0), default={})
        rss = bl.fmt(top.get("peak_rss_mib", math.nan), 1)
        if top.get("start_rss_mib") is not None:
            rss += f" ({bl.fmt(top['start_rss_mib'], 1)})"
        row += [rss, "yes" if any(r.get("restarted") for r in rounds) else "no"]
        rows.append(row)
    return headers, rows


def cost_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """What each phase cost, per phase (the median over its rounds): the CPU of the gateway,
    of PostgreSQL (the benchmark database's backends), of Q, of the victim's and the
    attacker's clients and of the whole machine, each in % of one core; which of them took the
    most; PostgreSQL's transactions per second; the attacker's request rate and how its
    requests were answered (summed over the rounds)."""
    cores = results["machine"]["nproc"]
    headers = ["Phase"] + [f"{label} CPU %" for label in CPU_USERS.values()]
    headers += [f"machine busy % (of {cores * 100})", "largest CPU user %",
                "PostgreSQL xact/s", "attacker req/s", "attacker's answers (all rounds)"]
    rows = []
    for phase in results["phases"].values():
        rounds = phase["rounds"]
        medians = {key: median_of(rounds, "costs", key)
                   for key in list(CPU_USERS) + ["machine_busy_pct", "postgres_xact_per_s"]}
        medians["cores"] = cores
        row = [phase["title"]] + [bl.fmt(medians[key], 0) for key in CPU_USERS]
        busy = bl.fmt(medians["machine_busy_pct"], 0)
        if saturated(medians):
            busy += " saturated"
        label, pct = largest_cpu_user(medians)
        answers: dict[str, int] = {}
        for r in rounds:
            for kind, n in (r.get("attacker") or {}).get("answers", {}).items():
                answers[kind] = answers.get(kind, 0) + n
        row += [busy, "-" if label == "-" else f"{label} {bl.fmt(pct, 0)}",
                bl.fmt(medians["postgres_xact_per_s"], 0),
                bl.fmt(median_of(rounds, "attacker", "requests_per_s"), 0),
                describe_tally(answers, most=5)]
        rows.append(row)
    return headers, rows


def target_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """MET / MISS per target per phase: a row per phase, the baseline its p99s are judged
    against, a column per target."""
    headers = ["Phase", "p99 baseline"] + list(TARGETS.values())
    rows = []
    for name, phase in results["phases"].items():
        judged = phase.get("targets", {})
        base = baseline_of(name) if name in PHASES else None
        row = [phase["title"], PHASES[base] if base else "-"]
        for key in TARGETS:
            j = judged.get(key)
            row.append("-" if j is None else f"{verdict_word(j)} {j['shown']}")
        rows.append(row)
    return headers, rows


def failure_lines(results: dict) -> list[str]:
    """What the victim's failed requests were answered, per phase and method, if any failed."""
    lines = []
    for phase in results["phases"].values():
        for r in phase["rounds"]:
            for m in METHODS:
                failures = r["victim"]["methods"][m]["failures"]
                if failures:
                    lines.append(f"- {phase['title']}, round {r['round']}, {m}: "
                                 f"{describe_tally(failures)}")
            stream = r["victim"]["stream"]
            if not stream["survived"]:
                lines.append(f"- {phase['title']}, round {r['round']}, stream: "
                             f"{stream.get('end_reason') or 'silent'} (longest silence "
                             f"{bl.fmt(stream.get('longest_gap_s'), 1)} s)")
    return lines


def render(results: dict) -> str:
    cfg = results["config"]
    rates = ", ".join(f"{m} {cfg['victim_rates'][m]}/s" for m in METHODS)
    lines = [
        f"Run {results['date']} ({results['mode']}): one gateway replica (release build, "
        f"config/gateway.toml, its rate limit on: {cfg['rate_limit']}), one reference upstream; "
        f"{results['rounds_run']} round(s), each phase {bl.fmt(results['seconds'], 0)} s of "
        f"victim load. Machine: {results['machine']['nproc']} cores, shared by the gateway, "
        "PostgreSQL, Redis, the upstream, the victim and the attackers.", "",
        f"Victim: tenant {cfg['victim_tenant']}, at a fixed rate ({rates}; latency counted from "
        f"when each request was due), plus one SubscribeToTask stream on a task waiting for "
        f"approval, open through the phase. Attackers: tenant {cfg['attacker_tenant']} (the "
        "introspection flood: no tenant, made-up tokens).", "",
        bl.markdown_table(*phase_rows(results)), "",
        f"Targets per phase: victim success {SUCCESS_PCT:.0f} % and its stream survived (no "
        f"silence over {STREAM_SILENCE_S:.0f} s), each method's p99 ≤ {P99_FACTOR:.0f}× its p99 "
        "in the phase's baseline in the same round, peak RSS (VmHWM, reset before the phase) ≤ "
        f"{PEAK_RSS_MIB:.0f} MiB (half the chart's 256 MiB limit), no restart. The baseline is "
        f"the victim alone, but for the introspection flood: \"{PHASES['introspection_alone']}\" "
        f"(the victim alone while Q takes {INTROSPECT_DELAY_MS} ms per introspection, as during "
        "the flood: the victim's own tokens are checked with Q again when their cached identity "
        "expires, every 5 s, so Q's latency reaches its p99 whatever the flood does). Over "
        "several rounds the median decides and MET needs every round (UNSTEADY: the median meets "
        "it, a round does not); a stream or a restart counts in any round.", "",
        bl.markdown_table(*target_rows(results)), "",
        f"What each attack cost (each the median over the rounds; CPU in % of one core, from "
        f"/proc utime + stime over the phase: the machine has {results['machine']['nproc']} "
        f"cores, {results['machine']['nproc'] * 100} % is all of them). PostgreSQL: the "
        "backends connected to the benchmark's database (one that ended during a phase is not "
        "counted, nor the server's own background processes); its transactions from "
        "pg_stat_database, a rough figure (a busy backend reports them about once a second, an "
        "idle one up to 10 s later, so some may land in the next phase). `other processes`: "
        "the machine's busy time none of the measured ones accounts for (Redis, the kernel, "
        "anything else running). `saturated`: the cores were busy for at least "
        f"{SATURATED_SHARE * 100:.0f} % of the phase, so a victim's wait may have been for a "
        "core.", "",
        bl.markdown_table(*cost_rows(results)), "",
    ]
    failures = failure_lines(results)
    if failures:
        lines += ["What the victim's failures were:", ""] + failures + [""]
    counted = counter_lines(results)
    if counted:
        lines += ["What the replica counted (its /metrics, over each phase):", ""] + counted + [""]
    attacks = results.get("attacks", {})
    if attacks:
        lines += ["The attacks:", ""] + [f"- {PHASES[k]}: {v}" for k, v in attacks.items()] + [""]
    return "\n".join(lines)


def counter_lines(results: dict) -> list[str]:
    """The replica's refusal counters that moved in each phase, summed over its rounds."""
    lines = []
    for phase in results["phases"].values():
        moved: dict[str, float] = {}
        for r in phase["rounds"]:
            for name, delta in (r.get("counters") or {}).items():
                moved[name] = moved.get(name, 0.0) + delta
        if moved:
            lines.append(f"- {phase['title']}: " + ", ".join(
                f"{name} +{bl.fmt(v, 0)}" for name, v in sorted(moved.items())))
    return lines

"""The replica benchmark's arithmetic (bench/capacity.py) and the capacity figures of
docs/operations.md: its worked example is what the sizing formula makes of its own table."""

import math
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import capacity as cap  # noqa: E402


def test_pg_stats_line_and_redis_info_are_read():
    assert cap.parse_pg_stats("120|340|56\n") == {
        "transactions": 120, "scans": 340, "rows_written": 56}
    with pytest.raises(ValueError):
        cap.parse_pg_stats("120|340")
    info = "# Stats\r\ntotal_connections_received:3\r\ntotal_commands_processed:9041\r\n"
    assert cap.redis_commands(info) == 9041
    with pytest.raises(ValueError):
        cap.redis_commands("# Stats\r\n")


def test_per_request_is_nan_without_requests():
    assert cap.per_request(30, 10) == 3
    assert math.isnan(cap.per_request(30, 0))
    assert math.isnan(cap.per_request(None, 10))


def test_replicas_combine_into_one_deployment():
    runs = [
        {"requests": 1000, "seconds": 1.0, "rps": 1000.0, "cpu_seconds": 0.2, "errors": 0},
        {"requests": 3000, "seconds": 1.0, "rps": 3000.0, "cpu_seconds": 0.4, "errors": 2},
    ]
    total = cap.combine(runs)
    assert total["rps"] == 4000 and total["rps_min"] == 1000 and total["rps_max"] == 3000
    # 0.6 CPU seconds over 4000 requests: 150 µs each, 6,667 per core-second.
    assert total["cpu_us_per_req"] == pytest.approx(150)
    assert total["rps_per_core"] == pytest.approx(6666.67, rel=1e-4)
    assert total["errors"] == 2


COSTS = {
    "card": cap.MethodCost(cpu_us=50, pg_transactions=0, redis_commands=0, q_calls=0),
    "get_task": cap.MethodCost(cpu_us=100, pg_transactions=1, redis_commands=0.01, q_calls=0),
}


def test_sizing_formula():
    load = cap.Deployment(rps=10_000, mix={"card": 0.5, "get_task": 0.5}, streams=1000)
    sized = cap.size(load, COSTS)
    # 10,000 × (0.5 × 50 + 0.5 × 100) µs = 0.75 cores; at half of one core each, 2 busy and
    # one spare.
    assert sized["cores"] == pytest.approx(0.75)
    assert sized["replicas"] == 3
    assert sized["pg_connections"] == 3 * 17
    assert sized["pg_transactions_per_s"] == pytest.approx(5000)
    # 50 commands/s from the requests; 1000 streams on 3 replicas, 334 at most on each: 3 calls
    # of up to 128 leases per replica every 5 s.
    assert sized["redis_commands_per_s"] == pytest.approx(50 + 3 * 3 / 5)
    # 1000 streams on the two replicas left when one is lost, 44 KiB each, over the busy RSS
    # and the response budget.
    assert sized["rss_mib_per_replica"] == pytest.approx(60 + 64 + 500 * 44 / 1024)
    # Never fewer than two replicas.
    assert cap.size(cap.Deployment(rps=1, mix={"card": 1.0}, streams=0), COSTS)["replicas"] == 2


def test_sizing_refuses_a_mix_it_cannot_price():
    with pytest.raises(ValueError, match="add up"):
        cap.size(cap.Deployment(rps=1, mix={"card": 0.5}, streams=0), COSTS)
    with pytest.raises(ValueError, match="no measured cost"):
        cap.size(cap.Deployment(rps=1, mix={"send_fresh": 1.0}, streams=0), COSTS)


# --- docs/operations.md, "Capacity" ------------------------------------------------------------

DOC = ROOT / "docs" / "operations.md"


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def _tables(text: str) -> list[list[list[str]]]:
    """Each markdown table of the text as rows of cells, the separator row left out."""
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def _number(cell: str) -> float:
    return float(re.sub(r"[^0-9.]", "", cell))


def test_the_docs_worked_example_is_the_formula_applied_to_the_docs_table():
    section = _section(DOC.read_text(), "## Capacity")
    measured, example = _tables(section)[:2]
    header = measured[0]
    col = {name: header.index(name) for name in (
        "CPU µs/req", "PG transactions/req", "Redis commands/req", "Q calls/req")}
    costs = {}
    for row in measured[1:]:
        name = re.search(r"`(\w+)`", row[0]).group(1)
        costs[name] = cap.MethodCost(
            cpu_us=_number(row[col["CPU µs/req"]]),
            pg_transactions=_number(row[col["PG transactions/req"]]),
            redis_commands=_number(row[col["Redis commands/req"]]),
            q_calls=_number(row[col["Q calls/req"]]))
    assert set(cap.EXAMPLE.mix) <= set(costs), "the table prices every method of the example"
    sized = cap.size(cap.EXAMPLE, costs)
    stated = dict(zip(example[0], example[1]))
    keys = {"cores": "cores busy", "replicas": "replicas (1 core each)",
            "pg_connections": "PostgreSQL connections",
            "pg_transactions_per_s": "PostgreSQL transactions/s",
            "redis_commands_per_s": "Redis commands/s", "q_calls_per_s": "Q calls/s",
            "rss_mib_per_replica": "memory per replica (MiB)"}
    for key, column in keys.items():
        # The docs round: to 0.01 for cores, to whole units for the rest.
        assert _number(stated[column]) == pytest.approx(sized[key], abs=0.006 if key == "cores"
                                                        else 0.51), column

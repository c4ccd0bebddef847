"""The benchmark's own arithmetic and parsing (bench/benchlib.py): cheap, no services."""

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import benchlib as bl  # noqa: E402


def test_percentile_nearest_rank():
    values = list(range(1, 1001))  # 1..1000, shuffled order must not matter
    values.reverse()
    assert bl.percentile(values, 50) == 500
    assert bl.percentile(values, 99) == 990
    assert bl.percentile(values, 99.9) == 999
    assert bl.percentile(values, 100) == 1000
    assert bl.percentile([7], 99.9) == 7
    assert math.isnan(bl.percentile([], 50))


def test_median_skips_missing():
    assert bl.median([3, 1, 2]) == 2
    assert bl.median([4, 1, 2, 3]) == 2.5
    assert bl.median([None, 5, math.nan, 1]) == 3
    assert math.isnan(bl.median([None]))


def test_ratio_and_verdict():
    assert bl.ratio(30, 1.5) == 20
    assert math.isnan(bl.ratio(1, 0))
    assert math.isnan(bl.ratio(None, 1))
    assert bl.verdict(20, 20, True) == "MET"
    assert bl.verdict(19.9, 20, True) == "MISS"
    assert bl.verdict(0.6, 0.5, False) == "MISS"
    assert bl.verdict(math.nan, 0.5, False) == "N/A"


def test_proc_parsing():
    # The command name may hold spaces and parentheses.
    stat = "1234 (tokio (rt) x) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 4 0 99 0"
    assert bl.cpu_ticks(stat) == 300
    status = "Name:\tgw\nVmHWM:\t   18432 kB\nVmRSS:\t   12000 kB\n"
    assert bl.status_kib(status, "VmHWM") == 18432
    assert bl.status_kib(status, "VmRSS") == 12000
    assert bl.status_kib(status, "VmSwap") is None


def test_markdown_table_aligns_numbers():
    table = bl.markdown_table(["Name", "req/s"], [["a", "1,200"], ["b", "3.5x"]])
    assert table.splitlines()[1] == "|---|---:|"
    assert bl.fmt(12345.6) == "12,346"
    assert bl.fmt(0.123, 2) == "0.12"
    assert bl.fmt(math.nan) == "-"


def test_admit_sql_is_the_gateways_statement():
    sql = bl.read_admit_sql(ROOT)
    assert sql.startswith("INSERT INTO a2a_tasks")
    assert "ON CONFLICT ON CONSTRAINT a2a_tasks_message_identity DO NOTHING" in sql
    assert "{COLUMNS}" not in sql and "cancel_requested_at" in sql
    # The admission of a new messageId reads nothing by identity.
    assert "SELECT" not in sql and "WHERE" not in sql
    script = bl.pgbench_script(sql, '{"text": "it\'s"}')
    assert "$" not in script.replace("'$", "")  # every placeholder bound
    assert script.count(":r") == 1  # a random messageId per transaction
    assert "'{\"text\": \"it''s\"}'::jsonb" in script


def test_admit_sql_refuses_another_shape():
    columns = 'const COLUMNS: &str = "task_id, state";\n'
    lookup = ('static ADMIT_INSERT: LazyLock<String> = LazyLock::new(|| {\n'
              '    format!(\n        "SELECT {COLUMNS} FROM a2a_tasks WHERE message_id = $9"\n    )\n});\n')
    with pytest.raises(ValueError):
        bl.admit_sql(columns + lookup)
    with pytest.raises(ValueError):
        bl.admit_sql(columns)
    insert = lookup.replace("SELECT {COLUMNS} FROM a2a_tasks WHERE message_id = $9",
                            "INSERT INTO a2a_tasks (message) VALUES ($9) "
                            "ON CONFLICT DO NOTHING RETURNING {COLUMNS}")
    assert bl.admit_sql(columns + insert) == (
        "INSERT INTO a2a_tasks (message) VALUES ($9) ON CONFLICT DO NOTHING "
        "RETURNING task_id, state")


def test_single_row_ceiling_script():
    assert bl.SINGLE_ROW_TABLE in bl.SINGLE_ROW_SETUP and "PRIMARY KEY" in bl.SINGLE_ROW_SETUP
    lines = bl.SINGLE_ROW_SCRIPT.strip().splitlines()
    assert lines[0].startswith("\\set r random(")
    assert lines[1].startswith(f"INSERT INTO {bl.SINGLE_ROW_TABLE}")
    assert lines[1].endswith("ON CONFLICT DO NOTHING;")


def test_send_ceiling_ratios():
    targets = {"gateway": {"rps": 900.0}, "pgbench": {"rps": 3600.0},
               "pgbench_row": {"rps": 9000.0}, "python": {"rps": 40.0}}
    assert bl.send_ceiling_ratios(targets) == {"admit": 0.25, "single_row": 0.1}
    missing = bl.send_ceiling_ratios({"gateway": {"rps": 900.0}})
    assert math.isnan(missing["admit"]) and math.isnan(missing["single_row"])

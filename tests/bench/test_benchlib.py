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


def test_a_target_is_judged_over_its_rounds():
    # Every round meets: MET.
    met = bl.judge([0.52, 0.55, 0.51], 0.5, True)
    assert met["verdict"] == "MET (3 of 3 rounds met)"
    assert (met["value"], met["low"], met["high"]) == (0.52, 0.51, 0.55)
    # The median meets, one round does not: at the edge, and said so.
    assert bl.judge([0.53, 0.48, 0.51], 0.5, True)["verdict"] == "UNSTEADY (2 of 3 rounds met)"
    # The median misses: a miss, whatever one round did.
    assert bl.judge([0.48, 0.51, 0.47], 0.5, True)["verdict"] == "MISS (1 of 3 rounds met)"
    # Lower is better.
    assert bl.judge([7.7, 8.1, 7.9], 8, False)["verdict"] == "UNSTEADY (2 of 3 rounds met)"
    # One round is not a verdict to quote.
    assert bl.judge([0.6], 0.5, True)["verdict"] == "MET (1 of 1 rounds met; too few rounds)"
    assert bl.judge([None, math.nan], 0.5, True)["verdict"] == "N/A"


def test_ratios_are_taken_within_each_round():
    runs = [{"target": "gateway", "round": 1, "rps": 60.0},
            {"target": "hyper", "round": 0, "rps": 100.0},
            {"target": "gateway", "round": 0, "rps": 50.0},
            {"target": "hyper", "round": 1, "rps": 200.0}]
    assert bl.per_round(runs, "gateway", "rps") == [50.0, 60.0]
    ratios = bl.paired(bl.per_round(runs, "gateway", "rps"), bl.per_round(runs, "hyper", "rps"),
                       bl.ratio)
    # Not 55 / 150 from the medians: each round against its own ceiling.
    assert ratios == [0.5, 0.3]
    assert bl.spread(bl.judge(ratios, 0.3, True), 2, "x") == "0.40x (0.30–0.50x over 2 rounds)"


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
    # The admission of a new messageId reads by identity only the tombstone a
    # retention sweep left, through its primary key: no task row is read first.
    assert sql.count("SELECT") == 2 and "FROM a2a_tasks" not in sql
    assert "WHERE NOT EXISTS (SELECT 1 FROM a2a_task_tombstones WHERE identity =" in sql
    script = bl.pgbench_script(sql, '{"text": "it\'s"}')
    assert "$" not in script.replace("'$", "")  # every placeholder bound
    # One random messageId per transaction, wherever the statement names the messageId.
    assert script.count("\\set r ") == 1 and script.count(":r") == sql.count("$5") == 2
    assert "'{\"text\": \"it''s\"}'::jsonb" in script


def test_q_calls_per_a2a_request_leave_out_the_feed_long_polls():
    before = {"introspect": 10, "get_run": 5, "run_changes": 3}
    after = {"introspect": 110, "get_run": 105, "run_grant": 100, "run_changes": 9,
             "access_changes": 2, "health": 0}
    deltas = bl.request_deltas(before, after)
    assert deltas == {"access_changes": 2, "get_run": 100, "introspect": 100,
                      "run_changes": 6, "run_grant": 100}
    # 300 calls of the requests themselves over 100 requests; the 8 feed polls are no one's.
    assert bl.q_calls_per_request(deltas, 100) == 3.0
    assert bl.q_calls_per_request({"run_changes": 40}, 10) == 0.0
    assert math.isnan(bl.q_calls_per_request(deltas, 0))
    # Counts that went down: Q's stats were reset in between, no reading.
    assert bl.request_deltas({"get_run": 5}, {"get_run": 1}) is None
    assert math.isnan(bl.q_calls_per_request(None, 100))
    assert bl.request_deltas({}, {}) == {}


def test_q_calls_by_route_and_the_benchmarks_own_calls():
    assert bl.subtract_calls({"run_by_workflow": 30, "run_events": 8, "approve": 4},
                             {"run_by_workflow": 30, "approve": 5}) == {"run_events": 8}
    assert bl.subtract_calls(None, {"approve": 1}) is None
    runs = [{"requests": 100, "q_requests": {"get_run": 100, "run_changes": 2}},
            {"requests": 300, "q_requests": {"get_run": 300, "run_grant": 200}},
            {"requests": 50, "q_requests": None}]  # no reading: left out
    assert bl.q_calls_by_route(runs) == {"get_run": 1.0, "run_changes": 0.005,
                                         "run_grant": 0.5}
    assert bl.q_calls_by_route([]) == {}
    assert bl.describe_calls({"get_run": 1.0, "introspect": 0.0004, "run_changes": 0.02}) == \
        "get_run 1.00, introspect <0.01, run_changes (feed) 0.02"
    assert bl.describe_calls({}) == "-"


def test_calls_table_lists_the_gateways_readings():
    results = {"scenarios": {
        "card": {"title": "Authenticated card", "targets": {"gateway": {"rps": 1.0}}},
        "get_task": {"title": "GetTask (completed)", "targets": {
            "gateway": {"q_calls_per_request": 2.0, "q_a2a_requests": 1200,
                        "q_calls_by_route": {"get_run": 1.0, "run_grant": 1.0}},
            "python": {"rps": 1.0}}},
    }, "streaming": {"streams": 4, "q_calls_per_request": 3.5, "q_a2a_requests": 8,
                     "q_calls_by_route": {"run_events": 2.5}}}
    headers, rows = bl.calls_table(results)
    assert headers[2] == "Q calls per A2A request"
    assert rows == [
        ["GetTask (completed)", "1,200", "2.00", "get_run 1.00, run_grant 1.00"],
        ["4 streams (SendMessage + SubscribeToTask each)", "8", "3.50", "run_events 2.50"],
    ]


def test_admit_sql_refuses_another_shape():
    columns = 'const COLUMNS: &str = "task_id, state";\n'
    lookup = ('static ADMIT_INSERT: LazyLock<String> = LazyLock::new(|| {\n'
              '    format!(\n        "SELECT {COLUMNS} FROM a2a_tasks WHERE message_id = $9"\n    )\n});\n')
    with pytest.raises(ValueError):
        bl.admit_sql(columns + lookup)
    with pytest.raises(ValueError):
        bl.admit_sql(columns)
    insert = lookup.replace("SELECT {COLUMNS} FROM a2a_tasks WHERE message_id = $9",
                            "INSERT INTO a2a_tasks (message, claim) VALUES ($9, $10) "
                            "ON CONFLICT DO NOTHING RETURNING {COLUMNS}")
    assert bl.admit_sql(columns + insert) == (
        "INSERT INTO a2a_tasks (message, claim) VALUES ($9, $10) ON CONFLICT DO NOTHING "
        "RETURNING task_id, state")
    # The claim's seconds fill $10 without touching $1.
    script = bl.pgbench_script(bl.admit_sql(columns + insert), "{}")
    assert "VALUES ('{}'::jsonb, 15)" in script


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


def test_prometheus_value_reads_one_unlabelled_sample():
    text = ("# TYPE a2a_allocations_total counter\n"
            "a2a_allocations_total 123456\n"
            "a2a_allocated_bytes_total 9e+06\n"
            'a2a_allocations_total_other{x="1"} 5\n')
    assert bl.prometheus_value(text, "a2a_allocations_total") == 123456
    assert bl.prometheus_value(text, "a2a_allocated_bytes_total") == 9e6
    assert bl.prometheus_value(text, "a2a_missing") is None

"""The per-task cost benchmark's arithmetic (bench/task_cost_math.py): readings, the
background rate taken out over the loaded interval's length, per-task figures and HOT shares,
and the figures docs/performance.md quotes from bench/results/task-cost.json."""

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import benchlib as bl  # noqa: E402
import task_cost_math as tc  # noqa: E402


def reading(at, transactions, wal, updates, hot, store_calls=0.0, task_updates=None,
            task_hot=None):
    pg = dict.fromkeys(tc.FIELDS, 0)
    pg.update(transactions=transactions, wal_bytes=wal, rows_updated=updates,
              rows_hot_updated=hot,
              task_updates=updates if task_updates is None else task_updates,
              task_hot_updates=hot if task_hot is None else task_hot)
    return tc.Reading(at, pg, store_calls)


def test_a_stats_line_is_read_in_field_order():
    line = "|".join(str(i) for i in range(len(tc.FIELDS))) + "\n"
    assert tc.parse_stats(line) == {name: i for i, name in enumerate(tc.FIELDS)}
    with pytest.raises(ValueError):
        tc.parse_stats("1|2|3")
    # The statement returns exactly the fields, one per column.
    assert tc.STATS_SQL.count("coalesce(sum(") + 2 == len(tc.FIELDS)


def test_the_background_rate_over_the_loaded_interval_is_taken_out():
    idle = tc.interval(reading(0, 100, 0, 0, 0, 10), reading(10, 231, 5000, 20, 20, 60),
                       own_statements=1)
    rate = tc.background_rate(idle)
    assert rate["transactions"] == pytest.approx(13.0)
    assert rate["wal_bytes"] == pytest.approx(500.0)
    assert rate["store_calls"] == pytest.approx(5.0)
    # 20 s loaded, 100 tasks, 5 polls and the first reading of the benchmark's own.
    work = tc.interval(reading(10, 231, 5000, 20, 20, 60),
                       reading(30, 231 + 260 + 300 + 6, 5000 + 10000 + 470000, 20 + 400, 20 + 100,
                               60 + 100 + 250), own_statements=6)
    per = tc.per_task(work, rate, 100)
    assert per["transactions"] == pytest.approx(3.0)
    assert per["wal_bytes"] == pytest.approx(4700.0)
    assert per["store_calls"] == pytest.approx(2.5)
    # The background's 2 updates a second (all HOT) over the 20 s come off both counts.
    assert per["task_updates"] == pytest.approx((400 - 40) / 100)
    assert per["task_hot_updates"] == pytest.approx((100 - 40) / 100)
    assert per["task_hot_ratio"] == pytest.approx(60 / 360)


def test_shares_are_bounded_and_undefined_without_updates():
    assert tc.share(3, 4) == 0.75
    assert tc.share(5, 4) == 1.0
    assert tc.share(-1, 4) == 0.0
    assert math.isnan(tc.share(1, 0))
    with pytest.raises(ValueError):
        tc.per_task({"seconds": 1.0, "transactions": 1.0}, {}, 0)
    with pytest.raises(ValueError):
        tc.background_rate({"seconds": 0.0})


def test_median_and_spread_ignore_missing_rounds():
    assert tc.median_and_spread([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert tc.median_and_spread([4.0, math.nan, 2.0]) == (3.0, 2.0, 4.0)
    assert all(math.isnan(v) for v in tc.median_and_spread([math.nan]))


def quoted(docs: str, stem: str) -> str:
    begin = f"<!-- bench/results/{stem}.md begins: tests/bench/test_task_cost.py -->"
    end = f"<!-- bench/results/{stem}.md ends -->"
    assert begin in docs and end in docs, f"docs/performance.md quotes {stem}.md"
    return docs.split(begin, 1)[1].split(end, 1)[0]


@pytest.mark.parametrize("stem", ["task-cost", "task-cost-before"])
def test_the_docs_quote_the_latest_full_results_as_generated(stem):
    """docs/performance.md's per-task blocks are bench/results/task-cost.md (this build) and
    task-cost-before.md (the build before, back to back) as generated, each from a full run
    (three rounds of 300 tasks), and each report is what its JSON renders to."""
    import task_cost  # noqa: E402  (imports bench/run.py's helpers)

    results = json.loads((ROOT / f"bench/results/{stem}.json").read_text())
    assert len(results["rounds"]) >= 3 and results["tasks"] >= 300, "a full run's results"
    report = (ROOT / f"bench/results/{stem}.md").read_text()
    assert report.strip() == task_cost.render(results).strip()
    docs = (ROOT / "docs/performance.md").read_text()
    assert quoted(docs, stem).strip() == report.strip()

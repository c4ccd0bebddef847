"""The held-streams scenario's arithmetic: which run a target reads, and its table."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import held_streams  # noqa: E402


def run(protocol, streams, opened, ended, before, open_, held):
    return {"protocol": protocol, "streams": streams, "open_streams": opened,
            "ended_early": ended, "open_seconds": 1.5, "rss_before_kib": before,
            "rss_open_kib": open_, "rss_held_kib": held,
            "kib_per_stream": (max(open_, held) - before) / opened if opened else None}


def test_find_all_picks_every_round_by_protocol_and_count_in_round_order():
    late = dict(run("h1", 256, 256, 0, 10_000, 15_000, 13_900), round=1)
    early = dict(run("h1", 256, 256, 0, 10_000, 14_000, 13_900), round=0)
    results = {"held_streams": {"runs": [run("h2", 256, 256, 0, 10_000, 12_000, 12_100),
                                         late, early]}}
    assert [r["rss_open_kib"] for r in held_streams.find_all(results, "h1", 256)] == [
        14_000, 15_000]
    assert held_streams.find_all(results, "h2", 10_000) == []
    assert held_streams.find_all({}, "h2", 256) == []


def test_table_reports_the_larger_of_open_and_held_rss_per_round():
    held = {"runs": [dict(run("h2", 256, 256, 0, 10_240, 12_288, 13_312), round=1),
                     dict(run("h2", 256, 256, 0, 10_240, 12_288, 12_288), round=0)]}
    headers, rows = held_streams.table(held)
    assert headers[0] == "Protocol" and headers[2] == "round" and headers[-1] == "KiB per stream"
    assert rows == [["HTTP/2", "256", "0", "256", "0", "1.5", "10.0", "12.0", "8.0"],
                    ["HTTP/2", "256", "1", "256", "0", "1.5", "10.0", "13.0", "12.0"]]

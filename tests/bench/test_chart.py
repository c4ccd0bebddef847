"""The results chart (bench/chart.py): which bars it draws, in which order and where. The
drawing itself needs matplotlib, which only scripts/bench installs (bench/requirements.txt):
that test runs where it is installed."""

import json
import math
import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import chart  # noqa: E402

RESULTS = {
    "date": "2026-11-30 14:27 UTC",
    "mode": "quick",
    "rounds": 1,
    "seconds": 3.0,
    "machine": {"nproc": 2},
    "scenarios": {
        "card": {
            "title": "Authenticated card",
            "targets": {
                "hyper": {"rps": 150000.0, "p99_ms": 2.4},
                "gateway": {"rps": 10000.0, "p99_ms": 8.0},
                "python": {"rps": 700.0, "p99_ms": 52.0},
            },
        },
        "send": {
            "title": "SendMessage",
            "targets": {
                "gateway": {"rps": 300.0, "p99_ms": math.nan},
                "pgbench": {"rps": 450.0, "p99_ms": 74.0},
                "mystery": {"rps": 0, "p99_ms": None},
            },
        },
    },
}


def test_series_gateway_first_then_known_targets_then_others():
    titles, series = chart.chart_series(RESULTS)
    assert titles == ["Authenticated card", "SendMessage"]
    assert [s["target"] for s in series] == ["gateway", "python", "hyper", "pgbench", "mystery"]
    assert [s["label"] for s in series][:4] == [
        "gateway",
        "Python a2a-sdk",
        "raw hyper",
        "pgbench (admit SQL)",
    ]


def test_series_values_align_with_scenarios_and_drop_what_a_log_axis_cannot_show():
    _, series = chart.chart_series(RESULTS)
    by = {s["target"]: s for s in series}
    assert by["gateway"]["rps"] == [10000.0, 300.0]
    assert by["gateway"]["p99_ms"] == [8.0, None]  # NaN
    assert by["python"]["rps"] == [700.0, None]  # absent from the second scenario
    assert by["mystery"]["rps"] == [None, None]  # zero and missing


def test_bars_pack_per_scenario_without_gaps_for_absent_targets():
    _, series = chart.chart_series(RESULTS)
    positions, height = chart.bar_positions(series, 2)
    # Three bars in the busiest scenario share 0.8 of a row.
    assert height == pytest.approx(0.8 / 3)
    card = [positions[(i, 0)] for i in range(3)]
    assert card == pytest.approx([-height, 0.0, height])
    # SendMessage: gateway and pgbench only, side by side around the row; "mystery" has nothing.
    assert set(k for k in positions if k[1] == 1) == {(0, 1), (3, 1)}
    assert positions[(0, 1)] == pytest.approx(1 - height / 2)
    assert positions[(3, 1)] == pytest.approx(1 + height / 2)


def test_subtitle_says_how_the_numbers_were_taken():
    text = chart.subtitle(RESULTS)
    assert "2026-11-30 14:27 UTC" in text and "quick mode" in text and "3 s per target" in text


def test_renders_the_committed_results_as_a_png(tmp_path):
    results = json.loads((ROOT / "bench" / "results" / "latest.json").read_text())
    out = chart.render_chart(results, tmp_path / "latest.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 1000 and height >= 400


def test_a_run_without_request_scenarios_has_no_chart_and_keeps_no_stale_one(tmp_path):
    # `--only streaming`: streams only, which the chart does not show.
    results = {**RESULTS, "scenarios": {}, "streaming": {"open": 256}}
    stale = tmp_path / "latest.png"
    stale.write_bytes(b"an older run's chart")
    assert chart.render_chart(results, stale) is None
    assert not stale.exists()

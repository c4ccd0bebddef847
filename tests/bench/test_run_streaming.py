"""The streaming scenario's clock: Q's event stamps read back from its events API."""

import datetime as dt
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import run  # noqa: E402


def events(*pairs: tuple[str, str]) -> httpx.Response:
    body = {"events": [{"seq": i + 1, "status": status, "at": at}
                       for i, (status, at) in enumerate(pairs)], "last_seq": len(pairs)}
    return httpx.Response(200, json=body, request=httpx.Request("GET", "http://q/events"))


def test_rfc3339_keeps_microseconds_and_reads_utc():
    at = dt.datetime(2026, 12, 5, 9, 30, tzinfo=dt.timezone.utc).timestamp()
    assert run.rfc3339("2026-12-05T09:30:00Z") == at
    assert abs(run.rfc3339("2026-12-05T09:30:00.123456789Z") - (at + 0.123456)) < 1e-6
    assert abs(run.rfc3339("2026-12-05T09:30:00.5Z") - (at + 0.5)) < 1e-6


def test_the_event_timed_is_the_running_after_the_wait_for_approval():
    r = events(("queued", "2026-12-05T09:30:00Z"), ("running", "2026-12-05T09:30:01Z"),
               ("awaiting_approval", "2026-12-05T09:30:02Z"),
               ("running", "2026-12-05T09:30:03.25Z"), ("succeeded", "2026-12-05T09:30:04Z"))
    expected = dt.datetime(2026, 12, 5, 9, 30, 3, 250000, tzinfo=dt.timezone.utc).timestamp()
    assert run.approved_event_at(r) == expected


def test_a_run_that_never_waited_has_no_event_to_time():
    r = events(("queued", "2026-12-05T09:30:00Z"), ("running", "2026-12-05T09:30:01Z"))
    assert run.approved_event_at(r) is None

"""bench/lease_renewal.py: it reads the gateway's own script and batch size, and its batch and
per-lease renewals both renew on a real Redis (the times are what it reports, not asserted)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import lease_renewal as lr  # noqa: E402


def test_the_script_and_batch_come_from_the_gateway_source():
    script, batch = lr.gateway_script()
    assert "ZMSCORE" in script and batch > 0


def test_redis_cli_quoting_keeps_newlines_and_quotes():
    assert lr.quoted('a "b"\nc\\d') == '"a \\"b\\"\\nc\\\\d"'


def test_both_ways_renew_every_lease():
    script, _ = lr.gateway_script()
    port = lr.free_port()
    with lr.private_redis(port):
        for renew in (lambda: lr.renew_batched(port, script, 8, 2, 2),
                      lambda: lr.renew_each(port, 8, 2, 2)):
            assert renew() > 0
            # Each lease's expiry came down from its setup value to a TTL from now, in all
            # three of its sets.
            assert lr.renewed(port, "g") == 8 and lr.renewed(port, "t") == 8
            assert lr.renewed(port, "p0") == 4 and lr.renewed(port, "p1") == 4

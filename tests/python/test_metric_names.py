"""The metric names the operators' dashboard and alert rules query (helm/q-a2a-gateway/files)
are the names a running gateway exports: after traffic that touches every metric, the scrape
of its metrics listener (Q_A2A_METRICS_URL, the `metrics on` address) holds every name the
queries use, and exactly the names src/metrics.rs declares (histograms as _bucket, _sum and
_count).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from conftest import BOB, HTTP_TIMEOUT, WRITER, bearer, new_id, rpc_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helm"))
from metric_names import exported_names, scraped_names, used_names  # noqa: E402

SLOWER = "ag-slower"  # runs about 7 s: its streams stay open that long
PER_PRINCIPAL_BOUND = 4  # config/gateway.toml [observers] per_principal


@pytest.fixture
def metrics_url() -> str:
    url = os.environ.get("Q_A2A_METRICS_URL", "").strip()
    if not url:
        pytest.fail(
            "Q_A2A_METRICS_URL is not set: export the gateway's `metrics on` URL "
            "(scripts/test does).",
            pytrace=False,
        )
    return url.rstrip("/")


def rpc_body(method: str, text: str) -> str:
    message = {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": text}]}
    return json.dumps({"jsonrpc": "2.0", "id": new_id(), "method": method, "params": {"message": message}})


def headers(token: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "A2A-Version": "1.0", **bearer(token)}


async def touch_every_metric(gateway: str) -> None:
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        # A completed blocking send: requests, latency, calls to Q, a lease held and released.
        response = await http.post(
            rpc_url(gateway, WRITER), headers=headers(BOB), content=rpc_body("SendMessage", "metrics")
        )
        assert response.status_code == 200, response.text
        # An agent Q does not know: Q refuses agent_access (an upstream error of kind refused).
        response = await http.post(
            rpc_url(gateway, "ag-does-not-exist"), headers=headers(BOB), content=rpc_body("SendMessage", "x")
        )
        assert response.status_code == 404, response.text
        # A retired route (answered 410 whoever calls; the call is counted by attribution).
        response = await http.get(f"{gateway}/v1/a2a/tasks/old-process-task")
        assert response.status_code == 410, response.text
        # The principal's observer bound: that many streams held open, one more is refused.
        async with AsyncExitStack() as streams:
            # Each line iterator stays referenced and suspended: leaving an `async for` early
            # would close the response, and with it the lease.
            readers = []
            for _ in range(PER_PRINCIPAL_BOUND):
                stream = await streams.enter_async_context(
                    http.stream(
                        "POST",
                        rpc_url(gateway, SLOWER),
                        headers=headers(BOB),
                        content=rpc_body("SendStreamingMessage", "hold a lease"),
                    )
                )
                assert stream.status_code == 200
                readers.append(stream.aiter_lines())
                while not (await anext(readers[-1])).startswith("data:"):
                    pass  # until the first event: the lease is held
            refused = await http.post(
                rpc_url(gateway, SLOWER),
                headers=headers(BOB),
                content=rpc_body("SendStreamingMessage", "one too many"),
            )
            assert refused.status_code == 429, refused.text


async def scrape(metrics_url: str, wanted: set[str]) -> set[str]:
    """The names in /metrics, once `wanted` are all there (gauges refresh every 2 s)."""
    deadline = time.monotonic() + 15
    async with httpx.AsyncClient(timeout=10) as http:
        while True:
            response = await http.get(f"{metrics_url}/metrics")
            assert response.status_code == 200
            names = scraped_names(response.text)
            if wanted <= names or time.monotonic() > deadline:
                return names
            await asyncio.sleep(0.5)


async def test_dashboard_and_rules_query_only_exported_metrics(gateway, metrics_url):
    await touch_every_metric(gateway)
    declared = exported_names()
    names = await scrape(metrics_url, declared)
    used = used_names()
    assert used and not used - names, f"queried but absent from /metrics: {sorted(used - names)}"
    # src/metrics.rs is the whole truth of what is exported, both ways.
    ours = {n for n in names if n.startswith("a2a_")}
    assert ours == declared, (
        f"declared but not scraped: {sorted(declared - ours)}; "
        f"scraped but not declared: {sorted(ours - declared)}"
    )

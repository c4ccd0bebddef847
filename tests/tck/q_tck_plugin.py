"""pytest plugin that runs the official A2A TCK against the gateway (scripts/tck).

Loaded with ``run_tck.py ... -- -p q_tck_plugin`` and this directory on ``PYTHONPATH``. It
changes nothing the kit sends; it only:

* authenticates: the kit has no option for credentials, and every profile route needs a
  bearer token. The kit builds its own httpx clients (one per transport, plus module-level
  ``httpx.get``/``httpx.post`` calls that build one each time), so every client built during
  the run gets a request hook that sets ``Authorization: Bearer $Q_A2A_TCK_TOKEN`` on requests
  to ``$Q_A2A_TCK_ORIGIN`` that carry none. ``A2A-Version`` is not added: the kit sends it on
  every RPC call and omits or alters it on purpose in its version tests.
* splits the tests between the fixture agents: the kit expects one agent whose behaviour
  follows the messageId prefix of each message; the gateway (rightly) never looks at message
  ids, so the tests that need a task waiting for input (the kit's ``tck-input-required``
  scenario) run against an agent that asks for approval, the others against one that
  completes. ``$Q_A2A_TCK_WAITING_TESTS`` names the file of node-id prefixes of the former;
  ``$Q_A2A_TCK_RUN`` is ``complete`` (deselects them) or ``waiting`` (keeps only them).
* writes each test's outcome and skip reason to ``$Q_A2A_TCK_OUTCOMES`` (JSON), which the
  kit's own reports do not keep.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port)


def _install_auth() -> None:
    token = os.environ.get("Q_A2A_TCK_TOKEN", "")
    origin_text = os.environ.get("Q_A2A_TCK_ORIGIN", "")
    if not token or not origin_text:
        raise pytest.UsageError("q_tck_plugin needs Q_A2A_TCK_TOKEN and Q_A2A_TCK_ORIGIN")
    origin = _origin(httpx.URL(origin_text))
    value = f"Bearer {token}"

    def add_auth(request: httpx.Request) -> None:
        if _origin(request.url) == origin and "authorization" not in request.headers:
            request.headers["Authorization"] = value

    async def add_auth_async(request: httpx.Request) -> None:
        add_auth(request)

    def wrap(cls: type, hook: object) -> None:
        original = cls.__init__
        if getattr(original, "_q_tck", False):
            return

        def __init__(self, *args, **kwargs):  # noqa: N807 (replaces the constructor)
            hooks = dict(kwargs.pop("event_hooks", None) or {})
            hooks["request"] = [*hooks.get("request", []), hook]
            original(self, *args, event_hooks=hooks, **kwargs)

        __init__._q_tck = True  # type: ignore[attr-defined]
        cls.__init__ = __init__

    wrap(httpx.Client, add_auth)
    wrap(httpx.AsyncClient, add_auth_async)


def _waiting_prefixes() -> list[str]:
    path = os.environ.get("Q_A2A_TCK_WAITING_TESTS", "")
    if not path:
        return []
    with open(path, encoding="utf-8") as f:
        lines = (line.split("#", 1)[0].strip() for line in f)
        return [line for line in lines if line]


_outcomes: dict[str, dict[str, str]] = {}


def pytest_configure(config: pytest.Config) -> None:
    _install_auth()
    run = os.environ.get("Q_A2A_TCK_RUN", "complete")
    if run not in ("complete", "waiting"):
        raise pytest.UsageError(f"Q_A2A_TCK_RUN must be complete or waiting, not {run!r}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    prefixes = _waiting_prefixes()
    if not prefixes:
        return
    keep_waiting = os.environ.get("Q_A2A_TCK_RUN", "complete") == "waiting"
    selected, deselected = [], []
    for item in items:
        waiting = any(item.nodeid.startswith(p) for p in prefixes)
        (selected if waiting == keep_waiting else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # The call phase decides, unless setup already skipped or failed the test.
    if report.when == "call" or (report.when == "setup" and not report.passed):
        reason = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = str(report.longrepr[2])
        elif hasattr(report, "wasxfail"):
            reason = str(report.wasxfail)
        elif report.failed:
            reason = report.longreprtext.strip().splitlines()[-1] if report.longreprtext else ""
        _outcomes[report.nodeid] = {"outcome": report.outcome, "reason": reason[:500]}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:  # noqa: ARG001
    path = os.environ.get("Q_A2A_TCK_OUTCOMES", "")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_outcomes, f, indent=1, sort_keys=True)

"""examples/a2a/client.py run as its users run it: a subprocess with the environment it
documents (Q_A2A_AGENT_URL, Q_API_KEY, optionally Q_A2A_MESSAGE_ID), against the running
gateway. Q_A2A_UPSTREAM_URL (set by scripts/test) lets the tests count the runs Q created.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import ALICE, SLOW, WRITER, agent_base, new_id, rpc_url

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "a2a" / "client.py"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.fixture(scope="session")
def upstream() -> str:
    """Q's (reference) internal API, to count runs. Fails (never skips) when unset."""
    url = os.environ.get("Q_A2A_UPSTREAM_URL", "").strip().rstrip("/")
    if not url:
        pytest.fail("Q_A2A_UPSTREAM_URL is not set (scripts/test sets it)", pytrace=False)
    return url


def example_env(gateway: str, agent: str, message_id: str | None = None) -> dict[str, str]:
    # Only the variables the example documents, so nothing from the caller's shell leaks in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("Q_A2A_") and k != "Q_API_KEY"}
    env["Q_A2A_AGENT_URL"] = agent_base(gateway, agent)
    env["Q_API_KEY"] = ALICE
    if message_id is not None:
        env["Q_A2A_MESSAGE_ID"] = message_id
    return env


def run_example(
    gateway: str, agent: str = WRITER, message_id: str | None = None, text: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(EXAMPLE)] + ([text] if text else [])
    return subprocess.run(
        args,
        env=example_env(gateway, agent, message_id),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,  # above the client's own 130 s HTTP timeout
    )


def printed(stdout: str, label: str) -> str:
    match = re.search(rf"^{label}:\s+(\S+)$", stdout, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{stdout}"
    return match.group(1)


def rpc(gateway: str, agent: str, method: str, params: dict) -> dict:
    response = httpx.post(
        rpc_url(gateway, agent),
        json={"jsonrpc": "2.0", "id": "1", "method": method, "params": params},
        headers={"Authorization": f"Bearer {ALICE}", "A2A-Version": "1.0"},
        timeout=30,
    )
    response.raise_for_status()
    body = response.json()
    assert "error" not in body, body
    return body["result"]


@contextlib.contextmanager
def without_deduplication(upstream: str):
    """Q's workflow-id deduplication off while the block runs, so that a second create for one
    task shows as a second run in Q's record instead of being hidden by Q."""
    def switch(enabled: bool) -> None:
        httpx.post(f"{upstream}/admin/workflow-dedup", json={"enabled": enabled}, timeout=10).raise_for_status()

    switch(False)
    try:
        yield
    finally:
        switch(True)


def runs_of(upstream: str, task_id: str) -> list[dict]:
    """Runs Q holds under the task's saved workflow identity."""
    response = httpx.get(f"{upstream}/admin/runs", params={"workflow_id": f"a2a-task-{task_id}"}, timeout=10)
    response.raise_for_status()
    return response.json()["runs"]


def completed(result: subprocess.CompletedProcess[str]) -> str:
    """The task id of a run of the example that completed its task."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert printed(result.stdout, "state") == "TASK_STATE_COMPLETED", result.stdout
    return printed(result.stdout, "task id")


def test_example_completes_a_task_under_the_printed_message_id(gateway: str) -> None:
    result = run_example(gateway, text="Summarise the A2A profile")
    task_id = completed(result)
    message_id = printed(result.stdout, "messageId")
    assert re.fullmatch(UUID, message_id), message_id
    assert f"re-run with Q_A2A_MESSAGE_ID={message_id}" in result.stdout
    assert f"-> {rpc_url(gateway, WRITER)} (JSONRPC 1.0)" in result.stdout, result.stdout
    artifact = re.search(r"^--- artifact \S+ \(text/markdown\) ---\n(.+)", result.stdout, re.MULTILINE | re.DOTALL)
    assert artifact and artifact.group(1).strip(), result.stdout
    # The printed id is the durable identity of the task the example reports.
    task = rpc(gateway, WRITER, "GetTask", {"id": task_id})
    assert task["history"][0]["messageId"] == message_id, task


def test_repeating_the_message_id_recovers_the_same_task(gateway: str, upstream: str) -> None:
    with without_deduplication(upstream):
        repeated(gateway, upstream)


def repeated(gateway: str, upstream: str) -> None:
    first = run_example(gateway)
    task_id = completed(first)
    message_id = printed(first.stdout, "messageId")

    again = run_example(gateway, message_id=message_id)
    assert f"Using Q_A2A_MESSAGE_ID={message_id}" in again.stdout, again.stdout
    assert completed(again) == task_id
    assert printed(again.stdout, "context id") == printed(first.stdout, "context id")
    assert len(runs_of(upstream, task_id)) == 1


def test_a_lost_answer_is_recovered_with_the_retained_message_id(gateway: str, upstream: str) -> None:
    """The uncertain case the example is written for: the submission reached the gateway, the
    client never saw the answer (killed mid-call). Re-running with the printed id recovers it,
    with one run in Q's record (its deduplication off)."""
    with without_deduplication(upstream):
        lost_answer_recovered(gateway, upstream)


def lost_answer_recovered(gateway: str, upstream: str) -> None:
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLE)],
        env=example_env(gateway, SLOW),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        message_id = printed(process.stdout.readline(), "messageId")
        # Wait until the gateway has committed the task, then drop the client mid-call.
        deadline = time.monotonic() + 20
        task_id = None
        while task_id is None:
            assert process.poll() is None, "the example finished before it could be interrupted"
            assert time.monotonic() < deadline, "the submission never reached the gateway"
            tasks = rpc(gateway, SLOW, "ListTasks", {"pageSize": 100})["tasks"]
            task_id = next(
                (t["id"] for t in tasks if any(m["messageId"] == message_id for m in t.get("history", []))),
                None,
            )
            time.sleep(0.1)
    finally:
        process.kill()
        stdout, _ = process.communicate()
    assert "task id:" not in stdout, "the example got its answer before it was killed"

    recovered = run_example(gateway, SLOW, message_id=message_id)
    assert completed(recovered) == task_id
    assert len(runs_of(upstream, task_id)) == 1


def test_the_same_message_id_with_other_text_is_refused(gateway: str) -> None:
    message_id = new_id()
    completed(run_example(gateway, message_id=message_id, text="first text"))
    changed = run_example(gateway, message_id=message_id, text="other text")
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert "InvalidParamsError" in changed.stderr, changed.stderr
    assert "repeat the original text to recover the original task" in changed.stderr, changed.stderr


def test_without_its_environment_the_example_says_what_to_set(gateway: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("Q_A2A_") and k != "Q_API_KEY"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "set Q_A2A_AGENT_URL" in result.stderr and "Q_API_KEY" in result.stderr, result.stderr

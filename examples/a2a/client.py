#!/usr/bin/env python3
"""Call a Q agent over A2A 1.0 JSON-RPC with the official Python SDK (a2a-sdk 1.2.2).

Setup (once, from the repository root):

    scripts/setup-python            # creates .venv with a2a-sdk==1.2.2
    # or, in your own environment:  pip install a2a-sdk==1.2.2

Run:

    export Q_A2A_AGENT_URL=https://q.example/v1/a2a/agents/ag-writer   # agent base URL
    export Q_API_KEY=...            # bearer credential with ai:answer, a2a:read, a2a:delegate
    export Q_A2A_MESSAGE_ID=...     # optional; see "Recovery" below
    .venv/bin/python examples/a2a/client.py ["optional message text"]

What it does:

 1. GET {Q_A2A_AGENT_URL}/.well-known/agent-card.json with the bearer token
    (Q's card is authenticated) and picks the JSONRPC / protocol 1.0 interface.
 2. Sends one blocking SendMessage (a new text task; the input is synthetic
    unless you pass text) and waits for the run to finish. The gateway holds a
    blocking call for up to 110 s, so the HTTP timeout here is 130 s.
 3. Prints the task id, context id, final state and the Markdown artifact text.

Recovery: message.messageId is the durable identity of the submission (scoped
to tenant, principal and agent). The script prints it BEFORE sending. If the
call times out or the connection drops, the run may still have been accepted:
re-run with Q_A2A_MESSAGE_ID set to the printed value and the same text. Q then
returns the same task (waiting for it again); it never starts a second run.

Exit status: 0 when the task completed, non-zero otherwise.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import httpx

from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    ClientConfig,
    ClientFactory,
)
from a2a.types import (
    AgentInterface,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError, InvalidParamsError

DEFAULT_TEXT = "Synthetic example input: write a two-line Markdown note about A2A."
HTTP_TIMEOUT_S = 130.0  # > the gateway's 110 s blocking-wait window


def fail(msg: str, code: int = 1) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


def recovery_hint(message_id: str) -> None:
    print(
        "\nThe submission may or may not have been accepted. To recover it without\n"
        "starting a second run, re-run with the SAME message id and text:\n"
        f"    export Q_A2A_MESSAGE_ID={message_id}\n"
        "The gateway returns the same task for a repeated message id.",
        file=sys.stderr,
    )


def pick_jsonrpc_1_0(interfaces) -> AgentInterface | None:
    for iface in interfaces:
        if iface.protocol_binding == "JSONRPC" and iface.protocol_version.split(".")[:2] == ["1", "0"]:
            return iface
    return None


async def main() -> int:
    agent_url = os.environ.get("Q_A2A_AGENT_URL", "").rstrip("/")
    api_key = os.environ.get("Q_API_KEY", "")
    if not agent_url or not api_key:
        return fail("set Q_A2A_AGENT_URL (agent base URL) and Q_API_KEY (bearer token)", 2)
    text = " ".join(sys.argv[1:]) or DEFAULT_TEXT

    message_id = os.environ.get("Q_A2A_MESSAGE_ID")
    if message_id:
        print(f"Using Q_A2A_MESSAGE_ID={message_id} (recovering/repeating that submission).")
    else:
        message_id = str(uuid.uuid4())
        print(f"messageId: {message_id}")
        print(f"Keep it: if this call fails uncertainly, re-run with Q_A2A_MESSAGE_ID={message_id}")
    sys.stdout.flush()

    # One httpx client carries the bearer token for both the card GET and the
    # RPC calls. The SDK adds "A2A-Version: 1.0" to its default headers.
    http = httpx.AsyncClient(
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=httpx.Timeout(HTTP_TIMEOUT_S, connect=10.0),
    )
    try:
        # 1. Authenticated card.
        try:
            card = await A2ACardResolver(http, agent_url).get_agent_card()
        except A2AClientError as e:
            return fail(f"could not fetch the agent card: {e}")
        iface = pick_jsonrpc_1_0(card.supported_interfaces)
        if iface is None:
            return fail("the agent card has no JSONRPC protocol 1.0 interface")
        print(f"Agent: {card.name} -> {iface.url} (JSONRPC {iface.protocol_version})")

        # 2. Blocking SendMessage over JSON-RPC (non-streaming).
        config = ClientConfig(streaming=False, httpx_client=http, supported_protocol_bindings=["JSONRPC"])
        client = ClientFactory(config).create(card)
        request = SendMessageRequest(
            message=Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)]),
        )
        request.configuration.accepted_output_modes.extend(["text/markdown", "text/plain"])
        try:
            task: Task | None = None
            async for event in client.send_message(request):
                if event.HasField("task"):
                    task = event.task
                elif event.HasField("message"):
                    print("Agent replied with a message:")
                    print("".join(p.text for p in event.message.parts))
                    return 0
        except A2AClientTimeoutError:
            print("error: timed out waiting for the gateway.", file=sys.stderr)
            recovery_hint(message_id)
            return 75
        except A2AError as e:
            # JSON-RPC errors map to typed exceptions (InvalidParamsError, ...);
            # HTTP/network problems are A2AClientError.
            print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
            if isinstance(e, InvalidParamsError) and os.environ.get("Q_A2A_MESSAGE_ID"):
                print(
                    "If this message id was already used with different text, unset Q_A2A_MESSAGE_ID\n"
                    "for a new submission, or repeat the original text to recover the original task.",
                    file=sys.stderr,
                )
            if isinstance(e, A2AClientError) and "Network communication error" in str(e):
                recovery_hint(message_id)
            return 1
        if task is None:
            return fail("no task in the response")

        # 3. Report.
        state = TaskState.Name(task.status.state)
        print(f"task id:    {task.id}")
        print(f"context id: {task.context_id}")
        print(f"state:      {state}")
        for artifact in task.artifacts:
            for part in artifact.parts:
                if part.HasField("text") and part.media_type in ("text/markdown", ""):
                    print(f"\n--- artifact {artifact.artifact_id} ({part.media_type or 'text'}) ---")
                    print(part.text)
        if task.status.state == TaskState.TASK_STATE_COMPLETED:
            return 0
        if task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING):
            print(
                "\nThe run is still in progress (the HTTP wait window ended). It continues durably:\n"
                f"re-run with Q_A2A_MESSAGE_ID={message_id} or poll GetTask for task {task.id}.",
                file=sys.stderr,
            )
            return 75
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            print("\nThe task needs approval or input: use Q's approval/resume API, then GetTask.", file=sys.stderr)
        return 1
    finally:
        await http.aclose()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

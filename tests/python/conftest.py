"""Shared fixtures for the A2A gateway suite (official a2a-sdk 1.2.2 client).

The runner starts the reference upstream and the gateway, then runs

    Q_A2A_GATEWAY_URL=http://127.0.0.1:PORT .venv/bin/pytest tests/python

Q_A2A_GATEWAY_URL is the gateway origin (no trailing slash) and must equal the
public base URL the gateway writes into its cards. Without it every test FAILS
(nothing is skipped). Identities come from config/q-fixtures.json.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from a2a.client import (
    A2ACardResolver,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
)
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    Artifact,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
)

# Blocking sends may be held for up to 110 s by the gateway.
HTTP_TIMEOUT = httpx.Timeout(130.0, connect=10.0)

# Tokens (config/q-fixtures.json).
ALICE = "tok-alice"  # t-acme, all scopes
ALICE_WILD = "tok-alice-wild"  # ai:*, a2a:*
ALICE_READ = "tok-alice-read"  # no a2a:delegate
BOB = "tok-bob"  # t-acme, other principal, same workspace ws-acme-main
CAROL = "tok-carol"  # t-globex (other tenant)
DAVE = "tok-dave"  # t-legacy: tenant without the agent_api feature
NOPE = "tok-nope"  # unknown

# Agents.
WRITER = "ag-writer"  # ~0.3 s, Markdown output, ws-acme-main
SLOW = "ag-slow"  # ~4 s, ws-acme-main
PRIVATE = "ag-private"  # ws-acme-private (alice only)
LEGACY = "ag-legacy"  # t-legacy


def _gateway_url() -> str:
    url = os.environ.get("Q_A2A_GATEWAY_URL", "").strip()
    if not url:
        pytest.fail(
            "Q_A2A_GATEWAY_URL is not set. This suite runs the official a2a-sdk client against a "
            "running gateway; start it (e.g. scripts/dev) and export "
            "Q_A2A_GATEWAY_URL=http://127.0.0.1:PORT (no trailing slash).",
            pytrace=False,
        )
    return url.rstrip("/")


@pytest.fixture(scope="session")
def gateway() -> str:
    """Gateway origin, e.g. http://127.0.0.1:8080. Fails (never skips) when unset."""
    return _gateway_url()


@pytest.fixture(autouse=True)
def _require_gateway(gateway: str) -> None:
    """Every test depends on the gateway URL, so a missing URL fails every test."""


def agent_base(gateway: str, agent: str) -> str:
    return f"{gateway}/v1/a2a/agents/{agent}"


def card_url(gateway: str, agent: str) -> str:
    return f"{agent_base(gateway, agent)}/.well-known/agent-card.json"


def rpc_url(gateway: str, agent: str) -> str:
    return f"{agent_base(gateway, agent)}/rpc"


def new_id() -> str:
    return str(uuid.uuid4())


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def as_token(token: str) -> ClientCallContext:
    """Per-call header override (SDK service parameters become HTTP headers)."""
    return ClientCallContext(service_parameters=bearer(token))


def text_message(text: str = "hello gateway", message_id: str | None = None) -> Message:
    return Message(message_id=message_id or new_id(), role=Role.ROLE_USER, parts=[Part(text=text)])


def send_request(message: Message) -> SendMessageRequest:
    return SendMessageRequest(message=message)


async def send(client: Client, request: SendMessageRequest, context: ClientCallContext | None = None) -> Task:
    """SendMessage via the SDK client and return the Task (the gateway never answers with a Message)."""
    events = [event async for event in client.send_message(request, context=context)]
    assert len(events) == 1, f"non-streaming send yields exactly one event, got {events}"
    assert events[0].HasField("task"), f"expected a task result, got {events[0]}"
    return events[0].task


def static_card(gateway: str, agent: str) -> AgentCard:
    """A card built locally (for agents whose card the caller may not read)."""
    return AgentCard(
        name=agent,
        supported_interfaces=[
            AgentInterface(url=rpc_url(gateway, agent), protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False, extended_agent_card=False),
    )


def markdown_artifact_text(artifact: Artifact) -> str:
    assert len(artifact.parts) == 1, f"expected one Markdown text part, got {artifact.parts}"
    part = artifact.parts[0]
    assert part.HasField("text"), f"artifact part is not text: {part}"
    assert part.media_type == "text/markdown", f"mediaType {part.media_type!r}"
    return part.text


def check_artifact_integrity(artifact: Artifact) -> str:
    """Verify artifact.metadata {sha256, byteCount} against the Markdown text; return the text."""
    text = markdown_artifact_text(artifact)
    meta = dict(artifact.metadata)
    assert "sha256" in meta and "byteCount" in meta, f"artifact.metadata lacks sha256/byteCount: {meta}"
    data = text.encode("utf-8")
    assert meta["sha256"] == hashlib.sha256(data).hexdigest(), "artifact sha256 does not match its text"
    # Struct numbers come back as floats in the SDK.
    assert float(meta["byteCount"]).is_integer() and int(meta["byteCount"]) == len(data), (
        f"byteCount {meta['byteCount']} != UTF-8 length {len(data)}"
    )
    return text


async def fetch_card(gateway: str, token: str | None, agent: str) -> AgentCard:
    """Resolve the authenticated card with the SDK's A2ACardResolver."""
    async with httpx.AsyncClient(headers=bearer(token) if token else {}, timeout=HTTP_TIMEOUT) as http:
        return await A2ACardResolver(http, agent_base(gateway, agent)).get_agent_card()


ClientMaker = Callable[..., Awaitable[Client]]


@pytest.fixture
async def make_client(gateway: str) -> AsyncIterator[ClientMaker]:
    """Factory for official SDK clients (JSON-RPC; streaming off unless asked).

    make_client(token="tok-alice", agent="ag-writer", polling=False, card=None,
                streaming=False, timeout=HTTP_TIMEOUT)
    resolves the authenticated card with the token (unless `card` is given) and
    builds the client from it with ClientFactory. All clients are closed at teardown.
    """
    https: list[httpx.AsyncClient] = []

    async def _make(
        token: str | None = ALICE,
        agent: str = WRITER,
        *,
        polling: bool = False,
        card: AgentCard | None = None,
        streaming: bool = False,
        timeout: httpx.Timeout | None = HTTP_TIMEOUT,
    ) -> Client:
        # timeout=None keeps httpx's own default (5 s per read), as an unconfigured client has.
        http = (
            httpx.AsyncClient(headers=bearer(token) if token else {}, timeout=timeout)
            if timeout is not None
            else httpx.AsyncClient(headers=bearer(token) if token else {})
        )
        https.append(http)
        if card is None:
            card = await A2ACardResolver(http, agent_base(gateway, agent)).get_agent_card()
        config = ClientConfig(streaming=streaming, polling=polling, httpx_client=http)
        return ClientFactory(config).create(card)

    try:
        yield _make
    finally:
        for http in https:
            await http.aclose()


@pytest.fixture
async def raw() -> AsyncIterator[httpx.AsyncClient]:
    """Plain httpx client (no default A2A-Version or auth headers)."""
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        yield http

"""The official a2a-sdk 1.2.2 client against the gateway (everything the SDK can send).

Each test uses fresh messageIds and creates its own tasks.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from a2a.client import A2AClientError, AgentCardResolutionError
from a2a.types import (
    AgentCard,
    ContentTypeNotSupportedError,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    InvalidParamsError,
    Message,
    Part,
    PushNotificationNotSupportedError,
    Role,
    TaskNotFoundError,
    TaskPushNotificationConfig,
    TaskState,
    UnsupportedOperationError,
)

from conftest import (
    ALICE,
    ALICE_READ,
    ALICE_WILD,
    BOB,
    CAROL,
    DAVE,
    HTTP_TIMEOUT,
    LEGACY,
    NOPE,
    PRIVATE,
    SLOW,
    WRITER,
    as_token,
    bearer,
    check_artifact_integrity,
    fetch_card,
    new_id,
    rpc_url,
    send,
    send_request,
    static_card,
    text_message,
)

IN_PROGRESS = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
SLOWER = "ag-slower"  # ~7 s: its streams hold their leases that long


def state_name(task) -> str:
    return TaskState.Name(task.status.state)


def assert_http_status(exc: BaseException, status: int) -> None:
    """Non-2xx RPC answers surface as a plain A2AClientError('HTTP Error <status>: ...')."""
    assert type(exc) is A2AClientError, f"expected A2AClientError, got {type(exc).__name__}: {exc}"
    assert f"HTTP Error {status}" in str(exc), f"expected HTTP {status}: {exc}"


async def completed_task(make_client, text: str = "hello gateway"):
    client = await make_client(ALICE, WRITER)
    task = await send(client, send_request(text_message(text)))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, state_name(task)
    return client, task


# --------------------------------------------------------------------------- card


async def test_card_authenticated(make_client, gateway):
    card: AgentCard = await fetch_card(gateway, ALICE, WRITER)
    assert card.name == "Writer"
    assert len(card.supported_interfaces) == 1
    iface = card.supported_interfaces[0]
    assert iface.url == rpc_url(gateway, WRITER)
    assert iface.protocol_binding == "JSONRPC"
    assert iface.protocol_version == "1.0"
    assert not iface.tenant
    assert card.capabilities.streaming is True
    assert card.capabilities.push_notifications is False
    assert card.capabilities.extended_agent_card is False
    bearer_schemes = [
        name
        for name, scheme in card.security_schemes.items()
        if scheme.HasField("http_auth_security_scheme")
        and scheme.http_auth_security_scheme.scheme.lower() == "bearer"
    ]
    assert bearer_schemes, f"no http Bearer scheme in {dict(card.security_schemes)}"
    assert not any(s.HasField("oauth2_security_scheme") for s in card.security_schemes.values())
    # And the SDK can build a JSON-RPC client from it that talks to that URL.
    client = await make_client(ALICE, WRITER)
    assert client is not None


@pytest.mark.parametrize(
    ("token", "agent", "status"),
    [
        (None, WRITER, 401),  # no bearer
        (NOPE, WRITER, 401),  # unknown bearer
        (CAROL, WRITER, 404),  # other tenant's agent does not exist for carol
        (BOB, PRIVATE, 403),  # same tenant, not a member of ws-acme-private
        (DAVE, LEGACY, 403),  # tenant without agent_api
    ],
    ids=["no-bearer", "unknown-bearer", "other-tenant", "other-workspace", "no-agent-api-feature"],
)
async def test_card_refused(make_client, token, agent, status):
    with pytest.raises(AgentCardResolutionError) as ei:
        await make_client(token, agent)
    assert ei.value.status_code == status, str(ei.value)


async def test_card_private_agent_visible_to_member(make_client, gateway):
    client = await make_client(ALICE, PRIVATE)
    assert client is not None


# --------------------------------------------------------------------------- SendMessage


async def test_blocking_send_completes_with_verified_markdown(make_client):
    client = await make_client(ALICE, WRITER)
    message_id = new_id()
    started = time.monotonic()
    task = await send(client, send_request(text_message("hello gateway", message_id)))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, state_name(task)
    assert time.monotonic() - started < 60
    uuid.UUID(task.id)
    uuid.UUID(task.context_id)
    assert task.id != message_id
    assert len(task.artifacts) == 1, task.artifacts
    text = check_artifact_integrity(task.artifacts[0])
    assert text.strip()
    assert "hello gateway" in text
    assert task.artifacts[0].artifact_id


async def test_return_immediately_via_polling_config(make_client):
    client = await make_client(ALICE, SLOW, polling=True)  # SDK: polling -> returnImmediately
    task = await send(client, send_request(text_message("hello slow gateway")))
    assert task.status.state in IN_PROGRESS, state_name(task)
    uuid.UUID(task.id)
    done = await poll_until_terminal(client, task.id, 20)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED, state_name(done)
    assert done.context_id == task.context_id
    assert len(done.artifacts) == 1
    assert "hello slow gateway" in check_artifact_integrity(done.artifacts[0])


async def test_return_immediately_via_request_configuration(make_client):
    client = await make_client(ALICE, SLOW)
    request = send_request(text_message("hello gateway"))
    request.configuration.return_immediately = True
    task = await send(client, request)
    assert task.status.state in IN_PROGRESS, state_name(task)
    done = await poll_until_terminal(client, task.id, 20)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED, state_name(done)


def streaming_send(text: str) -> dict:
    message = {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"jsonrpc": "2.0", "id": "s-1", "method": "SendStreamingMessage", "params": {"message": message}}


async def test_blocking_send_that_cannot_observe_is_refused_before_anything_is_created(make_client, gateway):
    """With Bob's observer leases all held (the stack's bound of 4 per principal), a blocking send
    is refused with HTTP 429 before any task exists, as a stream is; the SDK raises it, and the
    same message sent again once a lease is free starts its task then."""
    streams = []
    message = text_message("hello gateway, no lease left")
    async with httpx.AsyncClient(headers={**bearer(BOB), "A2A-Version": "1.0"}, timeout=HTTP_TIMEOUT) as http:
        try:
            for _ in range(4):
                request = http.build_request("POST", rpc_url(gateway, SLOWER), json=streaming_send("hold a lease"))
                response = await http.send(request, stream=True)
                streams.append(response)
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
            client = await make_client(BOB, SLOW)
            with pytest.raises(A2AClientError) as ei:
                await send(client, send_request(message))
            assert_http_status(ei.value, 429)
        finally:
            for response in streams:
                await response.aclose()
    # Closing a stream releases its lease a moment later; then the same message is accepted.
    await asyncio.sleep(1)
    client = await make_client(BOB, WRITER)
    task = await send(client, send_request(message))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, state_name(task)
    assert not task.metadata, task.metadata


async def poll_until_terminal(client, task_id: str, limit_s: float):
    deadline = time.monotonic() + limit_s
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        assert task.id == task_id
        if task.status.state not in IN_PROGRESS:
            return task
        assert time.monotonic() < deadline, f"task {task_id} still {state_name(task)} after {limit_s}s"
        await asyncio.sleep(0.5)


async def test_same_message_id_same_content_returns_same_task(make_client):
    client = await make_client(ALICE, WRITER)
    message_id = new_id()
    first = await send(client, send_request(text_message("hello gateway", message_id)))
    second = await send(client, send_request(text_message("hello gateway", message_id)))
    assert second.id == first.id
    assert second.context_id == first.context_id
    assert second.status.state == TaskState.TASK_STATE_COMPLETED


async def test_same_message_id_while_running_returns_same_task(make_client):
    client = await make_client(ALICE, SLOW, polling=True)
    message_id = new_id()
    first = await send(client, send_request(text_message("hello gateway", message_id)))
    second = await send(client, send_request(text_message("hello gateway", message_id)))
    assert second.id == first.id


async def test_same_message_id_different_content_is_invalid_params(make_client):
    client = await make_client(ALICE, WRITER)
    message_id = new_id()
    await send(client, send_request(text_message("hello gateway", message_id)))
    with pytest.raises(InvalidParamsError):
        await send(client, send_request(text_message("something else entirely", message_id)))


async def test_message_id_is_scoped_to_principal(make_client):
    """Bob reusing Alice's messageId gets his own task, never Alice's."""
    alice = await make_client(ALICE, WRITER)
    bob = await make_client(BOB, WRITER)
    message_id = new_id()
    a = await send(alice, send_request(text_message("hello gateway", message_id)))
    b = await send(bob, send_request(text_message("hello gateway", message_id)))
    assert a.id != b.id


# --------------------------------------------------------------------------- GetTask


async def test_get_task_history_length(make_client):
    client, task = await completed_task(make_client)
    one = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
    assert one.id == task.id
    assert len(one.history) <= 1
    zero = await client.get_task(GetTaskRequest(id=task.id, history_length=0))
    assert len(zero.history) == 0
    full = await client.get_task(GetTaskRequest(id=task.id))
    assert full.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(full.artifacts) == 1
    check_artifact_integrity(full.artifacts[0])


async def test_get_task_unknown_id(make_client):
    client = await make_client(ALICE, WRITER)
    with pytest.raises(TaskNotFoundError):
        await client.get_task(GetTaskRequest(id=new_id()))


async def test_get_task_of_other_principal_is_not_found(make_client):
    client, task = await completed_task(make_client)
    # Per-call header override through the SDK's service parameters.
    with pytest.raises(TaskNotFoundError):
        await client.get_task(GetTaskRequest(id=task.id), context=as_token(BOB))


async def test_get_task_other_tenant_is_http_404(make_client):
    client, task = await completed_task(make_client)
    with pytest.raises(A2AClientError) as ei:
        await client.get_task(GetTaskRequest(id=task.id), context=as_token(CAROL))
    assert_http_status(ei.value, 404)


async def test_send_other_tenant_is_http_404(make_client):
    client = await make_client(ALICE, WRITER)
    with pytest.raises(A2AClientError) as ei:
        await send(client, send_request(text_message()), context=as_token(CAROL))
    assert_http_status(ei.value, 404)


# --------------------------------------------------------------------------- scopes / credentials


async def test_missing_delegate_scope_is_http_403(make_client):
    client = await make_client(ALICE_READ, WRITER)  # a2a:read is enough for the card
    with pytest.raises(A2AClientError) as ei:
        await send(client, send_request(text_message()))
    assert_http_status(ei.value, 403)


async def test_read_scope_can_get_own_task(make_client):
    client, task = await completed_task(make_client)
    got = await client.get_task(GetTaskRequest(id=task.id), context=as_token(ALICE_READ))
    assert got.id == task.id


async def test_wildcard_scopes_send_and_get(make_client):
    client = await make_client(ALICE_WILD, WRITER)
    task = await send(client, send_request(text_message("hello gateway")))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, state_name(task)
    got = await client.get_task(GetTaskRequest(id=task.id))
    assert got.id == task.id


async def test_wrong_bearer_is_http_401(make_client):
    client, task = await completed_task(make_client)
    with pytest.raises(A2AClientError) as ei:
        await send(client, send_request(text_message()), context=as_token(NOPE))
    assert_http_status(ei.value, 401)
    with pytest.raises(A2AClientError) as ei:
        await client.get_task(GetTaskRequest(id=task.id), context=as_token(NOPE))
    assert_http_status(ei.value, 401)


async def test_tenant_without_agent_api_is_http_403(make_client, gateway):
    client = await make_client(DAVE, LEGACY, card=static_card(gateway, LEGACY))
    with pytest.raises(A2AClientError) as ei:
        await send(client, send_request(text_message()))
    assert_http_status(ei.value, 403)


async def test_other_workspace_rpc_is_http_403(make_client, gateway):
    client = await make_client(BOB, PRIVATE, card=static_card(gateway, PRIVATE))
    with pytest.raises(A2AClientError) as ei:
        await send(client, send_request(text_message()))
    assert_http_status(ei.value, 403)


# --------------------------------------------------------------------------- refused input


def _with_part(part: Part) -> Message:
    return Message(message_id=new_id(), role=Role.ROLE_USER, parts=[Part(text="see attached"), part])


@pytest.mark.parametrize(
    "part",
    [
        Part(url="https://files.example/in.pdf", filename="in.pdf", media_type="application/pdf"),
        Part(raw=b"\x89PNG\r\n\x1a\n", filename="in.png", media_type="image/png"),
    ],
    ids=["url-part", "raw-part"],
)
async def test_file_parts_are_content_type_not_supported(make_client, part):
    client = await make_client(ALICE, WRITER)
    with pytest.raises(ContentTypeNotSupportedError):
        await send(client, send_request(_with_part(part)))


async def test_message_with_existing_task_id_is_unsupported(make_client):
    client, task = await completed_task(make_client)
    message = text_message()
    message.task_id = task.id
    with pytest.raises(UnsupportedOperationError):
        await send(client, send_request(message))


async def test_message_with_unknown_task_id_is_unsupported(make_client):
    client = await make_client(ALICE, WRITER)
    message = text_message()
    message.task_id = new_id()
    with pytest.raises(UnsupportedOperationError):
        await send(client, send_request(message))


async def test_message_with_context_id_is_unsupported(make_client):
    client, task = await completed_task(make_client)
    message = text_message()
    message.context_id = task.context_id
    with pytest.raises(UnsupportedOperationError):
        await send(client, send_request(message))


def _metadata(m: Message) -> None:
    m.metadata.update({"source": "pytest"})


def _references(m: Message) -> None:
    m.reference_task_ids.append(str(uuid.uuid4()))


def _extensions(m: Message) -> None:
    m.extensions.append("https://ext.example/v1")


@pytest.mark.parametrize(
    "mutate", [_metadata, _references, _extensions], ids=["metadata", "referenceTaskIds", "extensions"]
)
async def test_message_fields_are_unsupported(make_client, mutate):
    client = await make_client(ALICE, WRITER)
    message = text_message()
    mutate(message)
    with pytest.raises(UnsupportedOperationError):
        await send(client, send_request(message))


async def test_request_tenant_is_unsupported(make_client):
    client = await make_client(ALICE, WRITER)
    request = send_request(text_message())
    request.tenant = "t-globex"
    with pytest.raises(UnsupportedOperationError):
        await send(client, request)


async def test_push_config_in_send_is_not_supported(make_client):
    client = await make_client(ALICE, WRITER)
    request = send_request(text_message())
    request.configuration.task_push_notification_config.url = "https://client.example/hook"
    with pytest.raises(PushNotificationNotSupportedError):
        await send(client, request)


async def test_agent_role_is_invalid_params(make_client):
    client = await make_client(ALICE, WRITER)
    message = text_message()
    message.role = Role.ROLE_AGENT
    with pytest.raises(InvalidParamsError):
        await send(client, send_request(message))


async def test_sixteen_parts_accepted(make_client):
    client = await make_client(ALICE, WRITER)
    message = Message(
        message_id=new_id(), role=Role.ROLE_USER, parts=[Part(text=f"part {i}") for i in range(16)]
    )
    task = await send(client, send_request(message))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, state_name(task)


async def test_seventeen_parts_is_invalid_params(make_client):
    client = await make_client(ALICE, WRITER)
    message = Message(
        message_id=new_id(), role=Role.ROLE_USER, parts=[Part(text=f"part {i}") for i in range(17)]
    )
    with pytest.raises(InvalidParamsError):
        await send(client, send_request(message))


async def test_32000_characters_accepted(make_client):
    client = await make_client(ALICE, WRITER)
    message = Message(
        message_id=new_id(), role=Role.ROLE_USER, parts=[Part(text="a" * 16_000), Part(text="b" * 16_000)]
    )
    task = await send(client, send_request(message))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, state_name(task)


async def test_32001_characters_is_invalid_params(make_client):
    client = await make_client(ALICE, WRITER)
    message = Message(
        message_id=new_id(), role=Role.ROLE_USER, parts=[Part(text="a" * 16_000), Part(text="b" * 16_001)]
    )
    with pytest.raises(InvalidParamsError):
        await send(client, send_request(message))


# --------------------------------------------------------------------------- unsupported operations


async def test_extended_card_is_unsupported(make_client, gateway):
    """The SDK only calls GetExtendedAgentCard when the card claims it; claim it locally to send it."""
    card = await fetch_card(gateway, ALICE, WRITER)
    card.capabilities.extended_agent_card = True
    client = await make_client(ALICE, WRITER, card=card)
    with pytest.raises(UnsupportedOperationError):
        await client.get_extended_agent_card(GetExtendedAgentCardRequest())


async def test_create_push_config_is_not_supported(make_client):
    client, task = await completed_task(make_client)
    with pytest.raises(PushNotificationNotSupportedError):
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="cfg-1", url="https://client.example/hook")
        )

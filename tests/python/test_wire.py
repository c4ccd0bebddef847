"""Wire-level checks with raw httpx: requests the official SDK client never sends,
and exact JSON shapes the SDK would normalise away."""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest

from conftest import (
    ALICE,
    BOB,
    CAROL,
    WRITER,
    bearer,
    card_url,
    new_id,
    rpc_url,
)

_UNSET = object()


async def rpc(
    raw: httpx.AsyncClient,
    gateway: str,
    method: str,
    params: dict | None,
    *,
    agent: str = WRITER,
    token: str | None = ALICE,
    version: object = "1.0",
    request_id: str | None = None,
) -> tuple[httpx.Response, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers.update(bearer(token))
    if version is not _UNSET:
        headers["A2A-Version"] = version  # type: ignore[assignment]
    body = {"jsonrpc": "2.0", "id": request_id or new_id(), "method": method}
    if params is not None:
        body["params"] = params
    response = await raw.post(rpc_url(gateway, agent), headers=headers, content=json.dumps(body))
    return response, body


def rpc_error(response: httpx.Response, body: dict, code: int) -> dict:
    """Assert an HTTP 200 JSON-RPC error response with `code` that echoes the request id."""
    assert response.status_code == 200, f"HTTP {response.status_code}: {response.text[:500]}"
    assert response.headers["content-type"].startswith("application/json"), response.headers
    doc = response.json()
    assert doc.get("jsonrpc") == "2.0", doc
    assert doc.get("id") == body["id"], doc
    assert "result" not in doc, doc
    assert doc["error"]["code"] == code, doc
    return doc["error"]


def rpc_result(response: httpx.Response, body: dict) -> dict:
    assert response.status_code == 200, f"HTTP {response.status_code}: {response.text[:500]}"
    doc = response.json()
    assert doc.get("jsonrpc") == "2.0", doc
    assert doc.get("id") == body["id"], doc
    assert "error" not in doc, doc
    return doc["result"]


def send_params(text: str = "hello gateway", message_id: str | None = None) -> dict:
    return {"message": {"messageId": message_id or new_id(), "role": "ROLE_USER", "parts": [{"text": text}]}}


# --------------------------------------------------------------------------- card JSON


async def test_card_json_shape(raw, gateway):
    response = await raw.get(card_url(gateway, WRITER), headers=bearer(ALICE))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    card = response.json()
    assert card["name"] == "Writer"
    assert card["supportedInterfaces"] == [
        {"url": f"{gateway}/v1/a2a/agents/{WRITER}/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    caps = card["capabilities"]
    assert caps.get("streaming") is True, caps
    assert caps.get("pushNotifications", False) is False, caps
    assert caps.get("extendedAgentCard", False) is False, caps
    schemes = card.get("securitySchemes") or {}
    assert any(
        "httpAuthSecurityScheme" in s and s["httpAuthSecurityScheme"].get("scheme", "").lower() == "bearer"
        for s in schemes.values()
    ), schemes
    assert not any("oauth2SecurityScheme" in s for s in schemes.values()), schemes
    # 0.3 leftovers must not be served on a pure 1.0 card.
    for legacy in ("url", "preferredTransport", "protocolVersion", "security", "supportsAuthenticatedExtendedCard"):
        assert legacy not in card, legacy


async def test_card_requires_bearer(raw, gateway):
    response = await raw.get(card_url(gateway, WRITER))
    assert response.status_code == 401


# --------------------------------------------------------------------------- SendMessage JSON


async def test_send_message_wire_shape(raw, gateway):
    response, body = await rpc(raw, gateway, "SendMessage", send_params("hello gateway"))
    result = rpc_result(response, body)
    assert set(result) == {"task"}, result
    task = result["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert "kind" not in task
    (artifact,) = task["artifacts"]
    (part,) = artifact["parts"]
    assert part["mediaType"] == "text/markdown"
    data = part["text"].encode("utf-8")
    meta = artifact["metadata"]
    assert meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert isinstance(meta["byteCount"], int) and meta["byteCount"] == len(data), meta


async def test_get_task_history_length_zero_omits_history(raw, gateway):
    response, body = await rpc(raw, gateway, "SendMessage", send_params())
    task_id = rpc_result(response, body)["task"]["id"]
    response, body = await rpc(raw, gateway, "GetTask", {"id": task_id, "historyLength": 0})
    task = rpc_result(response, body)
    assert task["id"] == task_id
    assert not task.get("history"), task


# --------------------------------------------------------------------------- A2A-Version


async def test_missing_version_header_is_32009(raw, gateway):
    response, body = await rpc(raw, gateway, "SendMessage", send_params(), version=_UNSET)
    rpc_error(response, body, -32009)
    response, body = await rpc(raw, gateway, "GetTask", {"id": new_id()}, version=_UNSET)
    rpc_error(response, body, -32009)


@pytest.mark.parametrize("version", ["1.1", "0.3", "2.0", "abc", ""])
async def test_unsupported_version_is_32009(raw, gateway, version):
    response, body = await rpc(raw, gateway, "SendMessage", send_params(), version=version)
    rpc_error(response, body, -32009)


@pytest.mark.parametrize("version", ["1.0", "1.0.3"])
async def test_supported_version_accepted(raw, gateway, version):
    response, body = await rpc(raw, gateway, "SendMessage", send_params(), version=version)
    assert rpc_result(response, body)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_version_header_name_case_insensitive(raw, gateway):
    headers = {"Content-Type": "application/json", "a2a-version": "1.0", **bearer(ALICE)}
    body = {"jsonrpc": "2.0", "id": new_id(), "method": "GetTask", "params": {"id": new_id()}}
    response = await raw.post(rpc_url(gateway, WRITER), headers=headers, content=json.dumps(body))
    rpc_error(response, body, -32001)


# --------------------------------------------------------------------------- unsupported operations


async def test_get_extended_agent_card_is_32004(raw, gateway):
    response, body = await rpc(raw, gateway, "GetExtendedAgentCard", {})
    rpc_error(response, body, -32004)


async def test_create_push_config_is_32003(raw, gateway):
    response, body = await rpc(raw, gateway, "SendMessage", send_params())
    task_id = rpc_result(response, body)["task"]["id"]
    params = {"taskId": task_id, "id": "cfg-1", "url": "https://client.example/hook"}
    response, body = await rpc(raw, gateway, "CreateTaskPushNotificationConfig", params)
    rpc_error(response, body, -32003)


async def test_unknown_task_is_32001(raw, gateway):
    response, body = await rpc(raw, gateway, "GetTask", {"id": new_id()})
    rpc_error(response, body, -32001)


# --------------------------------------------------------------------------- HTTP-level refusals


async def test_body_over_64_kib_is_413(raw, gateway):
    response, _ = await rpc(raw, gateway, "SendMessage", send_params("x" * (64 * 1024 + 1)))
    assert response.status_code == 413, f"HTTP {response.status_code}: {response.text[:300]}"


async def test_other_tenant_rpc_is_http_404(raw, gateway):
    response, _ = await rpc(raw, gateway, "SendMessage", send_params(), token=CAROL)
    assert response.status_code == 404, f"HTTP {response.status_code}: {response.text[:300]}"


async def test_rpc_without_bearer_is_http_401(raw, gateway):
    response, _ = await rpc(raw, gateway, "GetTask", {"id": new_id()}, token=None)
    assert response.status_code == 401, f"HTTP {response.status_code}: {response.text[:300]}"


async def test_other_principals_task_indistinguishable_from_unknown(raw, gateway):
    response, body = await rpc(raw, gateway, "SendMessage", send_params())
    task_id = rpc_result(response, body)["task"]["id"]
    unknown_id = new_id()
    response, body = await rpc(raw, gateway, "GetTask", {"id": task_id}, token=BOB)
    foreign = rpc_error(response, body, -32001)
    response, body = await rpc(raw, gateway, "GetTask", {"id": unknown_id})
    missing = rpc_error(response, body, -32001)
    assert foreign["message"].replace(task_id, "<id>") == missing["message"].replace(unknown_id, "<id>")

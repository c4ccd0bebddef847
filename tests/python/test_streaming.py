"""Streaming with the official a2a-sdk 1.2.2 client: SendStreamingMessage, SubscribeToTask,
event order, the terminal-task error, reconnecting after a dropped stream, and a run longer
than an unconfigured client's 5 s read timeout (the gateway's keep-alives carry it)."""

from __future__ import annotations

import asyncio

import pytest

from a2a.types import StreamResponse, SubscribeToTaskRequest, TaskState
from a2a.utils.errors import UnsupportedOperationError

from conftest import (
    ALICE,
    SLOW,
    WRITER,
    check_artifact_integrity,
    send_request,
    text_message,
)

SLOWER = "ag-slower"  # ~9 s in all, longer than httpx's default 5 s read timeout


def kind(event: StreamResponse) -> str:
    return event.WhichOneof("payload")


async def collect(stream) -> list[StreamResponse]:
    return [event async for event in stream]


async def test_streaming_send_events_in_order(make_client):
    client = await make_client(ALICE, WRITER, streaming=True)
    events = await collect(client.send_message(send_request(text_message("stream through the sdk"))))
    assert kind(events[0]) == "task", events[0]
    task_id = events[0].task.id
    kinds = [kind(e) for e in events[1:]]
    assert kinds[-2:] == ["artifact_update", "status_update"], kinds
    assert all(k == "status_update" for k in kinds[:-2]), kinds
    artifact_event = events[-2].artifact_update
    assert artifact_event.task_id == task_id
    assert artifact_event.last_chunk is True
    assert "stream through the sdk" in check_artifact_integrity(artifact_event.artifact)
    final = events[-1].status_update
    assert final.task_id == task_id
    assert final.status.state == TaskState.TASK_STATE_COMPLETED


async def test_subscribe_to_a_running_task(make_client):
    sender = await make_client(ALICE, SLOW, polling=True)
    first = [e async for e in sender.send_message(send_request(text_message("watch me")))]
    task_id = first[0].task.id
    client = await make_client(ALICE, SLOW, streaming=True)
    events = await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))
    assert kind(events[0]) == "task" and events[0].task.id == task_id
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert kind(events[-2]) == "artifact_update"


async def test_subscribe_to_a_terminal_task_is_unsupported(make_client):
    client = await make_client(ALICE, WRITER, streaming=True)
    events = await collect(client.send_message(send_request(text_message("done quickly"))))
    task_id = events[0].task.id
    with pytest.raises(UnsupportedOperationError):
        await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))


async def test_reconnect_after_a_dropped_stream(make_client):
    client = await make_client(ALICE, SLOW, streaming=True)
    message = text_message("drop and come back")
    stream = client.send_message(send_request(message))
    first = await stream.__anext__()
    task_id = first.task.id
    await stream.aclose()  # the client walks away mid-run

    # A fresh subscription starts from a fresh snapshot and sees the run finish.
    again = await make_client(ALICE, SLOW, streaming=True)
    events = await collect(again.subscribe(SubscribeToTaskRequest(id=task_id)))
    assert events[0].task.id == task_id
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    # Repeating the same message recovers the same task, never a second run.
    repeat = await collect(again.send_message(send_request(message)))
    assert repeat[0].task.id == task_id


async def test_run_longer_than_the_default_read_timeout(make_client):
    # timeout=None: httpx's default 5 s read timeout, as a client with no configuration has.
    client = await make_client(ALICE, SLOWER, streaming=True, timeout=None)
    started = asyncio.get_running_loop().time()
    events = await collect(client.send_message(send_request(text_message("take longer than five seconds"))))
    elapsed = asyncio.get_running_loop().time() - started
    assert elapsed > 5, f"the run should outlast the read timeout, took {elapsed:.1f}s"
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED

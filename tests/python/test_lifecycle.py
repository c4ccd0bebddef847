"""Task lifecycle with the official a2a-sdk 1.2.2 client: ListTasks with filters and paging,
CancelTask (and -32002 for a terminal task), the INPUT_REQUIRED task of an approval and the
refused resume message."""

from __future__ import annotations

import asyncio

import pytest

from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, UnsupportedOperationError

from conftest import ALICE, BOB, SLOW, WRITER, new_id, send, send_request, text_message

APPROVER = "ag-approver"  # asks for a tool approval, then waits in INPUT_REQUIRED


async def test_list_tasks_filters_and_pages(make_client):
    client = await make_client(ALICE, WRITER)
    done = [await send(client, send_request(text_message(f"list me {i}"))) for i in range(5)]
    ids = {t.id for t in done}

    # Paging: pages of 2 cover every task once, newest first, and end with an empty token.
    seen: list[str] = []
    token = ""
    while True:
        page = await client.list_tasks(ListTasksRequest(page_size=2, page_token=token))
        assert page.page_size == 2
        assert len(page.tasks) <= 2
        seen += [t.id for t in page.tasks]
        token = page.next_page_token
        if not token:
            break
    assert ids <= set(seen) and len(seen) == len(set(seen))
    first = await client.list_tasks(ListTasksRequest())
    assert first.total_size >= 5 and first.page_size == 50

    # Filters: context, status; artifacts only on request.
    by_context = await client.list_tasks(ListTasksRequest(context_id=done[0].context_id))
    assert [t.id for t in by_context.tasks] == [done[0].id]
    completed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
    assert ids <= {t.id for t in completed.tasks}
    assert all(len(t.artifacts) == 0 for t in completed.tasks)
    with_artifacts = await client.list_tasks(
        ListTasksRequest(context_id=done[0].context_id, include_artifacts=True)
    )
    assert with_artifacts.tasks[0].artifacts[0].parts[0].media_type == "text/markdown"

    # Another principal lists none of them; an out-of-range page size is refused.
    bobs = await make_client(BOB, WRITER)
    assert not ids & {t.id for t in (await bobs.list_tasks(ListTasksRequest())).tasks}
    with pytest.raises(InvalidParamsError):
        await client.list_tasks(ListTasksRequest(page_size=101))


async def test_cancel_a_running_task_then_cancel_again(make_client):
    client = await make_client(ALICE, SLOW, polling=True)
    task = await send(client, send_request(text_message("cancel me")))
    canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.id == task.id
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=task.id))
    again = await client.get_task(GetTaskRequest(id=task.id))
    assert again.status.state == TaskState.TASK_STATE_CANCELED


async def test_cancel_a_completed_task_is_not_cancelable(make_client):
    client = await make_client(ALICE, WRITER)
    task = await send(client, send_request(text_message("already done")))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=task.id))
    assert (await client.get_task(GetTaskRequest(id=task.id))).status.state == TaskState.TASK_STATE_COMPLETED


async def test_input_required_and_a_message_cannot_resume(make_client):
    client = await make_client(ALICE, APPROVER)
    task = await send(client, send_request(text_message("use the search tool")))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert task.status.message.parts[0].text, "Q's approval prompt is the status message"

    resume = Message(
        message_id=new_id(),
        role=Role.ROLE_USER,
        task_id=task.id,
        context_id=task.context_id,
        parts=[Part(text="approved, go on")],
    )
    with pytest.raises(UnsupportedOperationError):
        await send(client, send_request(resume))
    await asyncio.sleep(0.5)
    still = await client.get_task(GetTaskRequest(id=task.id))
    assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, "the message resumed nothing"
    # A waiting task can still be cancelled.
    canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED

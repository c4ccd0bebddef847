"""The request shapes `scripts/alloc-sites` and `scripts/instructions` count: ag-writer, as
tok-alice, on one connection, one request at a time.

- `card`: the authenticated agent card;
- `rejected`: GetTask with A2A-Version 0.3 (-32009);
- `get_task`: GetTask of a completed task (one is created first).
"""

from __future__ import annotations

import json
import time
import uuid

import httpx

SHAPES = ("card", "rejected", "get_task")


def rpc(method: str, params: dict, version: str = "1.0") -> dict:
    """The keyword arguments of one JSON-RPC POST as tok-alice."""
    return {"headers": {"Authorization": "Bearer tok-alice", "Content-Type": "application/json",
                        "A2A-Version": version},
            "content": json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})}


class Shapes:
    """Sends requests of one shape through `client` to the gateway at `gateway`."""

    def __init__(self, client: httpx.Client, gateway: str, shape: str):
        assert shape in SHAPES, shape
        self.client, self.shape = client, shape
        self.base = f"{gateway}/v1/a2a/agents/ag-writer"
        self.task_id = self.completed_task()

    def completed_task(self) -> str:
        """A task sent to ag-writer, once it has completed (within 60 s)."""
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "count"}]}
        reply = self.client.post(f"{self.base}/rpc", **rpc("SendMessage", {"message": message}))
        task = reply.json()["result"]["task"]
        deadline = time.monotonic() + 60
        while task["status"]["state"] != "TASK_STATE_COMPLETED" and time.monotonic() < deadline:
            time.sleep(0.2)
            reply = self.client.post(f"{self.base}/rpc", **rpc("GetTask", {"id": task["id"]}))
            task = reply.json()["result"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
        return task["id"]

    def send(self, base: str | None = None) -> httpx.Response:
        """One request of the shape, to `base` (default: the gateway's agent) as it is."""
        base = base or self.base
        if self.shape == "card":
            return self.client.get(f"{base}/.well-known/agent-card.json",
                                   headers={"Authorization": "Bearer tok-alice", "A2A-Version": "1.0"})
        version = "0.3" if self.shape == "rejected" else "1.0"
        return self.client.post(f"{base}/rpc", **rpc("GetTask", {"id": self.task_id}, version=version))

    def one(self) -> None:
        """One request of the shape; fails unless it is answered as the shape expects."""
        r = self.send()
        if self.shape == "card":
            ok = r.status_code == 200
        elif self.shape == "rejected":
            ok = "-32009" in r.text
        else:
            ok = "TASK_STATE_COMPLETED" in r.text
        assert ok, r.text

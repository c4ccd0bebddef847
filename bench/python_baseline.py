"""The benchmark's Python baseline: what a team would run instead of the gateway.

The official a2a-sdk 1.2.2 server (Starlette JSON-RPC routes, DefaultRequestHandler) with its
SQLAlchemy `DatabaseTaskStore` on the same PostgreSQL (asyncpg driver), serving one agent under
the gateway's paths so the same load scripts hit both:

    GET  /v1/a2a/agents/ag-writer/.well-known/agent-card.json   (the SDK's card route)
    POST /v1/a2a/agents/ag-writer/rpc                           (the SDK's JSON-RPC route)

Bearer tokens are checked by a Starlette AuthenticationMiddleware against the fixture tokens
(config/q-fixtures.json); the principal becomes the SDK's user, so `DatabaseTaskStore` scopes
every read and listing to its owner exactly as the gateway scopes to (tenant, principal, agent).
The executor completes every task at once with one Markdown artifact: the SDK's equivalent of Q
running the agent, done in-process.

    .venv/bin/python bench/python_baseline.py --database-url postgresql+asyncpg://... \
        [--port 0] [--pool-size 16]

Prints `listening on http://127.0.0.1:PORT` once serving. One uvicorn worker: one process,
one event loop (the SDK's documented way to run it; see docs/performance.md for what that means for
the comparison).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
from pathlib import Path

import uvicorn
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    AuthenticationError,
    SimpleUser,
)
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse

from a2a.helpers.proto_helpers import get_message_text, new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks.database_task_store import DatabaseTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityScheme,
    TaskState,
)

AGENT = "ag-writer"
BASE = f"/v1/a2a/agents/{AGENT}"
FIXTURES = Path(__file__).resolve().parent.parent / "config" / "q-fixtures.json"


class MarkdownAgent(AgentExecutor):
    """Creates the task and completes it at once with one Markdown artifact."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = get_message_text(context.message) if context.message else ""
        task = context.current_task or new_task(
            context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED,
            history=[context.message] if context.message else None,
        )
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.add_artifact(
            [new_text_part(f"# Answer\n\nYou asked: *{text}*\n", media_type="text/markdown")],
            name="answer",
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def agent_card(public_base: str) -> AgentCard:
    """The same shape as the gateway's card for ag-writer."""
    interface = AgentInterface(
        url=f"{public_base}{BASE}/rpc", protocol_binding="JSONRPC", protocol_version="1.0"
    )
    return AgentCard(
        name="Writer",
        description="Drafts short Markdown answers",
        version="1.0.0",
        supported_interfaces=[interface],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=False, extended_agent_card=False
        ),
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer")
            )
        },
        default_input_modes=["text/plain"],
        default_output_modes=["text/markdown"],
        skills=[
            AgentSkill(
                id="answer", name="Writer", description="Drafts short Markdown answers",
                tags=["q", "text"], input_modes=["text/plain"], output_modes=["text/markdown"],
            )
        ],
    )


class BearerBackend(AuthenticationBackend):
    """Fixture bearer tokens: the principal is the SDK user (the task store's owner)."""

    def __init__(self) -> None:
        fixtures = json.loads(FIXTURES.read_text())
        self.tokens = {
            t["token"]: (t["principal"], t["scopes"])
            for t in fixtures["tokens"]
            if not t.get("expired")
        }

    async def authenticate(self, conn: HTTPConnection):
        value = conn.headers.get("authorization", "")
        scheme, _, token = value.partition(" ")
        entry = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if entry is None:
            raise AuthenticationError("missing or invalid bearer token")
        principal, scopes = entry
        return AuthCredentials(scopes), SimpleUser(principal)


def unauthorized(_conn: HTTPConnection, exc: Exception) -> JSONResponse:
    return JSONResponse(
        {"error": "unauthenticated", "message": str(exc)},
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )


def build_app() -> Starlette:
    url = os.environ["BENCH_PY_DATABASE_URL"]
    pool_size = int(os.environ.get("BENCH_PY_POOL_SIZE", "16"))
    public_base = os.environ.get("BENCH_PY_PUBLIC_BASE", "http://127.0.0.1")
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=0)
    store = DatabaseTaskStore(engine, create_table=True)
    card = agent_card(public_base)
    handler = DefaultRequestHandler(
        agent_executor=MarkdownAgent(), task_store=store, agent_card=card
    )
    routes = create_jsonrpc_routes(handler, rpc_url=f"{BASE}/rpc")
    routes += create_agent_card_routes(
        card, card_url=f"{BASE}/.well-known/agent-card.json", cache_control="private, max-age=60"
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        await store.initialize()
        yield
        await engine.dispose()

    return Starlette(
        routes=routes,
        middleware=[
            Middleware(AuthenticationMiddleware, backend=BearerBackend(), on_error=unauthorized)
        ],
        lifespan=lifespan,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pool-size", type=int, default=16)
    args = parser.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    os.environ["BENCH_PY_DATABASE_URL"] = args.database_url
    os.environ["BENCH_PY_POOL_SIZE"] = str(args.pool_size)
    os.environ["BENCH_PY_PUBLIC_BASE"] = f"http://127.0.0.1:{port}"

    config = uvicorn.Config(build_app(), log_level="warning", access_log=False)
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.02)
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        await task

    asyncio.run(serve())

if __name__ == "__main__":
    sys.exit(main())

"""A remote A2A agent for the gateway's outbound tests: the official a2a-sdk 1.2.2 server
(Starlette, JSON-RPC at /a2a/rpc) with an executor that answers every message with a
completed task carrying one Markdown artifact.

    .venv/bin/python tests/python/remote_agent.py --mode normal [--require-token T]

It binds 127.0.0.1 on a free port and prints `listening on http://127.0.0.1:PORT` once ready.

Every HTTP request is recorded (path, JSON-RPC method, Authorization header) and served back by
`GET /_seen`, so a test can assert which credential reached which origin and how many
SendMessage calls arrived. An ASGI wrapper around the SDK app injects the faults:

- normal          the SDK's own answers
- slow            JSON-RPC answers are held for --delay seconds
- drop-send       the first SendMessage is processed by the SDK (the task exists), then the
                  connection is cut halfway through the answer
- drop-get        the first GetTask answer is cut halfway (SendMessage answers normally)
- mismatched-id   every JSON-RPC answer carries another id than the request's
- redirect        every request is answered 307 to --redirect-to
- oversize        JSON-RPC answers and the card are 2 MiB
- dense           the card and every JSON-RPC answer are within the byte caps (64 KiB and
                  1 MiB) but as dense as JSON gets: a valid card whose extension `params`,
                  and a completed task whose `metadata`, hold `{"":0}` repeated to fill them
- answer          every JSON-RPC request is answered HTTP --status without reaching the agent,
                  with a JSON-RPC error of --rpc-code under the request's id when given

With --sign ES256|EdDSA the card is signed at start with the SDK's own signer
(`a2a.utils.signing.create_agent_card_signer`, key id --sign-kid, a key made for this process)
and served by the SDK's own card route (`create_agent_card_routes`); its public JWK is at
`GET /_card_key`. --sign-jku puts a `jku` into the protected header (a verifier must never
fetch it; `GET /_jwks` serves the key set there, and `/_seen` shows whether anyone asked).
--tamper serves the signed card with one character of its description changed afterwards.
--card-url self makes the card name this agent's own JSON-RPC endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.helpers.proto_helpers import get_message_text, new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
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
from google.protobuf.json_format import MessageToDict

SIGNING_ALGORITHMS = ("ES256", "EdDSA")

RPC_PATH = "/a2a/rpc"
OVERSIZE = 2 * 1024 * 1024
CARD_PATH_SUFFIX = "/.well-known/agent-card.json"
# Just under the gateway's default caps (outbound.max_card_bytes, outbound.max_response_bytes).
DENSE_CARD_BYTES = 60 * 1024
DENSE_ANSWER_BYTES = 1000 * 1024


class MarkdownAgent(AgentExecutor):
    """Creates the task, works for --work seconds, attaches a Markdown answer and completes."""

    def __init__(self, work: float = 0.3) -> None:
        self.work = work

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = get_message_text(context.message) if context.message else ""
        task = context.current_task or new_task(
            context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED,
            history=[context.message] if context.message else None,
        )
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await asyncio.sleep(self.work)
        await updater.add_artifact(
            [new_text_part(f"# Answer\n\nYou asked: *{text}*\n", media_type="text/markdown")],
            name="answer",
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def agent_card(card_url: str) -> AgentCard:
    return AgentCard(
        name="Remote Markdown Agent",
        description="Answers in Markdown (outbound test agent)",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=card_url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer")
            )
        },
        default_input_modes=["text/plain"],
        default_output_modes=["text/markdown"],
        skills=[
            AgentSkill(id="answer", name="Answer", description="Answers", tags=["test"])
        ],
    )


class Faults:
    """ASGI wrapper: records every request and injects the selected fault."""

    def __init__(self, app, args):
        self.app = app
        self.args = args
        self.seen: list[dict] = []
        self.dropped_send = False
        self.dropped_get = False

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        rpc_method, rpc_id = None, None
        try:
            envelope = json.loads(body) if body else None
            if isinstance(envelope, dict):
                rpc_method, rpc_id = envelope.get("method"), envelope.get("id")
        except ValueError:
            pass
        record = {
            "path": scope["path"],
            "method": scope["method"],
            "rpcMethod": rpc_method,
            "authorization": headers.get("authorization"),
        }
        if scope["path"] != "/_seen":
            self.seen.append(record)

        mode = self.args.mode
        if mode == "redirect" and scope["path"] != "/_seen":
            await send_bytes(send, 307, b"", [(b"location", self.args.redirect_to.encode())])
            return

        is_rpc = scope["path"] == RPC_PATH and scope["method"] == "POST"
        if (
            is_rpc
            and self.args.require_token
            and headers.get("authorization") != f"Bearer {self.args.require_token}"
        ):
            await send_bytes(send, 401, b'{"error":"unauthorized"}', [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b"Bearer"),
            ])
            return
        if mode == "dense" and scope["method"] == "GET" and scope["path"].endswith(
            CARD_PATH_SUFFIX
        ):
            await send_bytes(send, 200, self.args.dense_card,
                             [(b"content-type", b"application/json")])
            return
        if mode == "dense" and is_rpc:
            await send_bytes(send, 200, dense_answer(rpc_id),
                             [(b"content-type", b"application/json")])
            return
        if mode == "oversize" and scope["path"] != "/_seen":
            pad = b'{"jsonrpc":"2.0","id":%s,"result":{"pad":"' % json.dumps(rpc_id).encode()
            pad += b"x" * OVERSIZE + b'"}}'
            await send_bytes(send, 200, pad, [(b"content-type", b"application/json")])
            return
        if is_rpc and mode == "answer":
            # The endpoint answers without the agent: --status, with a JSON-RPC error of
            # --rpc-code under the request's id when given, otherwise a plain-text body.
            if self.args.rpc_code is not None:
                envelope = {"jsonrpc": "2.0", "id": rpc_id,
                            "error": {"code": self.args.rpc_code, "message": "injected"}}
                await send_bytes(send, self.args.status, json.dumps(envelope).encode(),
                                 [(b"content-type", b"application/json")])
            else:
                await send_bytes(send, self.args.status, b"injected answer\n",
                                 [(b"content-type", b"text/plain")])
            return
        if is_rpc and mode == "slow":
            await asyncio.sleep(self.args.delay)

        # Run the SDK app on the recorded body and capture its answer.
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                await asyncio.Event().wait()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        start, chunks = {}, []

        async def capture(message):
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, replay, capture)
        answer = b"".join(chunks)
        answer_headers = [
            (k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"
        ]

        cut = (mode == "drop-send" and rpc_method == "SendMessage" and not self.dropped_send) or (
            mode == "drop-get" and rpc_method == "GetTask" and not self.dropped_get
        )
        if is_rpc and cut:
            if rpc_method == "SendMessage":
                self.dropped_send = True
            else:
                self.dropped_get = True
            # Promise the whole answer, send half of it, then abort the connection.
            await send({
                "type": "http.response.start",
                "status": start.get("status", 200),
                "headers": answer_headers + [(b"content-length", str(len(answer)).encode())],
            })
            await send({"type": "http.response.body", "body": answer[: len(answer) // 2],
                        "more_body": True})
            raise ConnectionAbortedError("remote_agent: connection cut on purpose")
        if is_rpc and mode == "nul-answer":
            # A NUL character in every string of the answer: valid JSON that PostgreSQL's
            # text and jsonb types cannot hold.
            try:
                def with_nul(v):
                    if isinstance(v, str):
                        return v + "\u0000"
                    if isinstance(v, list):
                        return [with_nul(x) for x in v]
                    if isinstance(v, dict):
                        return {k: (x if k in ("jsonrpc", "id") else with_nul(x))
                                for k, x in v.items()}
                    return v
                envelope = json.loads(answer)
                if "result" in envelope:
                    envelope["result"] = with_nul(envelope["result"])
                answer = json.dumps(envelope).encode()
            except ValueError:
                pass
        if is_rpc and mode == "mismatched-id":
            try:
                envelope = json.loads(answer)
                envelope["id"] = f"not-{rpc_id}"
                answer = json.dumps(envelope).encode()
            except ValueError:
                pass
        await send_bytes(send, start.get("status", 200), answer, answer_headers)


def densely(document: dict, holder: list, size: int) -> bytes:
    """`document` serialised with `holder` (a list inside it) full of `{"":0}`, the densest
    JSON object there is, until the whole is `size` bytes at most."""
    empty = len(json.dumps(document, separators=(",", ":")).encode())
    holder.extend({"": 0} for _ in range((size - empty) // len('{"":0},')))
    body = json.dumps(document, separators=(",", ":")).encode()
    assert len(body) <= size, len(body)
    return body


def dense_card(card: AgentCard) -> bytes:
    """A valid card: its one extension's free-form `params` hold the dense part."""
    document = MessageToDict(card)
    holder: list = []
    document["capabilities"]["extensions"] = [{
        "uri": "https://remote.example/ext/dense", "params": {"d": holder},
    }]
    return densely(document, holder, DENSE_CARD_BYTES)


def dense_answer(rpc_id) -> bytes:
    """A JSON-RPC answer of a completed task whose free-form `metadata` holds the dense part."""
    holder: list = []
    envelope = {"jsonrpc": "2.0", "id": rpc_id, "result": {"task": {
        "id": "dense-task", "contextId": "dense-context",
        "status": {"state": "TASK_STATE_COMPLETED"}, "metadata": {"d": holder},
    }}}
    return densely(envelope, holder, DENSE_ANSWER_BYTES)


def signing_key(alg: str, kid: str):
    """A private key for `alg` made for this process, and its public JWK."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from jwt.algorithms import ECAlgorithm, OKPAlgorithm

    if alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
        jwk = ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
    else:
        private = ed25519.Ed25519PrivateKey.generate()
        jwk = OKPAlgorithm.to_jwk(private.public_key(), as_dict=True)
    jwk.update({"kid": kid, "alg": alg, "use": "sig"})
    return private, jwk


def signed(card: AgentCard, args, public_jwk_holder: dict) -> AgentCard:
    """`card` signed by the SDK's signer with a fresh key; the public JWK goes to the holder."""
    from a2a.utils.signing import create_agent_card_signer

    private, jwk = signing_key(args.sign, args.sign_kid)
    public_jwk_holder.update(jwk)
    header = {"alg": args.sign, "kid": args.sign_kid, "typ": "JOSE"}
    if args.sign_jku:
        header["jku"] = args.sign_jku
    return create_agent_card_signer(private, header)(card)


async def send_bytes(send, status, body, headers):
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": list(headers) + [(b"content-length", str(len(body)).encode())],
    })
    await send({"type": "http.response.body", "body": body, "more_body": False})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="normal", choices=[
        "normal", "slow", "drop-send", "drop-get", "mismatched-id", "redirect", "oversize",
        "nul-answer", "answer", "dense",
    ])
    parser.add_argument("--status", type=int, default=200, help="HTTP status of --mode answer")
    parser.add_argument("--rpc-code", type=int, default=None,
                        help="JSON-RPC error code of --mode answer (none: a plain-text body)")
    parser.add_argument("--delay", type=float, default=5.0)
    parser.add_argument("--work", type=float, default=0.3,
                        help="seconds the agent works before completing (the task is WORKING)")
    parser.add_argument("--card-delay", type=float, default=0.0,
                        help="seconds the card is held before it is answered")
    parser.add_argument("--redirect-to", default="http://127.0.0.1:9/")
    parser.add_argument("--require-token", default=None)
    parser.add_argument(
        "--card-url", default="https://elsewhere.example/a2a/rpc",
        help="interface URL the card advertises (discovery must never adopt it); "
             "'self': this agent's own endpoint",
    )
    parser.add_argument("--sign", choices=SIGNING_ALGORITHMS, default=None,
                        help="sign the card with the SDK's signer and serve it with its route")
    parser.add_argument("--sign-kid", default="remote-1")
    parser.add_argument("--sign-jku", default=None,
                        help="a jku for the protected header; 'self': this agent's /_jwks")
    parser.add_argument("--tamper", action="store_true",
                        help="serve the signed card with its description changed afterwards")
    args = parser.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    origin = f"http://127.0.0.1:{port}"
    if args.card_url == "self":
        args.card_url = origin + RPC_PATH
    if args.sign_jku == "self":
        args.sign_jku = origin + "/_jwks"

    card = agent_card(args.card_url)
    args.dense_card = dense_card(card) if args.mode == "dense" else b""
    handler = DefaultRequestHandler(
        agent_executor=MarkdownAgent(args.work), task_store=InMemoryTaskStore(), agent_card=card
    )

    async def card_route(_request: Request) -> JSONResponse:
        await asyncio.sleep(args.card_delay)
        document = MessageToDict(card)
        # Not part of an AgentCard: proves that whatever a card says, nothing is installed.
        document["credentials"] = {"bearer": "card-supplied-token"}
        return JSONResponse(document)

    faults: Faults | None = None

    async def seen_route(_request: Request) -> JSONResponse:
        return JSONResponse({"requests": faults.seen if faults else []})

    routes = create_jsonrpc_routes(handler, rpc_url=RPC_PATH)
    routes += [Route("/_seen", seen_route, methods=["GET"])]
    if args.sign:
        public_jwk: dict = {}
        signed_card = signed(card, args, public_jwk)

        async def tampered(served: AgentCard) -> AgentCard:
            changed = AgentCard()
            changed.CopyFrom(served)
            changed.description = served.description + "!"
            return changed

        async def key_route(_request: Request) -> JSONResponse:
            return JSONResponse(public_jwk)

        async def jwks_route(_request: Request) -> JSONResponse:
            return JSONResponse({"keys": [public_jwk]})

        routes += create_agent_card_routes(
            signed_card, card_modifier=tampered if args.tamper else None
        )
        routes += [
            Route("/_card_key", key_route, methods=["GET"]),
            Route("/_jwks", jwks_route, methods=["GET"]),
        ]
    else:
        routes += [Route("/.well-known/agent-card.json", card_route, methods=["GET"])]
    faults = Faults(Starlette(routes=routes), args)

    config = uvicorn.Config(faults, log_level="warning", access_log=False)
    server = uvicorn.Server(config)

    async def serve():
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.02)
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())

"""The official a2a-sdk 1.2.2 as the verifier of the gateway's signed cards, for the interop
tests in tests/it/card_signing/.

    .venv/bin/python tests/python/card_signing.py resolve --url AGENT_BASE --token T --jwks FILE
    .venv/bin/python tests/python/card_signing.py verify --card FILE --jwks FILE

`resolve` fetches `AGENT_BASE/.well-known/agent-card.json` with the SDK's own resolver
(`A2ACardResolver.get_agent_card`, bearer token in the request) and hands it the SDK's verifier
(`a2a.utils.signing.create_signature_verifier`); `verify` parses a card file (its exact bytes)
with the SDK's card parser and verifies it the same way. The verifier's key provider looks the
header's `kid` up in the JWK Set file (the output of `q-a2a-gateway card-keys`) and never uses
`jku`. Prints one JSON line: `{"verified": true, "name": ...}`, or `{"verified": false,
"error": <exception class>, "message": ...}`; exits 0 either way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import httpx
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from a2a.client import A2ACardResolver
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier

ALGORITHMS = ["ES256", "EdDSA"]


def verifier(jwks_file: str):
    keys = {k["kid"]: k for k in json.loads(Path(jwks_file).read_text())["keys"]}

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        # Only the operator's keys: a jku in the header is never fetched.
        if kid not in keys:
            raise PyJWKError(f"no trusted key {kid!r}")
        return PyJWK(keys[kid])

    return create_signature_verifier(key_provider, ALGORITHMS)


async def resolve(url: str, token: str | None, jwks_file: str) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=30) as client:
        resolver = A2ACardResolver(client, url)
        card = await resolver.get_agent_card(
            http_kwargs={"headers": headers}, signature_verifier=verifier(jwks_file)
        )
    return {"verified": True, "name": card.name, "signatures": len(card.signatures)}


def verify(card_file: str, jwks_file: str) -> dict:
    card = parse_agent_card(json.loads(Path(card_file).read_bytes()))
    verifier(jwks_file)(card)
    return {"verified": True, "name": card.name, "signatures": len(card.signatures)}


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("resolve")
    r.add_argument("--url", required=True)
    r.add_argument("--token", default=None)
    r.add_argument("--jwks", required=True)
    v = sub.add_parser("verify")
    v.add_argument("--card", required=True)
    v.add_argument("--jwks", required=True)
    args = parser.parse_args()
    try:
        if args.command == "resolve":
            result = asyncio.run(resolve(args.url, args.token, args.jwks))
        else:
            result = verify(args.card, args.jwks)
    except SignatureVerificationError as e:
        result = {"verified": False, "error": type(e).__name__, "message": str(e)}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

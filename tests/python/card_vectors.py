"""Golden vectors of the agent card's signed form, computed by the official a2a-sdk 1.2.2.

For each card (JSON text), what the SDK's verifier canonicalises before it checks a signature:
`parse_agent_card` (0.3 compatibility steps, protobuf JSON parsing), then
`a2a.utils.signing._canonicalize_agent_card` (protobuf JSON printing, `signatures` removed,
empty values cleaned, RFC 8785). A card the SDK cannot read has `canonical: null` and the
name of the exception it raised.

    .venv/bin/python tests/python/card_vectors.py --write   # regenerate card_vectors.json
    .venv/bin/python tests/python/card_vectors.py --check   # exit 1 if the file is stale

The gateway's unit tests (src/card_signature/form/tests.rs) compare its signed form with
card_vectors.json; the integration test `card_signing::vectors` runs `--check`, so the file
cannot drift from what the SDK computes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from google.protobuf.json_format import MessageToDict, ParseDict

from a2a.client.card_resolver import parse_agent_card
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import AgentCard
from a2a.utils.signing import _canonicalize_agent_card

HERE = Path(__file__).resolve().parent
VECTORS = HERE / "card_vectors.json"

# The card the gateway serves for an agent (src/a2a/card.rs, `build`), unsigned.
GATEWAY_CARD = r"""{"name":"Writer \u00e9\u00e8 \ud83d\ude00","description":"Writes \"Markdown\"\n\u2028","version":"1.0.0","supportedInterfaces":[{"url":"https://q.example/v1/a2a/agents/ag-writer/rpc","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],"capabilities":{"streaming":true,"pushNotifications":false,"extendedAgentCard":false},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/markdown"],"skills":[{"id":"answer","name":"Writer \u00e9\u00e8 \ud83d\ude00","description":"Writes \"Markdown\"\n\u2028","tags":["q","text"],"inputModes":["text/plain"],"outputModes":["text/markdown"]}],"securitySchemes":{"bearer":{"httpAuthSecurityScheme":{"scheme":"Bearer","description":"A Q credential with ai:answer plus a2a:read (discovery, reads) or a2a:delegate (send, cancel), issued by Q's authentication system"}}},"securityRequirements":[{"schemes":{"bearer":{"list":[]}}}]}"""

NUMBERS = r"""{"name":"n","capabilities":{"extensions":[{"uri":"urn:x","params":{
  "int":1,"negzero":-0,"float":4.50,"e30":1E30,"small":2e-3,"tiny":0.000000000000000000000000001,
  "third":333333333.33333329,"e21":1e21,"below21":999999999999999900000,"e23":1e23,
  "micro":0.000001,"below_micro":9.999999999999997e-7,"max":1.7976931348623157e308,
  "min":5e-324,"safe":9007199254740992,"big":12345678901234567890,"sum":0.30000000000000004,
  "list":[1,2.5,-3e-10,100]}}]}}"""

ESCAPES = r"""{"name":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","description":"\u0000\u001f\u007f\u0080\u00f6\u2028\u2029\ufb33\ud83d\ude00","capabilities":{"extensions":[{"uri":"urn:sort","params":{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}}]}}"""

EMPTIES = r"""{"name":"e","description":"","version":"","provider":{"url":"","organization":""},
  "documentationUrl":"","iconUrl":"","supportedInterfaces":[{"url":"u","protocolBinding":"JSONRPC","tenant":"","protocolVersion":""}],
  "capabilities":{"streaming":false,"pushNotifications":false,"extensions":[{"uri":"urn:e","required":false,"params":{"s":"","l":[],"o":{},"n":null,"f":false,"z":0,"nested":{"a":{"b":""}},"list":[null,"",[],{},0,false]}}]},
  "securitySchemes":{"b":{"httpAuthSecurityScheme":{"scheme":"Bearer","bearerFormat":""}},"o":{"oauth2SecurityScheme":{"flows":{"authorizationCode":{"authorizationUrl":"a","tokenUrl":"t","scopes":{"read":"","write":"Write"},"pkceRequired":false}}}}},
  "securityRequirements":[{"schemes":{"b":{"list":[]}}},{"schemes":{"o":{"list":["read"]}}}],
  "defaultInputModes":[],"defaultOutputModes":["text/plain"],
  "skills":[{"id":"","name":"","tags":[]},{"id":"s","name":"S","description":"d","tags":["t"],"examples":[],"securityRequirements":[{"schemes":{}}]}],
  "signatures":[{"protected":"eyJhbGciOiJFUzI1NiJ9","signature":"c2ln","header":{"kid":"x"}}]}"""

NAMES = r"""{"name":"names","default_input_modes":["text/plain"],"supported_interfaces":[{"url":"u","protocol_binding":"JSONRPC","protocol_version":"1.0"}],
  "capabilities":{"push_notifications":true,"extended_agent_card":true,"extensions":[{"uri":"urn:r","required":true}]},
  "security_schemes":{"k":{"api_key_security_scheme":{"location":"header","name":"X-Key"}}},
  "unknownTopLevel":{"anything":[1,2,3]},"credentials":{"bearer":"card-supplied-token"},
  "skills":[{"id":"s","name":"S","description":"d","tags":["t"],"input_modes":["text/plain"],"notAField":true}]}"""

NULLS = r"""{"name":"nulls","provider":null,"version":null,"skills":[],"capabilities":{"streaming":null,"extensions":[{"uri":"u","params":null}]},"iconUrl":null}"""

LEGACY = r"""{"name":"legacy","description":"a 0.3 card","version":"0.1","url":"https://legacy.example/rpc","preferredTransport":"JSONRPC","protocolVersion":"0.3.0",
  "additionalInterfaces":[{"url":"https://legacy.example/grpc","transport":"GRPC"}],
  "capabilities":{"streaming":true},"supportsAuthenticatedExtendedCard":true,
  "securitySchemes":{"k":{"type":"apiKey","in":"header","name":"X-Key"},"b":{"type":"http","scheme":"bearer"}},
  "security":[{"k":[]},{"b":["read"]}],"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],
  "skills":[{"id":"s","name":"S","description":"d","tags":["t"],"security":[{"b":["read"]}]}]}"""

OAUTH = r"""{"name":"oauth","securitySchemes":{
  "cc":{"oauth2SecurityScheme":{"description":"d","oauth2MetadataUrl":"https://m.example","flows":{"clientCredentials":{"tokenUrl":"https://t.example","refreshUrl":"r","scopes":{"a":"A"}}}}},
  "pw":{"oauth2SecurityScheme":{"flows":{"password":{"tokenUrl":"t","scopes":{}}}}},
  "im":{"oauth2SecurityScheme":{"flows":{"implicit":{"authorizationUrl":"a","scopes":{"x":"X"}}}}},
  "dc":{"oauth2SecurityScheme":{"flows":{"deviceCode":{"deviceAuthorizationUrl":"d","tokenUrl":"t","scopes":{"y":"Y"}}}}},
  "oidc":{"openIdConnectSecurityScheme":{"openIdConnectUrl":"https://o.example"}},
  "mtls":{"mtlsSecurityScheme":{"description":"client certificate"}},
  "empty":{"mtlsSecurityScheme":{}}}}"""

# Cards the SDK cannot read: it raises, so no signature over them can verify.
UNREADABLE = {
    "bool-as-string": r"""{"name":"x","capabilities":{"streaming":"true"}}""",
    "bool-as-number": r"""{"name":"x","capabilities":{"streaming":1}}""",
    "name-as-number": r"""{"name":1}""",
    "null-in-repeated": r"""{"name":"x","defaultInputModes":["a",null]}""",
    "two-oneof-members": r"""{"name":"x","securitySchemes":{"b":{"httpAuthSecurityScheme":{},"apiKeySecurityScheme":{}}}}""",
    "params-not-object": r"""{"name":"x","capabilities":{"extensions":[{"params":[1]}]}}""",
    "repeated-as-object": r"""{"name":"x","supportedInterfaces":{}}""",
    "null-scheme": r"""{"name":"x","securitySchemes":{"b":null}}""",
    "null-skills": r"""{"name":"x","skills":null}""",
    "scope-not-string": r"""{"name":"x","securitySchemes":{"o":{"oauth2SecurityScheme":{"flows":{"implicit":{"scopes":{"a":1}}}}}}}""",
}


def hybrid_card() -> str:
    """What the SDK's own server sends for a 1.0 card with a 0.3 interface: the 1.0 fields
    with the 0.3 ones merged in (`agent_card_to_dict`)."""
    card = ParseDict(
        {
            "name": "hybrid",
            "description": "served by the SDK with a 0.3 interface",
            "version": "2",
            "supportedInterfaces": [
                {"url": "https://h.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
            ],
            "capabilities": {"streaming": True},
            "securitySchemes": {
                "b": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": "token"}},
                "k": {"apiKeySecurityScheme": {"name": "X-Key", "location": "header"}},
            },
            "securityRequirements": [{"schemes": {"b": {"list": ["read"]}}}],
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [
                {
                    "id": "s", "name": "S", "description": "d", "tags": ["t"],
                    "securityRequirements": [{"schemes": {"k": {"list": []}}}],
                }
            ],
        },
        AgentCard(),
    )
    # Sorted: protobuf map order differs between runs, and the vector's text must not.
    return json.dumps(agent_card_to_dict(card), ensure_ascii=False, sort_keys=True)


def cards() -> dict[str, str]:
    readable = {
        "gateway-card": GATEWAY_CARD,
        "numbers": NUMBERS,
        "escapes-and-key-order": ESCAPES,
        "empties": EMPTIES,
        "proto-names-and-unknown-fields": NAMES,
        "nulls": NULLS,
        "legacy-0.3": LEGACY,
        "oauth-and-other-schemes": OAUTH,
        "hybrid-served-by-the-sdk": hybrid_card(),
    }
    return {**readable, **UNREADABLE}


def vector(name: str, text: str) -> dict:
    try:
        card = parse_agent_card(json.loads(text))
        canonical = _canonicalize_agent_card(card)
        return {
            "name": name, "card": text, "canonical": canonical, "error": None,
            "view": MessageToDict(card),
        }
    except Exception as e:  # the SDK's own failure, whatever its type
        return {"name": name, "card": text, "canonical": None, "error": type(e).__name__, "view": None}


def compute() -> list[dict]:
    return [vector(name, text) for name, text in cards().items()]


def main() -> int:
    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args()
    computed = compute()
    text = json.dumps(computed, indent=1, ensure_ascii=False) + "\n"
    if args.write:
        VECTORS.write_text(text, encoding="utf-8")
        print(f"wrote {len(computed)} vectors to {VECTORS}")
        return 0
    stored = json.loads(VECTORS.read_text(encoding="utf-8"))
    if stored != computed:
        for s, c in zip(stored, computed):
            if s != c:
                print(f"stale vector {c['name']}: stored {s}, the SDK computes {c}", file=sys.stderr)
        if len(stored) != len(computed):
            print(f"{len(stored)} vectors stored, {len(computed)} computed", file=sys.stderr)
        return 1
    print(f"{len(computed)} vectors match a2a-sdk's signed form")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A small renderer for the Go-template subset the q-a2a-gateway chart uses.

No Helm binary is available where the tests run, so this renders the chart well enough to
parse and validate what Helm would produce. It implements only:

- actions ``{{ ... }}`` with whitespace trimming (``{{-`` and ``-}}``) and comments
  ``{{/* ... */}}``;
- ``define "name"`` / ``include "name" .`` (always with the root context ``.``);
- ``if`` / ``else`` / ``end`` with conditions: a value path, ``not X``, ``eq X Y``,
  ``ne X Y``, ``and X Y``, ``or X Y``;
- values: ``.Values.a.b``, ``.Release.*``, ``.Chart.*``, ``.``, string, integer and boolean
  literals;
- pipelines ``X | f ...`` with ``quote``, ``toYaml``, ``nindent N``, ``indent N``,
  ``default D``.

Anything else (``with``, ``range``, variables, parentheses, other functions) raises
``TemplateError``, so a template cannot silently rely on something this renderer fakes.
Truthiness, ``toYaml`` (sorted keys) and the printing of booleans and numbers follow Go's
text/template and Helm.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class TemplateError(Exception):
    pass


ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


@dataclass
class Node:
    kind: str  # text | expr | if
    text: str = ""
    cond: str = ""
    body: list = field(default_factory=list)
    orelse: list = field(default_factory=list)


def tokenize(source: str) -> list[tuple[str, str]]:
    """Splits into ("text", s) and ("action", s) tokens, applying whitespace trimming."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    trim_next = False
    for m in ACTION.finditer(source):
        text = source[pos : m.start()]
        if trim_next:
            text = text.lstrip()
        if m.group(1):
            text = text.rstrip()
        tokens.append(("text", text))
        body = m.group(2)
        if not (body.startswith("/*") and body.endswith("*/")):
            tokens.append(("action", body))
        trim_next = bool(m.group(3))
        pos = m.end()
    text = source[pos:]
    if trim_next:
        text = text.lstrip()
    tokens.append(("text", text))
    return tokens


def parse(tokens: list[tuple[str, str]], defines: dict[str, list]) -> list:
    """Builds the node tree; collects ``define`` blocks into ``defines``."""
    pos = 0

    def block(stop: tuple[str, ...]) -> tuple[list, str]:
        nonlocal pos
        nodes: list = []
        while pos < len(tokens):
            kind, value = tokens[pos]
            pos += 1
            if kind == "text":
                if value:
                    nodes.append(Node("text", text=value))
                continue
            word = value.split(None, 1)[0] if value else ""
            if word in stop:
                return nodes, value
            if word == "if":
                node = Node("if", cond=value[2:].strip())
                node.body, ended = block(("else", "end"))
                if ended == "else":
                    node.orelse, ended = block(("end",))
                if ended != "end":
                    raise TemplateError(f"unterminated if {value!r}")
                nodes.append(node)
            elif word == "define":
                name = shlex.split(value[len("define") :])[0]
                body, ended = block(("end",))
                if ended != "end":
                    raise TemplateError(f"unterminated define {name}")
                defines[name] = body
            elif word in ("with", "range", "block", "template") or value.startswith("$"):
                raise TemplateError(f"unsupported construct {{{{ {value} }}}}")
            elif word in ("else", "end"):
                raise TemplateError(f"unexpected {word}")
            else:
                nodes.append(Node("expr", text=value))
        if stop:
            raise TemplateError(f"missing {stop}")
        return nodes, ""

    nodes, _ = block(())
    return nodes


def go_string(value: Any) -> str:
    """How text/template prints a value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        raise TemplateError(f"printing a map or list needs toYaml: {value!r}")
    return str(value)


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


class Renderer:
    def __init__(self, chart_dir: Path, values: dict, release: dict | None = None):
        self.chart_dir = chart_dir
        chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
        self.root = {
            "Values": values,
            "Release": {
                "Name": "q",
                "Namespace": "q-system",
                "Service": "Helm",
                **(release or {}),
            },
            "Chart": {
                "Name": chart["name"],
                "Version": chart["version"],
                "AppVersion": chart.get("appVersion", ""),
            },
        }
        self.defines: dict[str, list] = {}
        self.templates: dict[str, list] = {}
        for path in sorted((chart_dir / "templates").iterdir()):
            nodes = parse(tokenize(path.read_text()), self.defines)
            if not path.name.startswith("_"):
                self.templates[path.name] = nodes

    def render_all(self) -> dict[str, str]:
        return {name: self.run(nodes) for name, nodes in self.templates.items()}

    def run(self, nodes: list) -> str:
        out = []
        for node in nodes:
            if node.kind == "text":
                out.append(node.text)
            elif node.kind == "expr":
                out.append(go_string(self.pipeline(node.text)))
            else:
                branch = node.body if truthy(self.condition(node.cond)) else node.orelse
                out.append(self.run(branch))
        return "".join(out)

    # Expressions ---------------------------------------------------------------------------

    def operand(self, token: str) -> Any:
        if token == ".":
            return self.root
        if token.startswith("."):
            value: Any = self.root
            for part in token[1:].split("."):
                if not isinstance(value, dict):
                    raise TemplateError(f"{token}: {part} of a non-map")
                value = value.get(part)
            return value
        if token in ("true", "false"):
            return token == "true"
        if re.fullmatch(r"-?\d+", token):
            return int(token)
        raise TemplateError(f"unsupported operand {token!r}")

    def words(self, text: str) -> list[Any]:
        if "(" in text or ")" in text:
            raise TemplateError(f"parentheses are not supported: {text!r}")
        lexer = shlex.shlex(text, posix=False)
        lexer.whitespace_split = True
        result: list[Any] = []
        for token in lexer:
            if token.startswith('"') and token.endswith('"'):
                result.append(("lit", token[1:-1]))
            else:
                result.append(("tok", token))
        return result

    def value(self, word: tuple[str, str]) -> Any:
        kind, text = word
        return text if kind == "lit" else self.operand(text)

    def condition(self, text: str) -> Any:
        return self.pipeline(text)

    def command(self, words: list, piped: Any = None, has_piped: bool = False) -> Any:
        head_kind, head = words[0]
        args = [self.value(w) for w in words[1:]]
        if has_piped:
            args.append(piped)
        if head_kind == "lit" or head.startswith(".") or head in ("true", "false") or re.fullmatch(r"-?\d+", head):
            if len(words) != 1 or has_piped:
                raise TemplateError(f"a value cannot take arguments: {words!r}")
            return self.value(words[0])
        if head == "include":
            name, context = args
            if context is not self.root:
                raise TemplateError("include is supported with the root context only")
            if name not in self.defines:
                raise TemplateError(f"include of undefined template {name!r}")
            return self.run(self.defines[name])
        if head == "quote":
            (v,) = args
            return '"' + go_string(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
        if head == "toYaml":
            (v,) = args
            return yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip("\n")
        if head in ("nindent", "indent"):
            n, v = args
            pad = " " * n
            text = "\n".join(pad + line if line else line for line in go_string(v).split("\n"))
            return "\n" + text if head == "nindent" else text
        if head == "default":
            d, v = args
            return v if truthy(v) else d
        if head == "not":
            (v,) = args
            return not truthy(v)
        if head in ("eq", "ne"):
            a, b = args
            return (a == b) if head == "eq" else (a != b)
        if head == "and":
            return all(truthy(a) for a in args) and (args[-1] if args else True)
        if head == "or":
            for a in args:
                if truthy(a):
                    return a
            return args[-1] if args else False
        raise TemplateError(f"unsupported function {head!r}")

    def pipeline(self, text: str) -> Any:
        stages = [s.strip() for s in split_pipes(text)]
        result = self.command(self.words(stages[0]))
        for stage in stages[1:]:
            result = self.command(self.words(stage), result, True)
        return result


def split_pipes(text: str) -> list[str]:
    parts, current, quoted = [], [], False
    for c in text:
        if c == '"':
            quoted = not quoted
        if c == "|" and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
    parts.append("".join(current))
    return parts


def deep_merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def render_chart(
    chart_dir: Path, overrides: dict | None = None
) -> tuple[dict, list[tuple[str, dict]]]:
    """Renders with values.yaml plus ``overrides``; returns the values and every parsed
    document with the name of the template that produced it."""
    values = yaml.safe_load((chart_dir / "values.yaml").read_text())
    values = deep_merge(values, overrides or {})
    rendered = Renderer(chart_dir, values).render_all()
    documents = []
    for name, text in rendered.items():
        for doc in yaml.safe_load_all(text):
            if doc is not None:
                documents.append((name, doc))
    return values, documents

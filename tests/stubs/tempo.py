"""A Grafana Tempo stand-in: TraceQL search and trace by id, from Tempo's documented API.

Written from grafana/tempo's docs/sources/tempo/api_docs/_index.md, the configuration
defaults (``default_result_limit`` 20, ``max_spans_per_span_set`` 100) and its code
(pkg/util/traceid.go; the query frontend marshals with gogo jsonpb, so ids in a trace
are base64: grafana/tempo#5437):

- ``GET /api/search?q=<TraceQL>&limit=&spss=&start=&end=`` →
  ``{"traces": [{"traceID", "rootServiceName", "rootTraceName", "startTimeUnixNano",
  "durationMs", "spanSet", "spanSets": [{"spans": [...], "matched": N}]}], "metrics": {...}}``.
  Trace ids in hex without leading zeros; spans carry ``spanID``, ``name``,
  ``startTimeUnixNano``, ``durationNanos`` and only the attributes the query names
  (conditions and ``select``), never events; at most ``spss`` spans a set (default 3);
  results in no particular order (a parallel search keeps the first N found).
- ``GET /api/v2/traces/<id>`` → ``{"trace": {"resourceSpans": [...]}}``; the older
  ``GET /api/traces/<id>`` → ``{"batches": [...]}``; both 404 for an unknown trace. A Tempo
  before the v2 API (``v2=False``) answers the v2 path with "404 page not found".

TraceQL understood (400 for anything else): ``{ cond && cond || (cond) }`` with
``span.NAME``, ``span."NAME"``, ``.NAME``, ``resource.NAME``, ``name``, ``event:name``,
``event.NAME`` compared by ``=``/``!=`` to a string, number or boolean, followed by an
optional ``| select(attr, ...)``.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any, Optional, Union

from stubs import StubServer, TraceStore, attribute_map, hex_to_base64

_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>&&|\|\||!=|=|\{|\}|\(|\)|\||,)'
    r'|(?P<attr>(?:span|resource|event)\."(?:[^"\\]|\\.)*"|(?:span|resource|event)?\.[A-Za-z_][\w.]*|event:name|name)'
    r"|(?P<word>true|false|select))"
)


class TraceQLError(ValueError):
    pass


@dataclass
class Cond:
    scope: str  # span | resource | event | intrinsic
    key: str
    op: str
    value: Union[str, int, float, bool]


@dataclass
class Bool:
    op: str  # && | ||
    left: Any
    right: Any


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise TraceQLError(f"parse error at {pos}: {text[pos : pos + 20]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _attr(text: str) -> tuple[str, str]:
    if text == "name":
        return "intrinsic", "name"
    if text == "event:name":
        return "intrinsic", "event:name"
    scope, _, key = text.partition(".")
    if key.startswith('"'):
        key = json.loads(key)
    return scope or "any", key


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks, self.i = _tokens(text), 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.i] if self.i < len(self.toks) else ("end", "")

    def take(self, value: Optional[str] = None) -> tuple[str, str]:
        tok = self.peek()
        if value is not None and tok[1] != value:
            raise TraceQLError(f"expected {value!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def query(self) -> tuple[Any, list[tuple[str, str]]]:
        self.take("{")
        expr = self.or_expr()
        self.take("}")
        selected: list[tuple[str, str]] = []
        if self.peek()[1] == "|":
            self.take("|")
            self.take("select")
            self.take("(")
            while True:
                kind, text = self.take()
                if kind != "attr":
                    raise TraceQLError(f"select takes attributes, got {text!r}")
                selected.append(_attr(text))
                if self.peek()[1] == ",":
                    self.take(",")
                    continue
                self.take(")")
                break
        if self.peek()[0] != "end":
            raise TraceQLError(f"unexpected {self.peek()[1]!r}")
        return expr, selected

    def or_expr(self) -> Any:
        left = self.and_expr()
        while self.peek()[1] == "||":
            self.take()
            left = Bool("||", left, self.and_expr())
        return left

    def and_expr(self) -> Any:
        left = self.term()
        while self.peek()[1] == "&&":
            self.take()
            left = Bool("&&", left, self.term())
        return left

    def term(self) -> Any:
        if self.peek()[1] == "(":
            self.take("(")
            inner = self.or_expr()
            self.take(")")
            return inner
        kind, text = self.take()
        if kind != "attr":
            raise TraceQLError(f"expected an attribute, got {text!r}")
        scope, key = _attr(text)
        op = self.take()[1]
        if op not in ("=", "!="):
            raise TraceQLError(f"unsupported operator {op!r}")
        vkind, vtext = self.take()
        value: Union[str, int, float, bool]
        if vkind == "str":
            value = json.loads(vtext)
        elif vkind == "num":
            value = float(vtext) if "." in vtext else int(vtext)
        elif vtext in ("true", "false"):
            value = vtext == "true"
        else:
            raise TraceQLError(f"expected a value, got {vtext!r}")
        return Cond(scope, key, op, value)


def _conds(expr: Any) -> list[Cond]:
    return [expr] if isinstance(expr, Cond) else _conds(expr.left) + _conds(expr.right)


def _equal(found: Any, value: Any) -> bool:
    if isinstance(value, bool) or isinstance(found, bool):
        return found is value
    if isinstance(value, (int, float)) and isinstance(found, (int, float)):
        return float(found) == float(value)
    return found == value


class TempoStub(StubServer):
    def __init__(self, store: TraceStore, *, v2: bool = True, seed: int = 7, token: Optional[str] = None) -> None:
        self.store, self.v2, self.random = store, v2, random.Random(seed)
        super().__init__(token)

    def route(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if path == "/api/echo":
            return 200, "echo"
        if path == "/api/search":
            return self._search(query)
        if path.startswith("/api/v2/traces/"):
            if not self.v2:
                return 404, "404 page not found\n"
            trace_id = self._trace_id(path.rsplit("/", 1)[1])
            return (200, {"trace": self._trace(trace_id)}) if trace_id else (404, "trace not found")
        if path.startswith("/api/traces/"):
            trace_id = self._trace_id(path.rsplit("/", 1)[1])
            return (200, {"batches": self._trace(trace_id)["resourceSpans"]}) if trace_id else (404, "trace not found")
        return 404, "404 page not found\n"

    def _trace_id(self, text: str) -> Optional[str]:
        if not re.fullmatch(r"[0-9a-fA-F]{1,32}", text):
            return None
        padded = text.lower().rjust(32, "0")
        return padded if padded in self.store.traces else None

    def _trace(self, trace_id: str) -> dict[str, Any]:
        return hex_to_base64(self.store.trace_doc(trace_id))

    def _search(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        if "q" not in query:
            return 400, "tag based search is not supported by this stub"
        try:
            expr, selected = _Parser(query["q"][0]).query()
            limit = int(query.get("limit", ["20"])[0])
            spss = int(query.get("spss", ["3"])[0])
            start = int(query["start"][0]) * 10**9 if "start" in query else None
            end = int(query["end"][0]) * 10**9 if "end" in query else None
        except (TraceQLError, ValueError) as exc:
            return 400, f"invalid TraceQL query: {exc}"
        if spss > 100:
            return 400, "spans per spanset must be between 0 and 100"
        shown = [(c.scope, c.key) for c in _conds(expr) if c.scope != "intrinsic"] + selected
        results = []
        for trace_id in self.store.traces:
            spans = list(self.store.spans(trace_id))
            starts = [int(s.get("startTimeUnixNano", 0)) for _, _, s in spans]
            ends = [int(s.get("endTimeUnixNano", 0)) for _, _, s in spans]
            if (start is not None and max(ends) < start) or (end is not None and min(starts) > end):
                continue
            matched = [(r, s) for r, _, s in spans if self._eval(expr, r, s)]
            if not matched:
                continue
            root = min(spans, key=lambda t: int(t[2].get("startTimeUnixNano", 0)))
            span_set = {"spans": [self._search_span(r, s, shown) for r, s in matched[:spss]], "matched": len(matched)}
            results.append(
                {
                    "traceID": trace_id.lstrip("0") or "0",
                    "rootServiceName": attribute_map(root[0].get("attributes")).get(
                        "service.name", "<root span not yet received>"
                    ),
                    "rootTraceName": root[2].get("name", ""),
                    "startTimeUnixNano": str(min(starts)),
                    "durationMs": (max(ends) - min(starts)) // 1_000_000,
                    "spanSet": span_set,
                    "spanSets": [span_set],
                }
            )
        self.random.shuffle(results)
        return 200, {"traces": results[:limit], "metrics": {"inspectedTraces": len(self.store.traces), "totalBlocks": 1}}

    def _eval(self, expr: Any, resource: dict[str, Any], span: dict[str, Any]) -> bool:
        if isinstance(expr, Bool):
            left = self._eval(expr.left, resource, span)
            return (
                (left and self._eval(expr.right, resource, span))
                if expr.op == "&&"
                else (left or self._eval(expr.right, resource, span))
            )
        cond: Cond = expr
        if cond.key == "event:name" or cond.scope == "event":
            for event in span.get("events") or []:
                found = event.get("name") if cond.key == "event:name" else attribute_map(event.get("attributes")).get(cond.key)
                if found is not None and _equal(found, cond.value) == (cond.op == "="):
                    return True
            return False
        if cond.key == "name" and cond.scope == "intrinsic":
            found: Any = span.get("name")
        else:
            found = self._lookup(cond.scope, cond.key, resource, span)
        if found is None:
            return False  # TraceQL: a missing attribute matches neither = nor !=
        return _equal(found, cond.value) == (cond.op == "=")

    @staticmethod
    def _lookup(scope: str, key: str, resource: dict[str, Any], span: dict[str, Any]) -> Any:
        span_attrs, resource_attrs = attribute_map(span.get("attributes")), attribute_map(resource.get("attributes"))
        if scope == "span":
            return span_attrs.get(key)
        if scope == "resource":
            return resource_attrs.get(key)
        return span_attrs.get(key, resource_attrs.get(key))

    def _search_span(self, resource: dict[str, Any], span: dict[str, Any], shown: list[tuple[str, str]]) -> dict[str, Any]:
        attrs = []
        by_key = {a["key"]: a for a in span.get("attributes") or []}
        for scope, key in dict.fromkeys(shown):
            if scope in ("span", "any") and key in by_key:
                attrs.append(by_key[key])
            elif scope == "resource":
                attrs += [a for a in resource.get("attributes") or [] if a["key"] == key]
        start = int(span.get("startTimeUnixNano", 0))
        out = {
            "spanID": span["spanId"],
            "name": span.get("name", ""),
            "startTimeUnixNano": str(start),
            "durationNanos": str(int(span.get("endTimeUnixNano", start)) - start),
        }
        if attrs:
            out["attributes"] = attrs
        return out

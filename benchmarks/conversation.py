"""A generated agent conversation: 200 turns growing to about 100k tokens, 30 tools.

Deterministic (seeded) so every benchmark run measures the same work. Each turn
is rebuilt as fresh dicts holding the same strings, as agents do.
"""

from __future__ import annotations

import json
import random
from typing import Any

WORDS = (
    "the agent reads a file runs tests and fixes the failing case then checks coverage report diff patch "
    "module function class method value error trace stack import config token window budget memory skill "
    "server request response stream chunk usage cache prompt system tool call result output input schema"
).split()


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) + ("." if rng.random() < 0.08 else "") for _ in range(n_words))


def make_tools(n: int = 30, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    tools = []
    for i in range(n):
        props = {
            f"arg_{j}": {"type": rng.choice(["string", "integer", "boolean"]), "description": _text(rng, 8)} for j in range(4)
        }
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": f"tool_{i}",
                    "description": _text(rng, 25),
                    "parameters": {"type": "object", "properties": props, "required": ["arg_0"]},
                },
            }
        )
    return tools


def make_turns(n_turns: int = 200, seed: int = 11) -> tuple[str, list[list[dict[str, Any]]]]:
    """(system prompt, the new messages of each turn). About 500 tokens a turn."""
    rng = random.Random(seed)
    system = _text(rng, 600)
    turns = []
    for t in range(n_turns):
        call_id = f"call_{t}"
        turns.append(
            [
                {"role": "user", "content": _text(rng, 60)},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": f"tool_{t % 30}", "arguments": json.dumps({"arg_0": _text(rng, 6)})},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call_id, "content": _text(rng, 300)},
                {"role": "assistant", "content": _text(rng, 40)},
            ]
        )
    return system, turns


def request_at(system: str, turns: list[list[dict[str, Any]]], upto: int) -> list[dict[str, Any]]:
    """The full message list sent at turn ``upto`` (inclusive), as fresh dicts."""
    messages = [{"role": "system", "content": system}]
    for turn in turns[:upto]:
        messages.extend(_fresh(m) for m in turn[:1])
        messages.extend(_fresh(m) for m in turn[1:])
    return messages


def _fresh(message: dict[str, Any]) -> dict[str, Any]:
    out = dict(message)
    if "tool_calls" in out:
        out["tool_calls"] = [{**c, "function": dict(c["function"])} for c in out["tool_calls"]]
    return out


def new_text(system: str, tools: list[dict[str, Any]], turns: list[list[dict[str, Any]]], t: int) -> list[str]:
    """The text that is new at turn t (what the floor encodes)."""
    out = []
    if t == 1:
        out.append(system)
        out.extend(json.dumps(tool) for tool in tools)
    for m in turns[t - 1]:
        if m.get("content"):
            out.append(m["content"])
        for c in m.get("tool_calls") or []:
            out.append(c["function"]["name"] + c["function"]["arguments"])
    return out


def responses_request_at(system: str, turns: list[list[dict[str, Any]]], upto: int) -> dict[str, Any]:
    """The same request at turn ``upto`` written for the Responses API: instructions and input items, as fresh dicts."""
    items: list[dict[str, Any]] = []
    for turn in turns[:upto]:
        for m in turn:
            if m["role"] == "tool":
                items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
            elif m.get("tool_calls"):
                for c in m["tool_calls"]:
                    fn = c["function"]
                    items.append({"type": "function_call", "call_id": c["id"], "name": fn["name"], "arguments": fn["arguments"]})
            else:
                items.append({"role": m["role"], "content": m["content"]})
    return {"instructions": system, "input": items}


def responses_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat tool definitions in the Responses API's flat form."""
    return [{"type": "function", **tool["function"]} for tool in tools]

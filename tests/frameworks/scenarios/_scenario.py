"""The frame every framework scenario runs in (inside the frameworks venv, one process per framework).

The test passes one JSON argument: the agent server's URL, the export file, the
log file, the run id, the canaries and the scenarios to run. Each scenario runs
twice against the same server: first with plain LiteLLM, then after
``cw.instrument()``, inside ``cw.stage(run_id, scenario)``. The outcome (the
framework's answer, or its exception's type and message) of each is printed as
one JSON line after ``CW-RESULT``; the test compares the two and reads the
snapshots back from the export file.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RESULT_MARKER = "CW-RESULT "


@dataclass(frozen=True)
class Scenario:
    name: str  # nonstream | stream | fail400 | fail500
    base_url: str  # this scenario's api_base (ends in /v1)
    stream: bool
    canaries: dict[str, str]

    @property
    def system_prompt(self) -> str:
        return f"You are a careful research agent. Policy marker {self.canaries['system']}."

    @property
    def task(self) -> str:
        return f"Use the lookup tool to find the answer for {self.canaries['user']}."

    @property
    def tool_description(self) -> str:
        return f"Look a query up in the archive ({self.canaries['schema']})."

    def tool_result(self, query: str) -> str:
        return f"archive entry for {query!r}: {self.canaries['result']}"


def run_pydantic_ai(scenario: Scenario, model: Any) -> str:
    """A pydantic-ai agent with the lookup tool on ``model``: run, or streamed (the scenarios of its client families)."""
    import asyncio

    from pydantic_ai import Agent

    agent = Agent(model, instructions=scenario.system_prompt)

    @agent.tool_plain(description=scenario.tool_description)
    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    async def go() -> str:
        if scenario.stream:
            async with agent.run_stream(scenario.task) as result:
                async for _ in result.stream_text():
                    pass
                return str(await result.get_output())
        return str((await agent.run(scenario.task)).output)

    return asyncio.run(go())


def main(run: Callable[[Scenario], Any], packages: tuple[str, ...]) -> None:
    """Run every scenario plain, then instrumented; ``packages`` are reported with their versions."""
    from importlib.metadata import version

    config = json.loads(sys.argv[1])
    # The middleware's own log goes to a file the test scans for canaries.
    handler = logging.FileHandler(config["log"])
    handler.setLevel(logging.DEBUG)
    cw_logger = logging.getLogger("cw_middleware")
    cw_logger.addHandler(handler)
    cw_logger.setLevel(logging.DEBUG)

    import cw_middleware as cw

    cw.configure(export=f"file:{config['export']}", provider_count="never", service_name=config["service"])
    outcomes: dict[str, dict[str, Any]] = {"plain": {}, "observed": {}}
    for phase in ("plain", "observed"):
        if phase == "observed":
            cw.instrument()
        for name in config["scenarios"]:
            scenario = Scenario(name, f"{config['url']}/{phase}-{name}/v1", name == "stream", config["canaries"])
            try:
                if phase == "observed":
                    with cw.stage(config["run_id"], name):
                        answer = run(scenario)
                else:
                    answer = run(scenario)
                outcomes[phase][name] = {"answer": answer}
            except Exception as exc:  # noqa: BLE001 - the outcome to compare
                outcomes[phase][name] = {"error": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": str(exc)}
                if os.environ.get("CW_SCENARIO_TRACEBACKS"):
                    traceback.print_exc()
    cw.flush()
    versions = {name: version(name) for name in ("litellm", *packages)}
    print(RESULT_MARKER + json.dumps({"outcomes": outcomes, "versions": versions}), flush=True)

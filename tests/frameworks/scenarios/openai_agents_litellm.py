"""The OpenAI Agents SDK with its LitellmModel: Runner.run (and run_streamed) with one function tool."""

from __future__ import annotations

import asyncio

from _scenario import Scenario, main
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.extensions.models.litellm_model import LitellmModel

set_tracing_disabled(True)  # the SDK's own traces go to OpenAI's platform: nothing may leave this machine


def run(scenario: Scenario) -> str:
    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    tool = function_tool(lookup, name_override="lookup", description_override=scenario.tool_description)
    agent = Agent(
        name="researcher",
        instructions=scenario.system_prompt,
        model=LitellmModel(model="openai/gpt-4o", base_url=scenario.base_url, api_key="sk-local"),
        tools=[tool],
    )

    async def go() -> str:
        # asyncio.run starts its task in a copy of this context: the stage opened around run() is inherited.
        if scenario.stream:
            result = Runner.run_streamed(agent, scenario.task)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, scenario.task)
        return str(result.final_output)

    return asyncio.run(go())


if __name__ == "__main__":
    main(run, packages=("openai-agents",))

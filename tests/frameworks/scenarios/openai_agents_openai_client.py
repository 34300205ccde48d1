"""The OpenAI Agents SDK on the official openai client (no LiteLLM): its OpenAIChatCompletionsModel, one tool.

The SDK's own model classes call ``AsyncOpenAI.chat.completions.create``; cw.instrument() observes that
client method, so nothing in the agent changes. (Its default model, OpenAIResponsesModel, calls
``responses.create``, observed the same way; the local agent server answers the Responses API with the
final answer only, so the tool round is proven here on Chat Completions.)
"""

from __future__ import annotations

import asyncio

from _scenario import Scenario, main
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)  # the SDK's own traces go to OpenAI's platform: nothing may leave this machine


def run(scenario: Scenario) -> str:
    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    tool = function_tool(lookup, name_override="lookup", description_override=scenario.tool_description)
    client = AsyncOpenAI(base_url=scenario.base_url, api_key="sk-local", max_retries=0)
    agent = Agent(
        name="researcher",
        instructions=scenario.system_prompt,
        model=OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client),
        tools=[tool],
    )

    async def go() -> str:
        if scenario.stream:
            result = Runner.run_streamed(agent, scenario.task)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, scenario.task)
        return str(result.final_output)

    return asyncio.run(go())


if __name__ == "__main__":
    main(run, packages=("openai-agents", "openai"))

"""pydantic-ai's OpenAIChatModel (the official openai client, no LiteLLM): an agent with one tool, run and streamed."""

from __future__ import annotations

import asyncio

from _scenario import Scenario, main
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider


def run(scenario: Scenario) -> str:
    client = AsyncOpenAI(base_url=scenario.base_url, api_key="sk-local", max_retries=0)
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))
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


if __name__ == "__main__":
    main(run, packages=("pydantic-ai-slim", "openai"))

"""Google's Agent Development Kit on its default model class, ``Gemini`` (the official google-genai client, no LiteLLM).

ADK reaches ``client.aio.models.generate_content[_stream]``; before issue 35 an ADK agent on Gemini read back "no runs".
"""

from __future__ import annotations

import asyncio
import os

from _scenario import Scenario, main
from google.adk.agents import Agent
from google.adk.models.google_llm import Gemini
from google.genai import types
from google_adk_litellm import _answer


def run(scenario: Scenario) -> str:
    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    lookup.__doc__ = scenario.tool_description
    os.environ["GOOGLE_API_KEY"] = "gm-local"  # the key ADK's client reads; the stand-in takes any
    model = Gemini(
        model="gemini-2.5-flash",
        base_url=scenario.base_url.removesuffix("/v1"),
        retry_options=types.HttpRetryOptions(attempts=1),
    )
    agent = Agent(name="researcher", model=model, instruction=scenario.system_prompt, tools=[lookup])
    return asyncio.run(_answer(agent, scenario))


if __name__ == "__main__":
    main(run, packages=("google-adk", "google-genai"))

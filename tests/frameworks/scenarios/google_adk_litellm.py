"""Google's Agent Development Kit: an Agent on its LiteLlm model with a lookup tool, run by an InMemoryRunner.

ADK binds ``litellm.acompletion`` into its own module's globals the first time a LiteLlm model
runs -- here in the plain phase, before ``cw.instrument()``: the observed phase is observed only
because instrument() swaps such bindings too (issue 17 item 4).
"""

from __future__ import annotations

import asyncio

from _scenario import Scenario, main
from google.adk.agents import Agent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.genai import types


def run(scenario: Scenario) -> str:
    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    lookup.__doc__ = scenario.tool_description
    model = LiteLlm(model="openai/gpt-4o", api_base=scenario.base_url, api_key="sk-local")
    agent = Agent(name="researcher", model=model, instruction=scenario.system_prompt, tools=[lookup])
    return asyncio.run(_answer(agent, scenario))


async def _answer(agent: Agent, scenario: Scenario) -> str:
    runner = InMemoryRunner(agent=agent, app_name="cw-scenario")
    session = await runner.session_service.create_session(app_name="cw-scenario", user_id="user")
    message = types.Content(role="user", parts=[types.Part(text=scenario.task)])
    config = RunConfig(streaming_mode=StreamingMode.SSE if scenario.stream else StreamingMode.NONE)
    answer = ""
    async for event in runner.run_async(user_id="user", session_id=session.id, new_message=message, run_config=config):
        if event.is_final_response() and event.content and event.content.parts:
            answer = "".join(part.text or "" for part in event.content.parts)
    return answer


if __name__ == "__main__":
    main(run, packages=("google-adk",))

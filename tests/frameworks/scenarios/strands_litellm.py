"""Strands Agents: an Agent on its LiteLLMModel with a lookup tool (streamed unless the scenario says not)."""

from __future__ import annotations

from _scenario import Scenario, main
from strands import Agent, tool
from strands.models.litellm import LiteLLMModel


def run(scenario: Scenario) -> str:
    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    lookup.__doc__ = scenario.tool_description
    model = LiteLLMModel(
        client_args={"api_base": scenario.base_url, "api_key": "sk-local"},
        model_id="openai/gpt-4o",
        stream=scenario.stream,
    )
    agent = Agent(model=model, tools=[tool(lookup)], system_prompt=scenario.system_prompt, callback_handler=None)
    return str(agent(scenario.task))


if __name__ == "__main__":
    main(run, packages=("strands-agents",))

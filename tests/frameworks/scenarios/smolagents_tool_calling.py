"""smolagents' ToolCallingAgent on its LiteLLMModel: a lookup tool, then the final_answer tool."""

from __future__ import annotations

from _scenario import Scenario, main
from smolagents import LiteLLMModel, Tool, ToolCallingAgent
from smolagents.monitoring import LogLevel


def run(scenario: Scenario) -> str:
    class Lookup(Tool):
        name = "lookup"
        description = scenario.tool_description
        inputs = {"query": {"type": "string", "description": "what to look up"}}
        output_type = "string"

        def forward(self, query: str) -> str:
            return scenario.tool_result(query)

    model = LiteLLMModel(model_id="openai/gpt-4o", api_base=scenario.base_url, api_key="sk-local")
    agent = ToolCallingAgent(
        tools=[Lookup()],
        model=model,
        max_steps=3,
        verbosity_level=LogLevel.OFF,
        stream_outputs=scenario.stream,
        instructions=scenario.system_prompt,
    )
    return str(agent.run(scenario.task))


if __name__ == "__main__":
    main(run, packages=("smolagents",))

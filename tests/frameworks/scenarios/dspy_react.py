"""DSPy's ReAct on dspy.LM with engine="litellm" (the default engine, lm15, does not go through LiteLLM)."""

from __future__ import annotations

import dspy
from _scenario import Scenario, main


def run(scenario: Scenario) -> str:
    if scenario.stream:
        raise RuntimeError("not a DSPy scenario")

    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    lookup.__doc__ = scenario.tool_description
    lm = dspy.LM("openai/gpt-4o", api_base=scenario.base_url, api_key="sk-local", engine="litellm", cache=False, num_retries=0)
    signature = dspy.Signature("question -> answer", scenario.system_prompt)
    agent = dspy.ReAct(signature, tools=[lookup], max_iters=3)
    with dspy.context(lm=lm):
        return str(agent(question=scenario.task).answer)


if __name__ == "__main__":
    main(run, packages=("dspy",))

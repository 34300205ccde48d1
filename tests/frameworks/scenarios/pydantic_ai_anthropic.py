"""pydantic-ai's AnthropicModel (the official anthropic client, no LiteLLM): every call goes through
``client.beta.messages.create``, so before issue 35 a pydantic-ai + Claude agent read back "no runs"."""

from __future__ import annotations

from _scenario import Scenario, main, run_pydantic_ai
from anthropic import AsyncAnthropic
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider


def run(scenario: Scenario) -> str:
    client = AsyncAnthropic(base_url=scenario.base_url.removesuffix("/v1"), api_key="sk-ant-local", max_retries=0)
    return run_pydantic_ai(scenario, AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(anthropic_client=client)))


if __name__ == "__main__":
    main(run, packages=("pydantic-ai-slim", "anthropic"))

"""Strands Agents on its default model class, ``BedrockModel`` (boto3's bedrock-runtime client, no LiteLLM):
``converse_stream``, or ``converse`` when the scenario does not stream."""

from __future__ import annotations

import boto3
from _scenario import Scenario, main
from botocore.config import Config
from strands import Agent, tool
from strands.models.bedrock import BedrockModel


def run(scenario: Scenario) -> str:
    def lookup(query: str) -> str:
        return scenario.tool_result(query)

    lookup.__doc__ = scenario.tool_description
    session = boto3.Session(aws_access_key_id="AKIDLOCAL", aws_secret_access_key="local-secret", region_name="us-east-1")
    model = BedrockModel(
        model_id="anthropic.claude-3-5-sonnet-20240620-v1:0",
        boto_session=session,
        boto_client_config=Config(retries={"max_attempts": 1}),
        endpoint_url=scenario.base_url.removesuffix("/v1"),
        streaming=scenario.stream,
    )
    agent = Agent(model=model, tools=[tool(lookup)], system_prompt=scenario.system_prompt, callback_handler=None)
    return str(agent(scenario.task))


if __name__ == "__main__":
    main(run, packages=("strands-agents", "boto3"))

"""pydantic-ai's BedrockConverseModel (boto3's bedrock-runtime client, no LiteLLM): ``converse`` and ``converse_stream``."""

from __future__ import annotations

import boto3
from _scenario import Scenario, main, run_pydantic_ai
from botocore.config import Config
from pydantic_ai.models.bedrock import BedrockConverseModel
from pydantic_ai.providers.bedrock import BedrockProvider


def run(scenario: Scenario) -> str:
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=scenario.base_url.removesuffix("/v1"),
        aws_access_key_id="AKIDLOCAL",
        aws_secret_access_key="local-secret",
        config=Config(retries={"max_attempts": 1}),
    )
    model = BedrockConverseModel("anthropic.claude-3-5-sonnet-20240620-v1:0", provider=BedrockProvider(bedrock_client=client))
    return run_pydantic_ai(scenario, model)


if __name__ == "__main__":
    main(run, packages=("pydantic-ai-slim", "boto3"))

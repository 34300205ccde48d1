"""pydantic-ai's GoogleModel (the official google-genai client, no LiteLLM): ``client.aio.models.generate_content[_stream]``."""

from __future__ import annotations

from _scenario import Scenario, main, run_pydantic_ai
from google import genai
from google.genai import types
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.providers.google import GoogleProvider


def run(scenario: Scenario) -> str:
    options = types.HttpOptions(base_url=scenario.base_url.removesuffix("/v1"), retry_options=types.HttpRetryOptions(attempts=1))
    client = genai.Client(api_key="gm-local", http_options=options)
    return run_pydantic_ai(scenario, GoogleModel("gemini-2.5-flash", provider=GoogleProvider(client=client)))


if __name__ == "__main__":
    main(run, packages=("pydantic-ai-slim", "google-genai"))

"""Where an official client's requests go: the provider named from its class and base URL (no request is sent)."""

from __future__ import annotations

import openai
import pytest

from cw_middleware._capture.clients.routes import route_of


@pytest.mark.parametrize(
    ("base_url", "provider", "facts", "wire"),
    [
        ("https://api.openai.com/v1", "openai", "openai", "openai"),
        ("https://my-resource.openai.azure.com/openai/deployments/prod", "azure", "azure", "azure"),
        ("https://api.anthropic.com/v1/", "anthropic", "anthropic", "openai_compatible"),
        ("https://litellm.internal.example:4000", "litellm_proxy", None, "openai_compatible"),
        ("http://127.0.0.1:8000/v1", "openai_compatible", None, "openai_compatible"),
    ],
)
def test_openai_client_routes_by_host(base_url, provider, facts, wire):
    route = route_of(openai.OpenAI(base_url=base_url, api_key="sk-route"), "openai")
    assert (route.provider, route.facts_provider, route.wire_provider) == (provider, facts, wire)
    assert route.api_base is not None and route.api_base.startswith(base_url.rstrip("/"))
    assert route.api_key == "sk-route"


def test_azure_client_is_azure_whatever_its_host_with_its_api_version():
    client = openai.AzureOpenAI(base_url="https://gateway.example/openai", api_key="k", api_version="2024-06-01")
    route = route_of(client, "openai")
    assert (route.provider, route.api_version) == ("azure", "2024-06-01")
    assert route.endpoint()["api_version"] == "2024-06-01"


def test_the_key_never_shows_in_a_routes_repr():
    route = route_of(openai.OpenAI(base_url="http://127.0.0.1:1/v1", api_key="sk-secret-route-key"), "openai")
    assert "sk-secret-route-key" not in repr(route)


def test_anthropic_clients_route_by_class_and_host():
    anthropic = pytest.importorskip("anthropic")
    assert route_of(anthropic.Anthropic(api_key="k"), "anthropic").provider == "anthropic"
    local = route_of(anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9/"), "anthropic")
    assert (local.provider, local.facts_provider, local.api_key) == ("anthropic", "anthropic", "k")
    proxy = route_of(anthropic.Anthropic(api_key="k", base_url="http://litellm-proxy:4000"), "anthropic")
    assert (proxy.provider, proxy.facts_provider) == ("litellm_proxy", None)
    bedrock = anthropic.AnthropicBedrock(aws_region="us-east-1", aws_access_key="a", aws_secret_key="b")
    assert route_of(bedrock, "anthropic").provider == "bedrock"

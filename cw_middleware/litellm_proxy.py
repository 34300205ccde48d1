"""The LiteLLM Proxy's callback path, ``callbacks: cw_middleware.litellm_proxy.handler`` (see `._capture.litellm_proxy`)."""

from ._capture.litellm_proxy import ProxyHandler, __getattr__, stage_of_request  # noqa: F401 - the handlers are made on first look-up

"""The official ``openai`` and ``anthropic`` Python clients, observed as LiteLLM's calls are.

Much agent code calls these clients directly (pydantic-ai's OpenAI model, the OpenAI Agents SDK,
LangChain's ``ChatOpenAI`` / ``ChatAnthropic``). Two ways in, one call lifecycle (`call.Call`) and
one adapter per wire format (``apis/``: Chat Completions, Responses, Anthropic Messages):

* `instrument()` (cw.instrument) patches the methods of `patches.TARGETS` on the clients' classes,
  for every client object of the process, once the application has imported the client;
* `wrap(client)` (cw.wrap) returns an observed copy of one client, with no patching.

routes.py says where a client's requests go (the provider, from its class and base URL);
shells.py holds the observed methods and what they do with what the client returns.
"""

from __future__ import annotations

from .patches import SDKS, clients_instrumented, clients_observed, instrument_clients, uninstrument_clients
from .wrap import wrap

__all__ = ["SDKS", "clients_instrumented", "clients_observed", "instrument_clients", "uninstrument_clients", "wrap"]

"""Amazon Bedrock Runtime through ``boto3``: its Converse calls observed where botocore makes every API call.

A boto3 client has no resource classes to patch method by method: its methods are made at run time
from the service model, and each ends in ``BaseClient._make_api_call(operation_name, api_params)``.
That is where the tracers of the boto3 ecosystem hook (OpenTelemetry's botocore instrumentation wraps
it; so does AWS X-Ray's SDK), and where `api_call_shell` sits: a ``Converse`` or ``ConverseStream``
call of a ``bedrock-runtime`` client runs the one call lifecycle (`wrapper.run_call`) with the
Converse adapter (``apis/converse.py``), its tags stripped before botocore checks the parameters;
every other call of every other client goes straight through.

What comes back is never replaced: a ``ConverseStream`` answer's ``stream`` (botocore's
``EventStream``) is the same object, its events seen as the caller reads them (the stream's own
event generator and parser are wrapped on that one object); a stream dropped unread ends its call
without usage when collected.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ..apis import Api, Route
from ..call import Call
from ..litellm_originals import SAVED_ATTR, mark_observed
from ..wrapper import run_call
from .shells import skipped

SERVICE = "bedrock-runtime"


def api_call_shell(original: Callable[..., Any], api: Api, route_of: Callable[[Any], Route]) -> Callable[..., Any]:
    """An observed ``BaseClient._make_api_call``: Converse calls of bedrock-runtime clients, the rest untouched."""
    from ..apis.converse import OPERATIONS  # with the Converse adapter (``api``), imported once a shell is made

    @functools.wraps(original)
    def observed(self: Any, operation_name: str, api_params: Any) -> Any:
        if operation_name not in OPERATIONS or not _is_bedrock_runtime(self) or skipped():
            return original(self, operation_name, api_params)
        request = dict(api_params) if isinstance(api_params, dict) else api_params

        def send(*args: Any, **kwargs: Any) -> Any:
            return original(self, operation_name, kwargs)

        return run_call(api, (), request, send, observe, route_of(self))

    setattr(observed, SAVED_ATTR, original)
    return mark_observed(observed)


def _is_bedrock_runtime(client: Any) -> bool:
    try:
        return bool(client.meta.service_model.service_name == SERVICE)
    except AttributeError:
        return False


def bedrock_route(client: Any) -> Route:
    """A bedrock-runtime client's route: its endpoint (SigV4-signed: no key a count could use)."""
    endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None)
    return Route("bedrock", "bedrock", "bedrock", endpoint if isinstance(endpoint, str) else None)


def observe(call: Call, response: Any) -> Any:
    """A Converse answer reconciles now; a ConverseStream answer's stream is observed as it is read."""
    try:
        stream = response.get("stream") if isinstance(response, dict) else None
        if stream is not None and hasattr(stream, "_event_generator") and hasattr(stream, "_parse_event"):
            _observe_stream(call, stream)
        else:
            call.finish_response(response)
    except Exception as exc:  # noqa: BLE001
        call.runtime.log.warning("observe", f"cw_middleware: could not read the response ({type(exc).__name__})")
    return response


def _observe_stream(call: Call, stream: Any) -> None:
    parse = stream._parse_event

    def parse_and_see(event: Any) -> Any:
        try:
            parsed = parse(event)
        except BaseException as exc:  # an error event (throttling, a model error): the caller gets it as before
            call.fail(exc)
            raise
        if parsed:
            call.see_chunk(parsed)
        return parsed

    stream._parse_event = parse_and_see
    stream._event_generator = _ended(stream._event_generator, call)
    weakref.finalize(stream, call.finish_stream).atexit = False


def _ended(events: Iterator[Any], call: Call) -> Iterator[Any]:
    try:
        yield from events
    except GeneratorExit:
        raise
    except BaseException as exc:
        call.fail(exc)
        raise
    call.finish_stream()

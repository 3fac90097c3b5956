"""The request of one try on one channel: the path and body it sends, in the
channel's protocol (the client's bytes on a native channel, the OpenAI pivot
on an OpenAI-compatible one, the dialect's translation of the pivot on
another), and the ``x-gateway-dropped`` header naming what a translation
left out. The forward stage (``pipeline.forward``) sends it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from gateway_bridge.pipeline.call import Call
from gateway_bridge.pipeline.model_name import rewrite_model
from gateway_bridge.protocols.base import CallRequest, invalid
from gateway_bridge.vendors import takes_as_sent

if TYPE_CHECKING:
    from gateway_bridge.vendors.base import Dialect
    from inference_node.facade import RoutableNode

# The pivot's endpoint of a translated call (the client's may be "messages", ...).
PIVOT_ENDPOINTS = {
    "/v1/chat/completions": "chat.completions",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
}
# vLLM's extensions the pivot may carry (an Anthropic prefill): the OpenAI API
# refuses them (the other vendors' dialects never write them).
VLLM_ONLY = ("continue_final_message", "add_generation_prompt")


def prefixed(path: str, api_path: str) -> str:
    """``path`` with its first segment (``/v1``, ``/v1beta``) replaced by the
    channel's own API path (GLM: ``/api/paas/v4``)."""
    if not api_path:
        return path
    cut = path.find("/", 1)
    return api_path.rstrip("/") + (path[cut:] if cut > 0 else "")


def is_native(req: CallRequest, node: RoutableNode) -> bool:
    """Whether the channel takes the call as sent: it speaks the client's
    protocol, for this endpoint (``vendors.takes_as_sent``)."""
    return takes_as_sent(node.kind, req.protocol, req.endpoint)


DROPPED_HEADER = b"x-gateway-dropped"


def say_dropped(call: Call, req: CallRequest, native_call: bool) -> None:
    """The ``x-gateway-dropped`` header of this try's channel: what the
    translation left out ("; "-separated), none on a native channel."""
    call.headers_out[:] = [h for h in call.headers_out if h[0] != DROPPED_HEADER]
    if req.dropped and not native_call:
        value = "; ".join(req.dropped).encode("ascii", "backslashreplace")
        call.headers_out.append((DROPPED_HEADER, value))


def request_for(
    req: CallRequest, node: RoutableNode, dialect: Dialect, native_call: bool
) -> tuple[str, bytes]:
    """(path, body) of one try on ``node``."""
    upstream = node.upstream_model
    if not native_call and req.untranslatable:
        lost = req.untranslatable[0]
        raise invalid(
            f"{lost}: cannot be sent to this model's channel, which "
            f"speaks the {dialect.PROTOCOL} protocol",
            param=lost.partition(":")[0],
            code="unsupported",
        )
    if native_call:
        body = req.client_body or {}
        payload = rewrite_model(req.raw, body, upstream) if "model" in body else req.raw
        path = dialect.native_path(req.endpoint, upstream, req.stream, req.query)
    else:
        # The pivot in the channel's protocol (a new body: the pivot stays as
        # it is for the next try).
        body = dialect.from_chat(req.body, upstream, req.stream)
        if node.kind == "openai":
            for key in VLLM_ONLY:
                body.pop(key, None)
        payload = orjson.dumps(body)
        path = dialect.path(
            PIVOT_ENDPOINTS.get(req.upstream_path, req.endpoint), upstream, req.stream
        )
    return prefixed(path, node.api_path), payload

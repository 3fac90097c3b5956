"""What comes back from a node, read on the gateway's side: JSON bodies,
the text a broken stream produced (to bill it by the tokenizer rule), a
streamed answer assembled as the plain one (for the response cache) and a
plain one cut into chunks (for a streamed cache hit), and the node's HTTP
failures as the gateway's own errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from console.kernel.tokens import count_tokens
from gateway_bridge.protocols.base import (
    INVALID_REQUEST,
    NOT_FOUND,
    RATE_LIMIT,
    REQUEST_TOO_LARGE,
    TIMEOUT,
    UPSTREAM,
    GatewayError,
)


def json_object(raw: bytes | str) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(raw)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def collect_text(choice: dict[str, Any], texts: list[str]) -> None:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        content = delta.get("content")
        if isinstance(content, str):
            texts.append(content)
        for call in delta.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            # The node counts a tool call's arguments as its output tokens.
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                texts.append(fn["arguments"])
    else:
        text = choice.get("text")
        if isinstance(text, str):
            texts.append(text)


def output_tokens(obj: dict[str, Any]) -> int:
    texts: list[str] = []
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        if isinstance(message, dict):
            collect_text({"delta": message}, texts)
        else:
            collect_text(choice, texts)
    return count_tokens("".join(texts))


def chunks_of(upstream: dict[str, Any], endpoint: str) -> Iterator[dict[str, Any]]:
    """A cached plain answer as stream chunks (for a streamed cache hit)."""
    base = {
        "id": upstream.get("id", ""),
        "created": upstream.get("created", 0),
        "model": upstream.get("model", ""),
    }
    for choice in upstream.get("choices") or ():
        if endpoint == "completions":
            yield {
                **base,
                "object": "text_completion",
                "choices": [
                    {
                        "index": choice.get("index", 0),
                        "text": choice.get("text", ""),
                        "finish_reason": choice.get("finish_reason"),
                    }
                ],
            }
            continue
        message = dict(choice.get("message") or {})
        delta = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{**tc, "index": i} for i, tc in enumerate(message["tool_calls"])]
        yield {
            **base,
            "object": "chat.completion.chunk",
            "choices": [{"index": choice.get("index", 0), "delta": delta, "finish_reason": None}],
        }
        yield {
            **base,
            "object": "chat.completion.chunk",
            "choices": [
                {
                    "index": choice.get("index", 0),
                    "delta": {},
                    "finish_reason": choice.get("finish_reason"),
                }
            ],
        }


def assemble(chunks: list[dict[str, Any]], endpoint: str) -> dict[str, Any]:
    """A streamed answer's chunks as the equivalent plain answer (for the cache)."""
    first = chunks[0] if chunks else {}
    by_index: dict[int, dict[str, Any]] = {}
    usage = None
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            i = choice.get("index", 0)
            slot = by_index.setdefault(i, {"text": [], "tools": {}, "finish": None})
            if choice.get("finish_reason"):
                slot["finish"] = choice["finish_reason"]
            delta = choice.get("delta")
            if isinstance(delta, dict):
                if isinstance(delta.get("content"), str):
                    slot["text"].append(delta["content"])
                for tc in delta.get("tool_calls") or ():
                    t = slot["tools"].setdefault(
                        tc.get("index", 0),
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    t["id"] = tc.get("id") or t["id"]
                    fn = tc.get("function") or {}
                    t["function"]["name"] += fn.get("name") or ""
                    t["function"]["arguments"] += fn.get("arguments") or ""
            elif isinstance(choice.get("text"), str):
                slot["text"].append(choice["text"])
    choices = []
    for i, slot in sorted(by_index.items()):
        text = "".join(slot["text"])
        if endpoint == "completions":
            choices.append({"index": i, "text": text, "finish_reason": slot["finish"]})
            continue
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if slot["tools"]:
            message["tool_calls"] = [slot["tools"][k] for k in sorted(slot["tools"])]
        choices.append({"index": i, "message": message, "finish_reason": slot["finish"]})
    return {
        "id": first.get("id", ""),
        "object": "text_completion" if endpoint == "completions" else "chat.completion",
        "created": first.get("created", 0),
        "model": first.get("model", ""),
        "choices": choices,
        "usage": usage,
    }


def upstream_message(raw: bytes) -> tuple[str | None, str | None]:
    obj = json_object(raw)
    if obj is None:
        return None, None
    err = obj.get("error")
    if isinstance(err, dict):
        message = err.get("message")
        code = err.get("code") or err.get("type")
        return (str(message) if message else None), (str(code) if code else None)
    if isinstance(obj.get("message"), str):
        return obj["message"], None
    return None, None


def upstream_status_error(status: int, raw: bytes) -> GatewayError:
    message, _ = upstream_message(raw)
    if status == 429:
        return GatewayError(
            RATE_LIMIT,
            "upstream_rate_limited",
            "The node is rate limiting; retry shortly." + (f" ({message})" if message else ""),
            headers=[("retry-after", "1")],
        )
    return GatewayError(
        UPSTREAM,
        "upstream_error",
        f"The node failed with HTTP {status}." + (f" ({message})" if message else ""),
    )


def upstream_client_error(status: int, raw: bytes) -> GatewayError:
    message, code = upstream_message(raw)
    kind = {401: UPSTREAM, 403: UPSTREAM, 404: NOT_FOUND, 413: REQUEST_TOO_LARGE}.get(
        status, INVALID_REQUEST
    )
    if status in (401, 403):
        # The node refused our credentials: the operator's problem, not the caller's.
        return GatewayError(UPSTREAM, "upstream_auth_failed", "The node refused the gateway.")
    return GatewayError(
        kind,
        code if code and code.replace("_", "").isalnum() else "upstream_rejected",
        message or f"The node rejected the request (HTTP {status}).",
        status=400 if kind == INVALID_REQUEST else None,
    )


def upstream_exception_error(exc: Exception) -> GatewayError:
    reason = getattr(exc, "reason", "connect")
    if reason.endswith("timeout") and reason != "connect_timeout":
        return GatewayError(
            TIMEOUT, f"upstream_{reason}", f"The node did not answer in time ({reason})."
        )
    if reason in ("connect", "connect_timeout"):
        return GatewayError(UPSTREAM, "upstream_unreachable", "Could not connect to the node.")
    return GatewayError(
        UPSTREAM, f"upstream_{reason}", f"The node's answer broke off or was malformed ({reason})."
    )

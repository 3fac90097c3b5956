"""What a load run sends and reads on the wire: the raw HTTP/1.1 requests built
once per body (``request_payloads``), and whether an SSE data event carries
generated text (``has_content``: OpenAI, Anthropic and Gemini chunks), which
marks a stream's time to first token. Used by ``console.features.capacity.loadgen``.
"""

from __future__ import annotations

import json
import ssl as ssl_module
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

Headers = dict[str, str] | Iterable[tuple[str, str]]


def has_content(payload: bytes) -> bool:
    """Whether one SSE data payload carries generated text (OpenAI, Anthropic, Gemini)."""
    payload = payload.strip()
    if not payload or payload == b"[DONE]":
        return False
    try:
        event = json.loads(payload)
    except ValueError:
        return False
    if not isinstance(event, dict):
        return False
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls") or choice.get("text"):
            return True
    delta = event.get("delta")
    if isinstance(delta, dict) and (delta.get("text") or delta.get("partial_json")):
        return True
    for candidate in event.get("candidates") or ():
        for part in (candidate.get("content") or {}).get("parts") or ():
            if part.get("text"):
                return True
    return False


def request_payloads(
    url: str, bodies: Iterable[Any], headers: Headers, stream: bool, method: str
) -> tuple[list[bytes], str, int, ssl_module.SSLContext | None, str | None]:
    """Each body as a whole request (head and body bytes) for ``url``, with the host,
    port, TLS context and server name to connect with."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or ())
    names = {name.lower() for name, _ in pairs}
    lines = [f"{method} {target} HTTP/1.1", f"host: {parts.netloc}"]
    if "content-type" not in names:
        lines.append("content-type: application/json")
    lines += [f"{name}: {value}" for name, value in pairs if name.lower() != "host"]
    head = "\r\n".join(lines)
    payloads: list[bytes] = []
    for body in bodies:
        raw = _body_bytes(body, stream and ":streamGenerateContent" not in target)
        payloads.append(f"{head}\r\ncontent-length: {len(raw)}\r\n\r\n".encode("latin-1") + raw)
    if not payloads:
        raise ValueError("no request bodies")
    ssl = ssl_module.create_default_context() if secure else None
    return payloads, parts.hostname, port, ssl, (parts.hostname if secure else None)


def _body_bytes(body: Any, add_stream: bool) -> bytes:
    if isinstance(body, str):
        body = body.encode()
    if isinstance(body, bytes):
        if not add_stream:
            return body
        try:
            decoded = json.loads(body)
        except ValueError:
            return body
        if not isinstance(decoded, dict) or "stream" in decoded:
            return body
        body = decoded
    if add_stream and isinstance(body, dict) and "stream" not in body:
        body = {**body, "stream": True}
    return json.dumps(body).encode()

"""Request capture: the last calls the node received, bytes and all.

``GET /admin/requests`` answers ``{"requests": [...]}``, oldest first, with the
last ``CAPTURE_SIZE`` POSTs received on the vendor API paths (``/v1/...`` and
``/v1beta/...``: generation, token counting, embeddings), refused ones
included, so a test can check what a gateway really sent. Each entry:
``method``, ``path`` (with ``?query`` when there is one), ``headers`` (lower-case
names; the values of ``authorization``, ``x-api-key`` and ``x-goog-api-key``
replaced by "…" and their last four characters), ``body_base64`` (the body
exactly as received) and ``received_at`` (Unix seconds). A ``key`` query
parameter (Gemini's key) is masked the same way. ``POST /admin/reset`` clears
it. GETs (model lists, probes) are not kept: health checks would push the
calls a test looks for out of the window.
"""

from __future__ import annotations

import base64
import time
from collections import deque
from urllib.parse import unquote_plus

from .http import Request

CAPTURE_SIZE = 32
SECRET_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")


def masked(value: str) -> str:
    return "…" + value[-4:]


def _query(query: str) -> str:
    """The query as received, the value of ``key`` masked."""
    parts = query.split("&")
    return "&".join(
        "key=" + masked(unquote_plus(p[4:])) if p.startswith("key=") else p for p in parts
    )


class RequestLog:
    def __init__(self, size: int = CAPTURE_SIZE):
        self._entries: deque[dict] = deque(maxlen=size)
        self.total = 0  # every request since the last clear, kept or not

    def add(self, request: Request) -> None:
        self.total += 1
        headers = {
            name: masked(value) if name in SECRET_HEADERS else value
            for name, value in request.headers.items()
        }
        query = _query(request.query) if request.query else ""
        self._entries.append(
            {
                "method": request.method,
                "path": request.path + (f"?{query}" if query else ""),
                "headers": headers,
                "body_base64": base64.b64encode(request.body).decode(),
                "received_at": time.time(),
            }
        )

    def entries(self) -> list[dict]:
        return list(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.total = 0

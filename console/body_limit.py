"""A byte limit on every request body Django receives, before any handler reads it.

Django's ASGI handler reads (and past 2.5 MB spools to disk) the whole body
before it calls a view, and its own size checks run after that. ``BodyLimit``
wraps the Django application (``console.asgi``) and counts what arrives:

* a ``Content-Length`` over the limit is answered ``413`` at once, Django
  never called and the body never read;
* a body without one (chunked) is counted as it comes: once past the limit
  Django is told the client left (it drops the request unanswered) and the
  client gets the ``413`` — the rest is never read, since the server closes a
  connection answered before its body arrived (``console.server``).

The limit is ``CONSOLE_MAX_BODY_BYTES``; the gateway's paths have their own,
``GATEWAY_MAX_BODY_BYTES``, counted the same way by the gateway's body stage.
"""

from __future__ import annotations

from django.conf import settings


def _too_large(limit: int) -> bytes:
    return f"The request body is larger than the limit of {limit} bytes.\n".encode()


class BodyLimit:
    def __init__(self, app, max_bytes: int | None = None):
        self.app = app
        self._max_bytes = max_bytes

    @property
    def max_bytes(self) -> int:
        if self._max_bytes is None:
            self._max_bytes = settings.CONSOLE_MAX_BODY_BYTES
        return self._max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._answer(send, 400, b"Content-Length is not a number.\n")
                    return
                if declared > limit:
                    await self._answer(send, 413, _too_large(limit))
                    return
        received = 0
        over = False
        started = False

        async def counted_receive():
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def watched_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                if over:
                    return
                started = True
            elif over and not started:
                return
            await send(message)

        await self.app(scope, counted_receive, watched_send)
        if over and not started:
            await self._answer(send, 413, _too_large(limit))

    @staticmethod
    async def _answer(send, status: int, body: bytes) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

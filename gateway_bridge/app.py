"""The ASGI router: the gateway owns the model-protocol paths, Django the rest.

``/v1/...`` (OpenAI and Anthropic), ``/v1beta/...`` (Gemini) and ``/metrics``
go to the gateway's hot path, which skips Django's middleware and sync ORM;
everything else (console pages, the REST API, webhooks, static files) goes to
Django. The router also answers ASGI lifespan events (Django does not), so
the gateway starts with the server and flushes its usage buffer on shutdown.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway_bridge import access_log

if TYPE_CHECKING:
    from gateway_bridge.asgi import Receive, Scope, Send
    from gateway_bridge.gateway import Gateway

logger = logging.getLogger(__name__)
_heap_frozen = False


def freeze_startup_heap() -> None:
    """Once per process, after start-up: move what is alive now (Django, the
    apps, the gateway's caches) out of the garbage collector's reach, so its
    full collections scan only what calls allocate — not a pause of about a
    tenth of a second, every few thousand calls, of the server's only loop."""
    global _heap_frozen
    if not _heap_frozen:
        _heap_frozen = True
        gc.collect()
        gc.freeze()


GATEWAY_PREFIXES = ("/v1/", "/v1beta/")
# Paths outside those prefixes the gateway answers: OpenRouter's key path
# (``/api/v1/keys/`` and the rest of ``/api/`` stay Django's REST API).
GATEWAY_PATHS = ("/v1", "/v1beta", "/metrics", "/api/v1/key")


def owns(path: str) -> bool:
    return path.startswith(GATEWAY_PREFIXES) or path in GATEWAY_PATHS


class Router:
    def __init__(
        self,
        django_app: Callable[[Scope, Receive, Send], Any],
        gateway_factory: Callable[[], Gateway] | None = None,
    ) -> None:
        self.django_app = django_app
        self._factory = gateway_factory
        self._gateway: Gateway | None = None
        self._stop_access_log: Callable[[], None] | None = None

    @property
    def gateway(self) -> Gateway:
        if self._gateway is None:
            if self._factory is not None:
                self._gateway = self._factory()
            else:
                # deferred: the gateway is built on the first call or at start-up,
                # not when the ASGI module imports this router
                from gateway_bridge.gateway import Gateway

                self._gateway = Gateway()
        return self._gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" and owns(scope["path"]):
            await self.gateway.handle(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:
            await self.django_app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.gateway.start()
                except Exception as exc:
                    logger.exception("gateway failed to start")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                freeze_startup_heap()
                # One access line per call, written off the event loop.
                self._stop_access_log = access_log.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._gateway is not None:
                    try:
                        await self._gateway.close()
                    except Exception:
                        logger.exception("gateway failed to close cleanly")
                if self._stop_access_log is not None:
                    self._stop_access_log()
                    self._stop_access_log = None
                await send({"type": "lifespan.shutdown.complete"})
                return

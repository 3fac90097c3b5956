"""Wiring: routes of the front-ends (OpenAI chat and Responses, Anthropic,
Gemini), credential checks, the admin endpoint, and the process runner.

Each request is first given its dialect (``dialects.dialect_of``: OpenAI,
Anthropic, Gemini, or none for health, metrics and admin); its POSTs are
captured (``capture``), its credentials checked (``vendor_auth``), and every
error it gets is rendered in its vendor's shape (``dialects.error_response``).

Admin endpoint: ``GET /admin/faults`` reads the fault settings, ``POST
/admin/faults`` merges a JSON object of fault fields and returns the result
(``?for_seconds=N``: only for N seconds, then the settings from before; the
``x-faults-expires-in`` header says how long is left), ``DELETE /admin/faults``
goes back to the faults the node started with, ``GET /admin/requests``
returns the captured requests (the last ``CAPTURE_SIZE``) and how many came
in all (``total``), ``POST /admin/reset`` clears the prefix and
prompt caches, the counters and the capture. With an admin secret
(``--admin-secret``/``SIM_ADMIN_SECRET``, see ``admin``) it answers loopback
clients that send ``X-Sim-Admin-Secret`` only; otherwise it needs
``Authorization: Bearer <token>``, and a node started with neither answers 403
``admin_disabled`` there, so a node nobody secured cannot be reconfigured.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any
from urllib.parse import parse_qs

from . import metrics
from .admin import ADMIN_SECRET_HEADER, EXPIRES_HEADER, check_admin_secret
from .anthropic import AnthropicEndpoints
from .capture import RequestLog
from .config import FaultError, NodeConfig
from .dialects import ANTHROPIC, GEMINI, dialect_of, error_response, is_gemini_model_path
from .engine import ModelEngine
from .faults import FaultInjector
from .gemini import GeminiEndpoints
from .http import Request, Response, close_connections, start_server, sweep_idle
from .latency import LatencyModel
from .protocol import ApiError
from .responses import ResponsesEndpoints
from .vendor_auth import KeyGuard

VERSION = "0.1.0-sim"


# An endpoint: (request, connection, **path parameters) -> the response, or None
# when it wrote a stream itself.
Handler = Callable[..., Awaitable[Response | None]]


def _json(status: int, obj) -> Response:
    return Response(status, json.dumps(obj).encode())


class NodeApp(AnthropicEndpoints, GeminiEndpoints, ResponsesEndpoints):
    def __init__(self, config: NodeConfig):
        self.config = config
        self.engines = {
            spec.name: ModelEngine(
                spec,
                cache_blocks=config.prefix_cache_blocks,
                max_running=config.max_running,
                cache_ttl_scale=config.cache_ttl_scale,
            )
            for spec in config.models
        }
        self.latency = LatencyModel(
            config.profile,
            max_running=config.max_running,
            time_scale=config.time_scale,
            seed=config.seed,
        )
        self.faults = FaultInjector(config.faults, config.seed)
        self.keys = KeyGuard(config, self.faults)
        self.captured = RequestLog()
        self.started = int(time.time())
        self._token = config.token.encode()
        self._admin_secret = config.admin_secret.encode()
        self._routes: dict[str, dict[str, Handler]] = {
            "/v1/chat/completions": {"POST": self._chat},
            "/v1/completions": {"POST": self._completions},
            "/v1/embeddings": {"POST": self.embeddings},
            "/v1/responses": {"POST": self.responses},
            "/v1/models": {"GET": self._models},
            "/v1/messages": {"POST": self.anthropic_messages},
            "/v1/messages/count_tokens": {"POST": self.anthropic_count_tokens},
            "/v1beta/models": {"GET": partial(self.gemini_models, version="v1beta")},
            "/health": {"GET": self._health},
            "/version": {"GET": self._version},
            "/metrics": {"GET": self._metrics},
            "/admin/faults": {
                "GET": self._faults_get,
                "POST": self._faults_post,
                "DELETE": self._faults_clear,
            },
            "/admin/requests": {"GET": self._requests_get},
            "/admin/reset": {"POST": self._reset},
        }

    def _model_route(self, path: str, dialect: str | None) -> dict[str, Handler] | None:
        """The routes with a model in the path: ``/v1/models/{id}`` and Gemini's
        ``/{version}/models/{model}[:method]``."""
        version, _, rest = path[1:].partition("/")
        if version not in ("v1", "v1beta") or not rest.startswith("models/"):
            return None
        model = rest[len("models/") :]
        if not model:
            return None
        if is_gemini_model_path(path):
            name, sep, method = model.rpartition(":")
            if sep:
                call = partial(self.gemini_call, version=version, model=name, method=method)
                return {"POST": call}
            return {"GET": partial(self.gemini_models, version=version, model=model)}
        if dialect == ANTHROPIC:
            return {"GET": partial(self.anthropic_models, model=model)}
        if dialect == GEMINI:
            return {"GET": partial(self.gemini_models, version=version, model=model)}
        return {"GET": partial(self._models, model=model)}

    def _resolve(self, request: Request, path: str, dialect: str | None):
        route: dict[str, Handler] | None
        route = self._routes.get(path) or self._model_route(path, dialect)
        if path == "/v1/models" and dialect == ANTHROPIC:
            route = {"GET": self.anthropic_models}
        elif path == "/v1/models" and dialect == GEMINI:
            route = {"GET": partial(self.gemini_models, version="v1")}
        if route is None:
            raise ApiError(404, f"Unknown route {request.method} {request.path}.", code="not_found")
        handler = route.get(request.method)
        if handler is None:
            allowed = ", ".join(sorted(route))
            raise ApiError(
                405,
                f"Method {request.method} is not allowed on {request.path}; use {allowed}.",
                code="method_not_allowed",
                headers=(("allow", allowed),),
            )
        return handler

    async def handle(self, request: Request, conn) -> Response | None:
        path = request.path.rstrip("/") or "/"
        dialect = dialect_of(request, path)
        if dialect is not None and request.method == "POST":
            self.captured.add(request)
        try:
            handler = self._resolve(request, path, dialect)
            if path.startswith("/admin/"):
                self._check_admin(request, conn)
            elif dialect is not None:
                self.keys.check(request, dialect)
            return await handler(request, conn)
        except ApiError as error:
            return error_response(dialect, error)

    def _token_matches(self, request: Request) -> bool:
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(presented.strip().encode(), self._token)

    def _check_token(self, request: Request) -> None:
        if self._token and not self._token_matches(request):
            raise ApiError(
                401,
                "Invalid or missing node token: send 'Authorization: Bearer <token>'.",
                code="invalid_api_key",
            )

    def _check_admin(self, request: Request, conn) -> None:
        if self._admin_secret:
            peer = conn.wire.get_extra_info("peername")
            presented = request.headers.get(ADMIN_SECRET_HEADER, "")
            check_admin_secret(presented, self._admin_secret, peer)
            return
        if not self._token:
            raise ApiError(
                403,
                "The admin endpoint is disabled because this node was started without "
                "--token; restart it with --token to change faults at runtime.",
                type="permission_error",
                code="admin_disabled",
            )
        self._check_token(request)

    async def _chat(self, request, conn):
        return await self.generation(request, conn, chat=True)

    async def _completions(self, request, conn):
        return await self.generation(request, conn, chat=False)

    def _openai_model(self, spec) -> dict:
        return {
            "id": spec.name,
            "object": "model",
            "created": self.started,
            "owned_by": "inference-node-sim",
            "root": spec.name,
            "parent": None,
            "max_model_len": spec.context,
            "permission": [],
        }

    async def _models(self, request, conn, model: str | None = None) -> Response:
        if model is not None:
            spec = self.config.model(model)
            if spec is None:
                raise ApiError(
                    404, f"The model '{model}' does not exist.", param="model",
                    code="model_not_found",
                )  # fmt: skip
            return _json(200, self._openai_model(spec))
        data = [self._openai_model(spec) for spec in self.config.models]
        return _json(200, {"object": "list", "data": data})

    async def _health(self, request, conn) -> Response:
        return Response(200, b"", content_type="")

    async def _version(self, request, conn) -> Response:
        return _json(200, {"version": VERSION})

    async def _metrics(self, request, conn) -> Response:
        text = metrics.render(self.engines.values())
        return Response(200, text.encode(), content_type="text/plain; version=0.0.4")

    def _faults_response(self) -> Response:
        response = _json(200, self.faults.settings.as_dict())
        left = self.faults.expires_in()
        if left is not None:
            response.headers = ((EXPIRES_HEADER, f"{left:.3f}"),)
        return response

    async def _faults_get(self, request, conn) -> Response:
        return self._faults_response()

    async def _faults_post(self, request, conn) -> Response:
        try:
            changes = json.loads(request.body or b"{}")
        except ValueError:
            raise ApiError(400, "The body is not valid JSON.", code="invalid_json") from None
        for_seconds = _for_seconds(request.query)
        try:
            self.faults.update(changes, for_seconds)
        except FaultError as error:
            raise ApiError(400, error.message, param=error.param or None) from None
        return self._faults_response()

    async def _faults_clear(self, request, conn) -> Response:
        self.faults.clear()
        return self._faults_response()

    async def _requests_get(self, request, conn) -> Response:
        log = self.captured
        return _json(200, {"requests": log.entries(), "total": log.total})

    async def _reset(self, request, conn) -> Response:
        for engine in self.engines.values():
            engine.reset()
        self.captured.clear()
        return _json(200, {"status": "ok"})


def _for_seconds(query: str) -> float | None:
    """``for_seconds`` of a query string (a positive number), or None."""
    raw = parse_qs(query).get("for_seconds")
    if not raw:
        return None
    try:
        value = float(raw[-1])
    except ValueError:
        value = 0.0
    if not 0.0 < value < float("inf"):
        raise ApiError(400, "'for_seconds' must be a positive number.", param="for_seconds")
    return value


async def serve(config: NodeConfig, stop: asyncio.Event, on_ready=None) -> None:
    """Serve until ``stop`` is set. ``on_ready(app, host, port)`` runs once listening."""
    app = NodeApp(config)
    server, connections = await start_server(app.handle, config.host, config.port)
    host, port = server.sockets[0].getsockname()[:2]
    if on_ready is not None:
        on_ready(app, host, port)
    sweeper = asyncio.create_task(sweep_idle(connections))
    try:
        await stop.wait()
    finally:
        sweeper.cancel()
        server.close()
        close_connections(connections)
        await server.wait_closed()


def run(config: NodeConfig, out=None) -> None:
    """Run a node in this process until SIGTERM or SIGINT; prints the ready line."""
    out = out or sys.stdout
    runner: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
    try:
        import uvloop  # optional dependency: the faster event loop when installed

        runner = uvloop.run
    except ImportError:  # plain asyncio works, only slower
        pass

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def ready(app, host, port) -> None:
            out.write(f"Node listening on http://{host}:{port}\n")
            out.flush()

        await serve(config, stop, ready)

    runner(main())

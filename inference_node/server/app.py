"""Wiring: routes, node-token checks, the admin endpoint, and the process runner.

Admin endpoint: ``GET /admin/faults`` reads the fault settings, ``POST
/admin/faults`` merges a JSON object of fault fields and returns the result,
``POST /admin/reset`` clears the prefix caches and counters. It always needs
``Authorization: Bearer <token>``; a node started without ``--token`` answers
403 ``admin_disabled`` there, so a node nobody secured cannot be reconfigured.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import signal
import sys
import time

from . import metrics
from .config import FaultError, NodeConfig
from .engine import ModelEngine
from .faults import FaultInjector
from .generation import GenerationEndpoints
from .http import Request, Response, close_connections, start_server, sweep_idle
from .latency import LatencyModel
from .protocol import ApiError

VERSION = "0.1.0-sim"


def _json(status: int, obj) -> Response:
    return Response(status, json.dumps(obj).encode())


class NodeApp(GenerationEndpoints):
    def __init__(self, config: NodeConfig):
        self.config = config
        self.engines = {
            spec.name: ModelEngine(
                spec, cache_blocks=config.prefix_cache_blocks, max_running=config.max_running
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
        self.started = int(time.time())
        self._token = config.token.encode()
        self._routes = {
            "/v1/chat/completions": {"POST": self._chat},
            "/v1/completions": {"POST": self._completions},
            "/v1/embeddings": {"POST": self.embeddings},
            "/v1/models": {"GET": self._models},
            "/health": {"GET": self._health},
            "/version": {"GET": self._version},
            "/metrics": {"GET": self._metrics},
            "/admin/faults": {"GET": self._faults_get, "POST": self._faults_post},
            "/admin/reset": {"POST": self._reset},
        }

    async def handle(self, request: Request, conn) -> Response | None:
        route = self._routes.get(request.path.rstrip("/") or "/")
        try:
            if route is None:
                raise ApiError(
                    404, f"Unknown route {request.method} {request.path}.", code="not_found"
                )
            handler = route.get(request.method)
            if handler is None:
                allowed = ", ".join(sorted(route))
                raise ApiError(
                    405,
                    f"Method {request.method} is not allowed on {request.path}; use {allowed}.",
                    code="method_not_allowed",
                    headers=(("allow", allowed),),
                )
            if request.path.startswith("/v1/"):
                self._check_token(request)
            elif request.path.startswith("/admin/"):
                self._check_admin(request)
            return await handler(request, conn)
        except ApiError as error:
            return Response(error.status, error.body(), headers=error.headers)

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

    def _check_admin(self, request: Request) -> None:
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

    async def _models(self, request, conn) -> Response:
        data = [
            {
                "id": spec.name,
                "object": "model",
                "created": self.started,
                "owned_by": "inference-node-sim",
                "root": spec.name,
                "parent": None,
                "max_model_len": spec.context,
                "permission": [],
            }
            for spec in self.config.models
        ]
        return _json(200, {"object": "list", "data": data})

    async def _health(self, request, conn) -> Response:
        return Response(200, b"", content_type="")

    async def _version(self, request, conn) -> Response:
        return _json(200, {"version": VERSION})

    async def _metrics(self, request, conn) -> Response:
        text = metrics.render(self.engines.values())
        return Response(200, text.encode(), content_type="text/plain; version=0.0.4")

    async def _faults_get(self, request, conn) -> Response:
        return _json(200, self.faults.settings.as_dict())

    async def _faults_post(self, request, conn) -> Response:
        try:
            changes = json.loads(request.body or b"{}")
        except ValueError:
            raise ApiError(400, "The body is not valid JSON.", code="invalid_json") from None
        try:
            settings = self.faults.update(changes)
        except FaultError as error:
            raise ApiError(400, error.message, param=error.param or None) from None
        return _json(200, settings.as_dict())

    async def _reset(self, request, conn) -> Response:
        for engine in self.engines.values():
            engine.reset()
        return _json(200, {"status": "ok"})


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
    try:
        import uvloop
    except ImportError:  # plain asyncio works, only slower
        uvloop = None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def ready(app, host, port) -> None:
            out.write(f"Node listening on http://{host}:{port}\n")
            out.flush()

        await serve(config, stop, ready)

    if uvloop is not None:
        uvloop.run(main())
    else:
        asyncio.run(main())

"""The hot path: one call from the client's bytes to the node and back.

``Gateway.handle`` is an ASGI callable for the paths the bridge owns. Per call:
authenticate the key (cached), check the client IP and the model, read and
parse the body in the client's protocol, reserve the worst-case cost and
count the rate limits (one atomic store operation), route to a node (cache
affinity, bounded load, circuit breakers, priority queue), forward, retry on
another node while nothing has reached the client, answer in the client's
protocol (streams event by event), settle the actual cost, and hand one
usage event to the emitter. Nothing here blocks the event loop or writes the
database.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import itertools
import json
import logging
import os
import random
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs

import orjson
from django.conf import settings

from console.tokens import count_tokens
from gateway_bridge import answers
from gateway_bridge import cache as response_cache
from gateway_bridge.metrics import GatewayMetrics
from gateway_bridge.pipeline.usage_event import usage_event
from gateway_bridge.protocols import anthropic, openai
from gateway_bridge.protocols.base import (
    AUTHENTICATION,
    INTERNAL,
    INVALID_REQUEST,
    NOT_FOUND,
    OVERLOADED,
    PERMISSION,
    RATE_LIMIT,
    REQUEST_TOO_LARGE,
    UNSUPPORTED_MEDIA,
    UPSTREAM,
    CallRequest,
    GatewayError,
    ModelInfo,
)
from gateway_bridge.state import GatewayState
from gateway_bridge.usage_mapping import TokenUsage, from_openai
from usage.rating import rate

logger = logging.getLogger(__name__)


class _Adapters(dict):
    """Protocol modules by name (Gemini's imported on first use)."""

    def __missing__(self, name):
        import importlib

        module = importlib.import_module(f"gateway_bridge.protocols.{name}")
        self[name] = module
        return module

    def get(self, name, default=None):
        try:
            return self[name]
        except (ImportError, KeyError):
            return default


ADAPTERS = _Adapters(openai=openai, anthropic=anthropic)
_JSON = [(b"content-type", b"application/json")]
_EMBEDDING_ENDPOINTS = frozenset({"embeddings", "embedContent", "batchEmbedContents"})
_NO_USAGE = TokenUsage()


# Request ids: unique across processes (a random per-process part, new in a
# forked child) without a system call per request.
_ID_PREFIX = ""
_ID_COUNTER = itertools.count()


def _new_id_space() -> None:
    global _ID_PREFIX, _ID_COUNTER
    _ID_PREFIX = secrets.token_hex(6)
    _ID_COUNTER = itertools.count(int.from_bytes(secrets.token_bytes(4), "big"))


_new_id_space()
os.register_at_fork(after_in_child=_new_id_space)


def _safe_model(name) -> str:
    if isinstance(name, str) and 0 < len(name) <= 128 and name.isprintable() and "\\" not in name:
        return name
    return "(unknown)"


class Call:
    """Per-call state, filled as the call goes; becomes the usage event."""

    __slots__ = (
        "cache_status",
        "client_ip",
        "endpoint",
        "entry",
        "error_type",
        "headers_out",
        "model",
        "node_id",
        "node_name",
        "protocol",
        "queue_s",
        "record",
        "request_id",
        "started",
        "status",
        "stream",
        "t0",
        "ttft",
        "upstream_s",
        "usage",
    )

    def __init__(self, protocol: str, endpoint: str):
        self.request_id = f"req_{_ID_PREFIX}{next(_ID_COUNTER):012x}"
        self.t0 = time.perf_counter()
        self.started = time.time()
        self.protocol = protocol
        self.endpoint = endpoint
        self.entry = None
        self.model = None
        self.node_id = None
        self.node_name = None
        self.stream = False
        self.status = 200
        self.error_type = ""
        self.usage = _NO_USAGE
        self.ttft = None
        self.upstream_s = None
        self.queue_s = 0.0
        self.client_ip = None
        self.cache_status = "miss"
        self.headers_out: list[tuple[bytes, bytes]] = []
        self.record = True


class _Disconnected(Exception):
    """The client went away while we were streaming to it."""


def _networks(entries) -> tuple:
    out = []
    for raw in entries:
        try:
            out.append(ipaddress.ip_network(raw, strict=False))
        except ValueError:
            logger.warning("GATEWAY_TRUSTED_PROXIES: ignoring %r (not an IP or CIDR)", raw)
    return tuple(out)


def _in(networks, ip: str) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if addr.version == 6 and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return any(addr.version == n.version and addr in n for n in networks)


def _open_spool():
    """This process's spool: the first free slot of GATEWAY_SPOOL_DIR (a lock
    file per slot), so a restarted process takes over (and replays) the spool
    a dead one left."""
    from gateway_bridge.spool import Spool

    directory = Path(settings.GATEWAY_SPOOL_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    for slot in range(1024):
        lock_path = directory / f"usage-{slot}.lock"
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return Spool(directory / f"usage-{slot}.spool"), fd
    raise RuntimeError(f"no free spool slot in {directory}")


class Gateway:
    def __init__(self, *, emitter=None, limits=None, circuits=None):
        from gateway_bridge.circuits import CircuitReporter
        from gateway_bridge.limits import Limits, build_store
        from gateway_bridge.routing import Router, RouterConfig
        from gateway_bridge.upstream import UpstreamPool

        self.state = GatewayState()
        self.metrics = GatewayMetrics()
        self.router = Router(
            RouterConfig(
                default_policy=settings.GATEWAY_ROUTING_POLICY,
                policies=dict(settings.GATEWAY_ROUTING_OVERRIDES),
                load_factor=settings.GATEWAY_LOAD_FACTOR,
                prefix_chars=settings.GATEWAY_AFFINITY_PREFIX_CHARS,
                breaker_window=settings.GATEWAY_BREAKER_WINDOW_SECONDS,
                breaker_error_rate=settings.GATEWAY_BREAKER_ERROR_RATE,
                breaker_min_calls=settings.GATEWAY_BREAKER_MIN_CALLS,
                breaker_open_seconds=settings.GATEWAY_BREAKER_OPEN_SECONDS,
                queue_timeout=settings.GATEWAY_QUEUE_TIMEOUT,
                max_queue_depth=settings.GATEWAY_QUEUE_MAX_DEPTH,
            )
        )
        # Circuit openings and closings go to the audit trail (the Errors page).
        self.circuits = circuits if circuits is not None else CircuitReporter()
        self.router.on_transition = self.circuits.report
        self.pool = UpstreamPool()
        self.limits = Limits(limits if limits is not None else build_store())
        self._emitter = emitter
        self._spool_lock_fd = None
        self.cache = response_cache.ResponseCache()
        self.trusted = _networks(settings.GATEWAY_TRUSTED_PROXIES)
        self.max_body = settings.GATEWAY_MAX_BODY_BYTES
        self.timeouts = {
            "connect_timeout": settings.GATEWAY_CONNECT_TIMEOUT,
            "first_byte_timeout": settings.GATEWAY_FIRST_BYTE_TIMEOUT,
            "idle_timeout": settings.GATEWAY_IDLE_TIMEOUT,
            "total_timeout": settings.GATEWAY_TOTAL_TIMEOUT,
        }
        self.hold_seconds = settings.GATEWAY_TOTAL_TIMEOUT + settings.GATEWAY_QUEUE_TIMEOUT + 60
        self.retries = settings.GATEWAY_RETRIES
        self.backoff = settings.GATEWAY_RETRY_BACKOFF_SECONDS
        self.default_max_tokens = settings.GATEWAY_DEFAULT_MAX_TOKENS
        self._plans: dict[int, tuple] = {}
        self._started = False
        self._start_lock: asyncio.Lock | None = None
        self._register_gauges()

    # --- lifecycle --------------------------------------------------------

    @property
    def emitter(self):
        if self._emitter is None:
            from gateway_bridge.emitter import UsageEmitter

            spool, self._spool_lock_fd = _open_spool()
            self._emitter = UsageEmitter(
                None,
                spool,
                max_batch=settings.GATEWAY_EMIT_MAX_BATCH,
                max_delay=settings.GATEWAY_EMIT_MAX_DELAY,
            )
        return self._emitter

    async def start(self) -> None:
        if self._started:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            await self.state.start()
            self.state.on_message_hooks.append(self._on_message)
            self.emitter  # noqa: B018 - open the spool now, replaying what a previous run left
            self._started = True

    async def close(self) -> None:
        await self.state.close()
        await self.pool.close()
        await self.cache.close()
        await self.limits.store.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.circuits.close)
        if self._emitter is not None:
            await loop.run_in_executor(None, self._emitter.close)
        if self._spool_lock_fd is not None:
            os.close(self._spool_lock_fd)
            self._spool_lock_fd = None

    def _on_message(self, kind: str, rest: str) -> None:
        if kind == "balance":
            # A memory store lives in this process: apply the credit here.
            org, _, delta = rest.partition(":")
            from gateway_bridge.limits import apply_local_credit

            apply_local_credit(self, int(org), int(delta))

    def _register_gauges(self) -> None:
        def queue_depth():
            stats = self.router.stats()
            for model, by_priority in stats.get("queues", {}).items():
                for priority, depth in by_priority.items():
                    yield (model, priority), depth

        def node_in_flight():
            for node, data in self.router.stats().get("nodes", {}).items():
                yield (node,), data.get("in_flight", 0)

        def breaker_open():
            for node, data in self.router.stats().get("nodes", {}).items():
                yield (node,), 0 if data.get("state") == "closed" else 1

        def breaker_openings():
            for node, data in self.router.stats().get("nodes", {}).items():
                yield (node,), data.get("openings", 0)

        def spool():
            em = self._emitter
            yield (), em.spool_pending if em is not None else 0

        def emitted():
            em = self._emitter
            yield (), em.emitted if em is not None else 0

        def invalidations():
            yield (), self.state.key_invalidations

        def last_invalidation():
            yield (), self.state.last_key_invalidation

        m = self.metrics
        m.gauge(
            "gateway_queue_depth",
            "Calls waiting for a node slot.",
            ("model", "priority"),
            queue_depth,
        )
        m.gauge("gateway_node_in_flight", "Calls in flight per node.", ("node",), node_in_flight)
        m.gauge(
            "gateway_circuit_open",
            "1 when a node's circuit is open or half-open.",
            ("node",),
            breaker_open,
        )
        m.gauge(
            "gateway_circuit_openings",
            "Times a node's circuit opened.",
            ("node",),
            breaker_openings,
        )
        m.gauge("gateway_spool_batches", "Usage batches waiting in the spool.", (), spool)
        m.gauge("gateway_usage_events", "Usage events handed to the emitter.", (), emitted)
        m.gauge(
            "gateway_key_invalidations",
            "Key, sub-account and organization changes heard (cached keys dropped).",
            (),
            invalidations,
        )
        m.gauge(
            "gateway_last_key_invalidation_timestamp_seconds",
            "When the last key change was heard (POSIX seconds).",
            (),
            last_invalidation,
        )

    # --- ASGI entry -------------------------------------------------------

    async def handle(self, scope, receive, send) -> None:
        if not self._started:
            await self.start()
        path = scope["path"]
        method = scope["method"]
        headers = {}
        for k, v in scope["headers"]:
            headers[k.decode("latin-1").lower()] = v.decode("latin-1")
        if path == "/metrics":
            await self._metrics(headers, send)
            return
        protocol, endpoint, handler, model = self._resolve(method, path, headers)
        call = Call(protocol, endpoint)
        self.metrics.in_flight += 1
        try:
            await handler(call, scope, receive, send, headers, model)
        except GatewayError as err:
            await self._fail(call, err, send)
        except _Disconnected:
            call.status = 499
            call.error_type = call.error_type or "client_disconnected"
        except Exception:
            logger.exception(
                "gateway: unexpected error in %s %s (%s)", method, path, call.request_id
            )
            await self._fail(
                call,
                GatewayError(
                    INTERNAL, "internal_error", "The gateway failed to handle the request."
                ),
                send,
            )
        finally:
            self.metrics.in_flight -= 1
            self._finish(call)

    def _resolve(self, method: str, path: str, headers: dict):
        """(protocol, endpoint, handler, model-in-path) for a request."""
        if path.startswith("/v1beta/"):
            rest = path[len("/v1beta/") :]
            if rest == "models":
                return "gemini", "models", self._only("GET", method, self._models), None
            if rest.startswith("models/"):
                name, sep, verb = rest[len("models/") :].partition(":")
                if not sep:
                    return "gemini", "models", self._only("GET", method, self._model), name
                handler = {
                    "generateContent": self._generate,
                    "streamGenerateContent": self._generate,
                    "countTokens": self._count,
                    "embedContent": self._generate,
                    "batchEmbedContents": self._generate,
                }.get(verb)
                if handler is not None:
                    return "gemini", verb, self._only("POST", method, handler), name
            return "gemini", "unknown", self._not_found, None
        if path in ("/v1/messages", "/v1/messages/"):
            return "anthropic", "messages", self._only("POST", method, self._generate), None
        if path == "/v1/messages/count_tokens":
            return "anthropic", "count_tokens", self._only("POST", method, self._count), None
        is_anthropic = "anthropic-version" in headers
        if path in ("/v1/models", "/v1/models/"):
            proto = "anthropic" if is_anthropic else "openai"
            return proto, "models", self._only("GET", method, self._models), None
        if path.startswith("/v1/models/"):
            proto = "anthropic" if is_anthropic else "openai"
            name = path[len("/v1/models/") :]
            return proto, "models", self._only("GET", method, self._model), name
        endpoint = {
            "/v1/chat/completions": "chat.completions",
            "/v1/completions": "completions",
            "/v1/embeddings": "embeddings",
        }.get(path.rstrip("/"))
        if endpoint is not None:
            return "openai", endpoint, self._only("POST", method, self._generate), None
        return "openai", "unknown", self._not_found, None

    def _only(self, allowed: str, method: str, handler):
        if method == allowed:
            return handler

        async def not_allowed(call, *args):
            call.record = False
            raise GatewayError(
                INVALID_REQUEST,
                "method_not_allowed",
                f"{method} is not allowed here; use {allowed}.",
                status=405,
                headers=[("allow", allowed)],
            )

        return not_allowed

    async def _not_found(self, call, scope, *args):
        call.record = False
        raise GatewayError(NOT_FOUND, "unknown_url", f"Unknown request URL: {scope['path']}")

    # --- authentication and common checks --------------------------------

    def _raw_key(self, headers: dict, scope) -> str | None:
        auth = headers.get("authorization")
        if auth:
            scheme, _, value = auth.partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                return value.strip()
        for name in ("x-api-key", "x-goog-api-key"):
            value = headers.get(name)
            if value:
                return value.strip()
        qs = scope.get("query_string") or b""
        if b"key=" in qs:
            values = parse_qs(qs.decode("latin-1")).get("key")
            if values and values[0]:
                return values[0]
        return None

    def client_ip(self, scope, headers: dict) -> str:
        peer = (scope.get("client") or ("",))[0] or ""
        if not self.trusted or not _in(self.trusted, peer):
            return peer
        forwarded = headers.get("x-forwarded-for")
        if not forwarded:
            return peer
        # Right to left: the first hop that is not one of our proxies is the client.
        for hop in reversed([h.strip() for h in forwarded.split(",")]):
            try:
                ipaddress.ip_address(hop)
            except ValueError:
                return peer
            if not _in(self.trusted, hop):
                return hop
        return peer

    async def _authenticate(self, call: Call, scope, headers: dict):
        raw = self._raw_key(headers, scope)
        if raw is None:
            call.record = False
            raise GatewayError(
                AUTHENTICATION,
                "missing_api_key",
                "No API key: send it as 'Authorization: Bearer <key>', 'x-api-key' or "
                "'x-goog-api-key'.",
            )
        entry = await self.state.key(raw)
        if entry is None:
            call.record = False
            raise GatewayError(
                AUTHENTICATION,
                "invalid_api_key",
                "Invalid API key: it is unknown, revoked or expired, or its account is suspended.",
            )
        call.entry = entry
        call.client_ip = self.client_ip(scope, headers) or None
        if entry.expires_ts is not None and entry.expires_ts <= time.time():
            raise GatewayError(AUTHENTICATION, "expired_api_key", "This API key has expired.")
        if not entry.ip_allowed(call.client_ip or ""):
            raise GatewayError(
                PERMISSION,
                "ip_not_allowed",
                f"Requests from {call.client_ip or 'this address'} are not allowed for this key.",
            )
        return entry

    async def _read_json(self, call: Call, receive, headers: dict):
        length = headers.get("content-length")
        if length is not None:
            try:
                if int(length) > self.max_body:
                    raise self._too_large()
            except ValueError:
                raise GatewayError(
                    INVALID_REQUEST, "invalid_content_length", "Content-Length is not a number."
                ) from None
        ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype and ctype != "application/json" and not ctype.endswith("+json"):
            raise GatewayError(
                UNSUPPORTED_MEDIA,
                "unsupported_content_type",
                f"Content-Type must be application/json, not {ctype}.",
            )
        chunks = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > self.max_body:
                    raise self._too_large()
                chunks.append(chunk)
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        if not raw.strip():
            raise GatewayError(INVALID_REQUEST, "invalid_json", "The request body is empty.")
        try:
            return orjson.loads(raw)
        except (ValueError, RecursionError) as exc:
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "invalid JSON"
            raise GatewayError(
                INVALID_REQUEST,
                "invalid_json",
                f"The request body is not valid JSON: {detail}.",
            ) from None

    def _too_large(self) -> GatewayError:
        return GatewayError(
            REQUEST_TOO_LARGE,
            "request_too_large",
            f"The request body is larger than the limit of {self.max_body} bytes.",
        )

    # --- endpoints ----------------------------------------------------------

    async def _models(self, call: Call, scope, receive, send, headers, _model) -> None:
        entry = await self._authenticate(call, scope, headers)
        call.record = False
        infos = self._visible_models(entry)
        await self._respond(send, 200, ADAPTERS[call.protocol].render_models(infos), call)

    async def _model(self, call: Call, scope, receive, send, headers, name) -> None:
        entry = await self._authenticate(call, scope, headers)
        call.record = False
        name = name.removeprefix("models/")
        infos = [m for m in self._visible_models(entry) if m.name == name]
        if not infos:
            raise GatewayError(NOT_FOUND, "model_not_found", f"The model '{name}' does not exist.")
        body = json.loads(ADAPTERS[call.protocol].render_models(infos))
        for list_key in ("data", "models"):
            if isinstance(body.get(list_key), list) and body[list_key]:
                body = body[list_key][0]
                break
        await self._respond(send, 200, json.dumps(body).encode(), call)

    def _visible_models(self, entry) -> list[ModelInfo]:
        auth = entry.auth
        snapshot = self.state.nodes
        served = snapshot.models(auth.organization_id) if snapshot else set()
        out = []
        for name in sorted(served):
            if not auth.model_allowed(name):
                continue
            info = self.state.catalog.get(name)
            if info is not None and not info.enabled:
                continue
            nodes = snapshot.for_model(name, auth.organization_id)
            ctx = max((n.context_window or 0 for n in nodes), default=0)
            out.append(
                ModelInfo(
                    name=name,
                    display_name=info.display_name if info else name,
                    context_window=ctx or (info.context_window if info else 0),
                    kind=info.kind if info else "chat",
                    created=info.created if info else 0,
                )
            )
        return out

    def _parse(self, call: Call, data, scope, headers, path_model) -> CallRequest:
        return ADAPTERS[call.protocol].parse_call(
            call.endpoint,
            data,
            path_model=path_model,
            query=scope.get("query_string") or b"",
            headers=headers,
        )

    async def _count(self, call: Call, scope, receive, send, headers, path_model) -> None:
        await self._authenticate(call, scope, headers)
        data = await self._read_json(call, receive, headers)
        adapter = ADAPTERS[call.protocol]
        call.model = _safe_model(adapter.count_model(data, path_model))
        self._check_model(call, call.model)
        body = adapter.count_body(data, path_model)
        call.endpoint = "count_tokens"
        await self._respond(send, 200, body, call)

    def _check_model(self, call: Call, model: str) -> None:
        auth = call.entry.auth
        if not auth.model_allowed(model):
            raise GatewayError(
                PERMISSION,
                "model_not_allowed",
                f"This key may not use the model '{model}'.",
                param="model",
            )

    async def _generate(self, call: Call, scope, receive, send, headers, path_model) -> None:
        entry = await self._authenticate(call, scope, headers)
        if path_model is not None:
            call.model = _safe_model(path_model)
        data = await self._read_json(call, receive, headers)
        if call.model is None and isinstance(data, dict):
            call.model = _safe_model(data.get("model"))
        req = self._parse(call, data, scope, headers, path_model)
        call.model = _safe_model(req.model)
        call.stream = req.stream
        call.endpoint = req.endpoint
        self._check_model(call, req.model)
        await self._serve(call, entry, req, headers, receive, send)

    # --- serving ---------------------------------------------------------

    def _chain(self, call: Call, req: CallRequest):
        """The models to try, in order, with their candidate nodes."""
        auth = call.entry.auth
        snapshot = self.state.nodes
        info = self.state.catalog.get(req.model)
        if info is not None and not info.enabled:
            raise GatewayError(
                NOT_FOUND, "model_not_found", f"The model '{req.model}' is disabled.", param="model"
            )
        names = [req.model]
        if info is not None:
            names += [m for m in info.fallbacks if m != req.model and auth.model_allowed(m)]
        chain = []
        for name in names:
            nodes = snapshot.for_model(name, auth.organization_id) if snapshot else ()
            if nodes:
                chain.append((name, nodes))
        if chain:
            return chain
        if info is None:
            raise GatewayError(
                NOT_FOUND,
                "model_not_found",
                f"The model '{req.model}' does not exist or is not served here.",
                param="model",
            )
        raise GatewayError(
            OVERLOADED,
            "no_healthy_node",
            f"No healthy node can serve '{req.model}' right now; retry shortly.",
            headers=[("retry-after", "1")],
        )

    def _budget(self, req: CallRequest, nodes) -> int:
        """The call's output budget; the node gets it as max_tokens."""
        if req.endpoint in _EMBEDDING_ENDPOINTS:
            return 0
        ctx = max((n.context_window or 0 for n in nodes), default=0)
        if not ctx:
            info = self.state.catalog.get(req.model)
            ctx = info.context_window if info else 0
        prompt = req.prompt_tokens_estimate
        if ctx and prompt >= ctx:
            raise GatewayError(
                INVALID_REQUEST,
                "context_length_exceeded",
                f"This model's maximum context length is {ctx} tokens; the prompt has "
                f"about {prompt}.",
                param="messages",
            )
        if req.max_output_tokens is not None:
            budget = req.max_output_tokens
            if ctx and prompt + budget > ctx:
                raise GatewayError(
                    INVALID_REQUEST,
                    "context_length_exceeded",
                    f"This model's maximum context length is {ctx} tokens; the prompt "
                    f"(about {prompt}) plus max_tokens ({budget}) exceeds it.",
                    param="max_tokens",
                )
            return budget
        budget = self.default_max_tokens
        if ctx:
            budget = min(budget, ctx - prompt)
        req.body["max_tokens"] = budget
        return budget

    def _worst_case(self, call: Call, chain, req: CallRequest, budget: int, ts: float):
        """(price of each model, worst-case amount over the chain)."""
        auth = call.entry.auth
        prices = {}
        worst = 0
        prompt = req.prompt_tokens_estimate
        for name, _ in chain:
            price = self.state.price(name, auth.currency, auth.organization_id, ts)
            prices[name] = price
            if price is None:
                continue
            # Prompt tokens at the dearer of input and cache-write prices.
            if price.cache_write_per_mtok > price.input_per_mtok:
                tokens = (0, 0, prompt, budget)
            else:
                tokens = (prompt, 0, 0, budget)
            worst = max(worst, rate(tokens, price, self._discount(call, price)))
        return prices, worst

    def _discount(self, call: Call, price) -> int:
        return 1_000_000 if price.organization_id is not None else call.entry.discount_ppm

    async def _admit(self, call: Call, amount: int, tokens: int) -> bool:
        """Reserve ``amount`` and count the rate limits, atomically; False when
        the key has no caps or limits at all (nothing to settle later)."""
        from gateway_bridge.limits import plan

        auth = call.entry.auth
        now_ts = time.time()
        cached = self._plans.get(auth.key_id)
        if cached is not None and cached[0] is auth and now_ts < cached[1]:
            planned = cached[2]
        else:
            planned = plan(auth, datetime.fromtimestamp(now_ts, UTC))
            # Valid until the earliest period end (a new day gets new buckets).
            ends = [c.resets_at for c in planned[0] if c.resets_at]
            valid = min([*ends, now_ts + 60.0])
            if len(self._plans) > 100_000:
                self._plans.clear()
            self._plans[auth.key_id] = (auth, valid, planned)
        caps, rates = planned
        if not caps and not rates:
            return False
        try:
            admission = await self.limits.admit(
                auth,
                datetime.fromtimestamp(now_ts, UTC),
                call.request_id,
                amount,
                tokens,
                hold_seconds=self.hold_seconds,
                planned=planned,
            )
        except GatewayError:
            raise
        except Exception:
            # The limits store is down: fail closed rather than let spend run unchecked.
            logger.exception("gateway: the limits store failed")
            raise GatewayError(
                OVERLOADED,
                "limits_unavailable",
                "Spend limits cannot be checked right now; retry shortly.",
                headers=[("retry-after", "1")],
            ) from None
        call.headers_out.extend((k.encode(), str(v).encode()) for k, v in admission.headers)
        return True

    async def _serve(self, call, entry, req: CallRequest, headers, receive, send) -> None:
        chain = self._chain(call, req)
        budget = self._budget(req, chain[0][1])
        ts = time.time()
        prices, amount = self._worst_case(call, chain, req, budget, ts)
        cache_ttl = 0
        ckey = None
        if req.deterministic and req.endpoint not in _EMBEDDING_ENDPOINTS:
            cache_ttl = response_cache.request_ttl(headers, entry.auth.response_cache_seconds)
        if cache_ttl:
            ckey = response_cache.cache_key(
                entry.auth.organization_id, req.model, req.upstream_path, req.body
            )
            hit = await self.cache.get(ckey)
            if hit is not None:
                self.metrics.response_cache_hits += 1
                await self._serve_cached(call, req, hit, prices.get(req.model), send)
                return
            self.metrics.response_cache_misses += 1
            call.headers_out.append((b"x-gateway-cache", b"miss"))
        reserved = await self._admit(call, amount, req.prompt_tokens_estimate + budget)
        price = None
        try:
            served_model = await self._forward(call, req, chain, receive, send, ckey, cache_ttl)
            price = prices.get(served_model)
        finally:
            if reserved:
                if call.usage is _NO_USAGE or price is None:
                    cost = 0
                else:
                    cost = rate(
                        (call.usage.input, call.usage.cache_read, call.usage.cache_write,
                         call.usage.output),
                        price,
                        self._discount(call, price),
                    )  # fmt: skip
                tokens = call.usage.prompt_total + call.usage.output
                if call.usage is _NO_USAGE:
                    await self.limits.store.release(call.request_id)
                else:
                    await self.limits.store.settle(call.request_id, cost, tokens)

    async def _serve_cached(self, call: Call, req: CallRequest, hit: dict, price, send) -> None:
        upstream = hit["response"]
        u = hit["usage"]
        usage = TokenUsage(
            input=0, cache_read=u["prompt"], cache_write=0, output=u["output"], reasoning=0
        )
        call.cache_status = "response_hit"
        call.headers_out.append((b"x-gateway-cache", b"hit"))
        cost = (
            rate((0, usage.cache_read, 0, usage.output), price, self._discount(call, price))
            if price
            else 0
        )
        reserved = await self._admit(call, cost, usage.prompt_total + usage.output)
        call.usage = usage
        if reserved:
            await self.limits.store.settle(call.request_id, cost, usage.prompt_total + usage.output)
        adapter = req.response
        if not req.stream:
            await self._respond(send, 200, adapter.render(upstream, usage, req.model), call)
            return
        # Replay the cached answer as a stream: one delta per choice, then the end.
        await self._start_stream(call, adapter, send)
        parts = [adapter.stream_start(req.model)]
        for chunk in answers.chunks_of(upstream, req.endpoint):
            parts.append(adapter.stream_chunk(chunk, req.model))
        call.ttft = time.perf_counter() - call.t0
        usage_chunk = {
            "id": upstream.get("id", ""),
            "object": "chat.completion.chunk",
            "created": upstream.get("created", 0),
            "model": req.model,
            "choices": [],
            "usage": upstream.get("usage"),
        }
        parts.append(adapter.stream_chunk(usage_chunk, req.model))
        parts.append(adapter.stream_end(usage, req.model))
        await send({"type": "http.response.body", "body": b"".join(parts), "more_body": False})

    async def _forward(self, call: Call, req: CallRequest, chain, receive, send, ckey, cache_ttl):
        """Send the call to a node (retrying, falling back); answer the client.
        Returns the public model that served it."""
        from gateway_bridge.routing import NoCandidates, Outcome, QueueFull, QueueTimeout
        from gateway_bridge.upstream import UpstreamError

        auth = call.entry.auth
        attempt = 0
        link = 0
        exclude: set[int] = set()
        last_error: GatewayError | None = None
        while True:
            model, nodes = chain[link]
            try:
                lease = await self.router.acquire(
                    model,
                    nodes,
                    prefix=req.prefix_text,
                    priority=auth.priority,
                    exclude=frozenset(exclude),
                )
            except NoCandidates:
                link += 1
                if link < len(chain):
                    exclude.clear()
                    self.metrics.fallbacks += 1
                    continue
                raise last_error or GatewayError(
                    OVERLOADED,
                    "no_healthy_node",
                    f"Every node serving '{req.model}' is failing right now; retry shortly.",
                    headers=[("retry-after", "5")],
                ) from None
            except QueueTimeout:
                raise GatewayError(
                    OVERLOADED,
                    "queue_timeout",
                    "Every node serving this model is at capacity; the call waited "
                    f"{settings.GATEWAY_QUEUE_TIMEOUT:g} s for a slot.",
                    headers=[("retry-after", "1")],
                ) from None
            except QueueFull:
                raise GatewayError(
                    RATE_LIMIT,
                    "queue_full",
                    "Too many calls are waiting for this model; retry shortly.",
                    headers=[("retry-after", "1")],
                ) from None
            call.queue_s += lease.queue_seconds
            node = lease.node
            call.node_id = node.node_id
            call.node_name = node.name
            call.model = model
            req.body["model"] = node.upstream_model
            if req.stream:
                req.body["stream"] = True
                req.body["stream_options"] = {"include_usage": True}
            payload = orjson.dumps(req.body)
            up_headers = [("content-type", "application/json"), ("x-request-id", call.request_id)]
            if node.token:
                up_headers.append(("authorization", f"Bearer {node.token}"))
            t_up = time.perf_counter()
            outcome = Outcome.FAILURE
            retry_error: GatewayError | None = None
            try:
                resp = await self.pool.request(
                    "POST", node.base_url, req.upstream_path, payload, up_headers, **self.timeouts
                )
                try:
                    if resp.status == 429 or resp.status >= 500:
                        raw = await resp.read()
                        retry_error = answers.upstream_status_error(resp.status, raw)
                    elif resp.status >= 400:
                        raw = await resp.read()
                        outcome = Outcome.NEUTRAL
                        raise answers.upstream_client_error(resp.status, raw)
                    elif req.stream:
                        done = await self._stream(
                            call, req, resp, receive, send, t_up, ckey, cache_ttl
                        )
                        outcome = Outcome.SUCCESS if done else Outcome.NEUTRAL
                        return model
                    else:
                        raw = await resp.read()
                        call.upstream_s = time.perf_counter() - t_up
                        obj = answers.json_object(raw)
                        if obj is None:
                            retry_error = GatewayError(
                                UPSTREAM, "upstream_invalid_response",
                                "The node answered with something that is not JSON.",
                            )  # fmt: skip
                        else:
                            outcome = Outcome.SUCCESS
                            await self._plain(call, req, obj, send, ckey, cache_ttl)
                            return model
                finally:
                    resp.release()
            except _StreamStarted as started:
                # Bytes reached the client: no retry; the stream already ended with an error frame.
                outcome = Outcome.FAILURE if started.node_fault else Outcome.NEUTRAL
                return model
            except _Retry as retry:
                retry_error = retry.error
            except UpstreamError as exc:
                retry_error = answers.upstream_exception_error(exc)
            finally:
                lease.release(outcome)
                self.metrics.node_outcomes[(node.name, outcome.name.lower())] += 1
                if call.upstream_s is None:
                    call.upstream_s = time.perf_counter() - t_up
            # A failure before anything reached the client: retry elsewhere.
            last_error = retry_error
            attempt += 1
            if attempt > self.retries:
                raise retry_error
            self.metrics.retries += 1
            exclude.add(node.node_id)
            delay = self.backoff * (2 ** (attempt - 1))
            await asyncio.sleep(delay * (0.5 + random.random()))  # noqa: S311 - jitter

    async def _plain(self, call, req: CallRequest, obj: dict, send, ckey, cache_ttl) -> None:
        adapter = req.response
        usage = adapter.usage_of(obj)
        if usage is None:
            usage = TokenUsage(input=req.prompt_tokens_estimate, output=answers.output_tokens(obj))
        call.usage = usage
        if usage.cache_read:
            call.cache_status = "prefix_hit"
        body = adapter.render(obj, usage, req.model)
        await self._respond(send, 200, body, call)
        if ckey and cache_ttl:
            await self.cache.put(
                ckey,
                {"response": obj, "usage": {"prompt": usage.prompt_total, "output": usage.output}},
                cache_ttl,
            )

    async def _start_stream(self, call: Call, adapter, send) -> None:
        headers = [
            (b"content-type", adapter.stream_content_type.encode()),
            (b"cache-control", b"no-cache"),
            (b"x-request-id", call.request_id.encode()),
            *call.headers_out,
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

    async def _stream(self, call, req, resp, receive, send, t_up, ckey, cache_ttl) -> bool:
        """Relay a streamed answer. Returns True when it ran to its end; raises
        _StreamStarted when it broke after bytes reached the client, and
        UpstreamError / GatewayError (retryable) when it broke before."""
        from gateway_bridge.upstream import UpstreamError

        adapter = req.response
        events = resp.sse().__aiter__()
        # The first event decides: before it nothing has reached the client.
        try:
            first = await events.__anext__()
        except StopAsyncIteration:
            first = b"[DONE]"
        if first == b"[DONE]":
            raise _Retry(
                GatewayError(
                    UPSTREAM, "upstream_empty_stream", "The node ended the stream at once."
                )
            )
        chunk = answers.json_object(first)
        if chunk is None:
            raise _Retry(
                GatewayError(
                    UPSTREAM,
                    "upstream_invalid_response",
                    "The node streamed something that is not JSON.",
                )
            )
        await self._start_stream(call, adapter, send)
        texts: list[str] = []
        usage = None
        disconnected = asyncio.Event()

        async def watch():
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected.set()
                    resp.abort()
                    return

        watcher = asyncio.create_task(watch())
        collected: list[dict] = [] if ckey and cache_ttl else None
        try:
            try:
                out = adapter.stream_start(req.model)
                while True:
                    u = chunk.get("usage")
                    if u:
                        usage = from_openai(u)
                    choices = chunk.get("choices")
                    if choices:
                        for choice in choices:
                            answers.collect_text(choice, texts)
                        if call.ttft is None:
                            call.ttft = time.perf_counter() - call.t0
                    if collected is not None:
                        collected.append(chunk)
                    piece = adapter.stream_chunk(chunk, req.model)
                    if piece:
                        out = out + piece if out else piece
                    if out:
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                        out = b""
                    data = await events.__anext__()
                    if data == b"[DONE]":
                        break
                    chunk = answers.json_object(data)
                    if chunk is None:
                        raise GatewayError(
                            UPSTREAM,
                            "upstream_invalid_response",
                            "The node streamed something that is not JSON.",
                        )
            except StopAsyncIteration:
                pass  # the node closed a well-formed stream without [DONE]
            except (UpstreamError, GatewayError, OSError) as exc:
                call.upstream_s = time.perf_counter() - t_up
                if disconnected.is_set() or isinstance(exc, OSError):
                    self._bill_partial(call, req, usage, texts)
                    self.metrics.disconnects += 1
                    call.status = 499
                    call.error_type = "client_disconnected"
                    raise _StreamStarted(node_fault=False) from None
                err = (
                    exc if isinstance(exc, GatewayError) else answers.upstream_exception_error(exc)
                )
                self._bill_partial(call, req, usage, texts)
                call.status = err.status
                call.error_type = err.code
                with contextlib.suppress(OSError):
                    await send(
                        {
                            "type": "http.response.body",
                            "body": adapter.stream_error(err),
                            "more_body": False,
                        }
                    )
                raise _StreamStarted(node_fault=True) from None
            call.upstream_s = time.perf_counter() - t_up
            if usage is None:
                usage = TokenUsage(
                    input=req.prompt_tokens_estimate, output=count_tokens("".join(texts))
                )
            call.usage = usage
            if usage.cache_read:
                call.cache_status = "prefix_hit"
            try:
                await send(
                    {
                        "type": "http.response.body",
                        "body": adapter.stream_end(usage, req.model),
                        "more_body": False,
                    }
                )
            except OSError:
                self.metrics.disconnects += 1
            if collected is not None:
                await self.cache.put(
                    ckey,
                    {
                        "response": answers.assemble(collected, req.endpoint),
                        "usage": {"prompt": usage.prompt_total, "output": usage.output},
                    },
                    cache_ttl,
                )
            return True
        finally:
            watcher.cancel()

    def _bill_partial(self, call: Call, req: CallRequest, usage, texts) -> None:
        """What a broken or abandoned stream cost: the node's usage if it came,
        else the prompt estimate and the tokens streamed so far (by the
        documented tokenizer rule) — never zero, never the whole budget."""
        if usage is not None:
            call.usage = usage
        else:
            call.usage = TokenUsage(
                input=req.prompt_tokens_estimate, output=count_tokens("".join(texts))
            )

    # --- answering --------------------------------------------------------

    async def _respond(self, send, status: int, body: bytes, call: Call) -> None:
        call.status = status
        headers = [
            *_JSON,
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", call.request_id.encode()),
            *call.headers_out,
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _fail(self, call: Call, err: GatewayError, send) -> None:
        call.status = err.status
        call.error_type = err.code
        self.metrics.errors[err.code] += 1
        adapter = ADAPTERS.get(call.protocol, openai)
        status, body = adapter.error_response(err)
        call.status = status
        for name, value in err.headers:
            call.headers_out.append((name.lower().encode(), str(value).encode()))
        # The client may be gone, or a response may have started already.
        with contextlib.suppress(OSError, RuntimeError):
            await self._respond(send, status, body, call)

    def _finish(self, call: Call) -> None:
        elapsed = time.perf_counter() - call.t0
        upstream = call.upstream_s
        overhead = max(0.0, elapsed - (upstream or 0.0) - call.queue_s)
        self.metrics.observe_call(
            call.protocol, call.endpoint, call.status, call.stream, elapsed, call.ttft, overhead
        )
        if call.record and call.entry is not None:
            self.emitter.emit(usage_event(call, elapsed, overhead))

    async def _metrics(self, headers: dict, send) -> None:
        token = settings.GATEWAY_METRICS_TOKEN
        if token and headers.get("authorization", "") != f"Bearer {token}":
            body = b"metrics need a bearer token\n"
            status = 401
        else:
            body = self.metrics.render().encode()
            status = 200
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _Retry(Exception):
    """A node failure before anything reached the client: try another node."""

    def __init__(self, error: GatewayError):
        self.error = error


class _StreamStarted(Exception):
    def __init__(self, node_fault: bool):
        self.node_fault = node_fault

"""The hot path: one call from the client's bytes to the node and back.

``Gateway.handle`` is an ASGI callable for the paths the bridge owns. It
composes the stages of ``gateway_bridge.pipeline``, a module each:

    route      method + path → protocol, endpoint, action, model in the path
    auth       the key (cached), the client's address (trusted proxies), the
               key's IP allowlist and expiry
    body       read with the size limit, parse JSON, the adapter's parse_call
    fair       a large body takes one of its organization's slots before it is
               read and is validated in a parse worker first (fair admission)
    admit      model rules, fallback chain, output budget, worst-case cost
               (one discount rule), reservation and rate limits
    cached     answer from the response cache
    forward    route to a node or vendor channel (tiers, affinity, bounded load,
               breakers, priority queue), a credential of its key pool, the
               channel's protocol (native pass-through or a vendor dialect),
               retry elsewhere while nothing reached the client
    native     a channel of the client's own protocol: bytes in, bytes out
    relay      plain and streamed answers, disconnects, partial billing
    local      the model list and token counts (no node)
    account    the key's own balance, limits and spend (reads, off the loop)
    stored     the Responses API's stored responses (previous_response_id,
               GET / DELETE /v1/responses/{id}), in a TTL store

then settles the actual cost; ``pipeline.record`` hands one usage event to
the emitter, observes the metrics and writes the access line. The per-call
state is ``pipeline.call.Call``. Nothing here blocks the event loop or writes
the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from typing import TYPE_CHECKING

from gateway_bridge import access_log, metrics_http
from gateway_bridge import cache as response_cache
from gateway_bridge.circuits import CircuitReporter
from gateway_bridge.config import GatewayConfig
from gateway_bridge.gauges import register_gauges
from gateway_bridge.keypool import KeyPool
from gateway_bridge.keyshare import SharedCredentials
from gateway_bridge.limits import Limits, RedisLimitStore, apply_local_credit, build_store
from gateway_bridge.metrics import GatewayMetrics
from gateway_bridge.metrics_dir import MetricsDirectory
from gateway_bridge.pipeline import (
    account,
    admit,
    attribution,
    auth,
    body,
    cached,
    fair,
    forward,
    local,
    relay,
    route,
    stored,
)
from gateway_bridge.pipeline.call import Call, Disconnected, safe_model
from gateway_bridge.pipeline.record import Recorder
from gateway_bridge.protocols.base import INTERNAL, CallRequest, GatewayError
from gateway_bridge.routing import Router
from gateway_bridge.spool_slot import open_spool
from gateway_bridge.state import GatewayState
from gateway_bridge.upstreams import UpstreamPool
from inference_node.facade import why_not_public

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from gateway_bridge.asgi import Receive, Scope, Send
    from gateway_bridge.circuits import CircuitReporter as Circuits
    from gateway_bridge.emitter import UsageEmitter
    from gateway_bridge.limits import LimitStore
    from gateway_bridge.state import KeyEntry

    # A route's action: (call, scope, receive, send, headers, the path's model).
    Action = Callable[[Call, Scope, Receive, Send, dict[str, str], str | None], Awaitable[None]]

logger = logging.getLogger(__name__)

# How often a process writes its metrics for the host's scrapes (and before each).
METRICS_PUBLISH_SECONDS = 1.0


def _caches(config: GatewayConfig) -> tuple[response_cache.ResponseCache, response_cache.TtlStore]:
    """The response cache and the Responses API's stored responses, each on
    its own Redis role (in process without one)."""
    cache = response_cache.ResponseCache(config.response_cache_entries, config.cache_redis_url)
    responses = response_cache.TtlStore(
        "resp",
        config.responses_max_entries,
        config.responses_retention_seconds,
        url=config.responses_redis_url,
        max_bytes=config.responses_max_bytes,
        max_entry_bytes=config.responses_max_entry_bytes,
    )
    return cache, responses


class Gateway:
    """The gateway bridge of one process: its caches, router, limits, emitter
    and metrics, and ``handle``, which runs a call through the pipeline."""

    def __init__(
        self,
        *,
        emitter: UsageEmitter | None = None,
        limits: LimitStore | None = None,
        circuits: Circuits | None = None,
        metrics_dir: str | None = None,
        config: GatewayConfig | None = None,
    ) -> None:
        self.config = config = config if config is not None else GatewayConfig.from_settings()
        self.state = GatewayState(config.key_cache)
        self.metrics = GatewayMetrics(max_models=config.metrics_max_models)
        # The host's shared metrics (opened on start; None: this process alone).
        self._metrics_path = metrics_dir if metrics_dir is not None else config.metrics_dir
        self.metrics_dir: MetricsDirectory | None = None
        self._metrics_task: asyncio.Task[None] | None = None
        self.router = Router(config.routing)
        # Circuit openings and closings go to the audit trail (the Errors page).
        self.circuits = circuits if circuits is not None else CircuitReporter()
        self.router.on_transition = self.circuits.report
        # A tenant's node is reached at addresses checked on every connect (SSRF).
        self.pool = UpstreamPool(address_guard=why_not_public)
        # Credentials of the channels' key pools: cooling, refused, breakers, limits.
        self.keys = KeyPool(self.router.config)
        self.keys.on_refused = self.state.report_refused_credential
        self.limits = Limits(limits if limits is not None else build_store(config.limits))
        if isinstance(self.limits.store, RedisLimitStore):
            # Vendor keys' limits and rests counted by every process together.
            self.keys.shared = SharedCredentials(
                self.limits.store.client, lease_seconds=config.timeouts.total_timeout
            )
        self._emitter = emitter
        self._spool_lock_fd: int | None = None
        self.cache, self.responses = _caches(config)
        self.trusted = auth.trusted_proxies(config.trusted_proxies, logger)
        self.max_body = config.max_body_bytes
        # Large bodies: per-organization slots, validated off the loop (pipeline.fair).
        self.large = fair.LargeBodies(
            config.large_body_bytes,
            config.large_body_concurrency,
            config.parse_workers,
        )
        self._make_stages(config)
        self._started = False
        self._start_lock: asyncio.Lock | None = None
        # What each route's action runs (bound once, not per call).
        self._actions = self._bind_actions()
        register_gauges(self)

    def _make_stages(self, config: GatewayConfig) -> None:
        """The stages that are components, each made once with what it needs."""
        # Stage 4: the chain, budget and worst case, the reservation (owning the key plans).
        self.admission = admit.Admission(
            self.state,
            self.limits,
            hold_seconds=config.hold_seconds,
            default_max_tokens=config.default_max_tokens,
        )
        # Stage 5: channels, credentials, tries and their retry policy.
        self.forwarding = forward.Forwarding(
            self.router,
            self.keys,
            self.pool,
            self.metrics,
            self,
            timeouts=config.timeouts.as_keywords(),
            retries=config.retries,
            backoff=config.retry_backoff_seconds,
        )
        # The last stage: the usage event, the metrics, the access line.
        self.recorder = Recorder(self.metrics, self.state, lambda: self.emitter, access_log.finish)

    def _bind_actions(self) -> dict[str, Action]:
        return {
            route.GENERATE: self._generate,
            route.COUNT: functools.partial(local.count, self),
            route.MODELS: functools.partial(local.models, self),
            route.MODEL: functools.partial(local.model, self),
            route.ACCOUNT: functools.partial(account.handle, self),
            route.STORED: functools.partial(stored.stored, self),
        }

    # --- lifecycle --------------------------------------------------------

    @property
    def started_emitter(self) -> UsageEmitter | None:
        """The usage emitter when one was made (``emitter`` makes it), else None."""
        return self._emitter

    @property
    def emitter(self) -> UsageEmitter:
        if self._emitter is None:
            # deferred: kombu (the emitter's) is costly to import; a gateway
            # given its emitter (tests, the benchmarks) never needs it
            from gateway_bridge.emitter import UsageEmitter

            spool, self._spool_lock_fd, journal = open_spool(
                self.config.spool_dir, self.config.usage_journal
            )
            self._emitter = UsageEmitter(
                None,
                spool,
                max_batch=self.config.emit_max_batch,
                max_delay=self.config.emit_max_delay,
                journal=journal,
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
            # Connected (and, on Sentinel, the primary found) before the first
            # call, not by it under its 0.25 s per-command deadline.
            warm = getattr(self.limits.store, "warm", None)
            if warm is not None:
                await warm()
            self.emitter  # noqa: B018 - open the spool now, replaying what a previous run left
            self._open_metrics_dir()
            self._started = True

    def _open_metrics_dir(self) -> None:
        directory = MetricsDirectory(self._metrics_path)
        try:
            directory.open()
            directory.write(self.metrics.snapshot())  # counted from the first scrape on
        except OSError:
            logger.exception(
                "gateway: cannot use the metrics directory %s; /metrics shows this process only",
                self._metrics_path,
            )
            return
        self.metrics_dir = directory
        self._metrics_task = asyncio.get_running_loop().create_task(self._publish_metrics())

    async def _publish_metrics(self) -> None:
        """Every second: this process's snapshot, for the host's scrapes."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(METRICS_PUBLISH_SECONDS)
            directory = self.metrics_dir
            if directory is None:
                return
            try:
                await loop.run_in_executor(None, directory.write, self.metrics.snapshot())
            except Exception:
                logger.exception("gateway: writing the metrics snapshot failed")

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        if self._metrics_task is not None:
            self._metrics_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._metrics_task
            self._metrics_task = None
        if self.metrics_dir is not None:
            # The last counters, for the next scrape to archive.
            try:
                await loop.run_in_executor(None, self.metrics_dir.close, self.metrics.snapshot())
            except Exception:
                logger.exception("gateway: writing the last metrics snapshot failed")
            self.metrics_dir = None
        await self.state.close()
        await self.pool.close()
        await self.cache.close()
        await self.responses.close()
        await self.limits.store.close()
        self.large.close()
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
            apply_local_credit(self.limits.store, int(org), int(delta))

    # --- ASGI entry -------------------------------------------------------

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._started:
            await self.start()
        path = scope["path"]
        method = scope["method"]
        headers: dict[str, str] = {}
        for k, v in scope["headers"]:
            headers[k.decode("latin-1").lower()] = v.decode("latin-1")
        if path == "/metrics":
            await metrics_http.serve(self, headers, send)
            return
        where = route.resolve(path, headers, scope.get("query_string") or b"", method)
        call = Call(where.protocol, where.endpoint, headers.get("traceparent"))
        send = self.recorder.sending(call, send)
        self.metrics.in_flight += 1
        try:
            if method != where.method:
                call.record = False
                raise route.refusal(where, method, path)
            await self._actions[where.action](call, scope, receive, send, headers, where.model)
        except GatewayError as err:
            await relay.fail(self, call, err, send)
        except Disconnected:
            call.status = 499
            call.error_type = call.error_type or "client_disconnected"
        except Exception:
            logger.exception(
                "gateway: unexpected error in %s %s (%s)", method, path, call.request_id
            )
            await relay.fail(
                self,
                call,
                GatewayError(
                    INTERNAL, "internal_error", "The gateway failed to handle the request."
                ),
                send,
            )
        finally:
            self.metrics.in_flight -= 1
            self.recorder.finish(call)

    # --- actions ------------------------------------------------------------

    async def _generate(
        self,
        call: Call,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        path_model: str | None,
    ) -> None:
        entry = await auth.authenticate(self.state, self.trusted, call, scope, headers)
        call.client_headers = headers
        if path_model is not None:
            call.model = safe_model(path_model)
        ticket = self.large.ticket(entry)
        try:
            raw = await body.read_raw(receive, headers, self.max_body, large=ticket)
            if ticket.claimed:  # refused in a parse worker when it is invalid
                await self.large.check(call, raw, scope, headers, path_model)
            data = body.loads(raw)
            if call.model is None and isinstance(data, dict):
                call.model = safe_model(data.get("model"))
            req = body.parse(call, data, scope, headers, path_model, raw)
            attribution.attribute(call, data, headers)
        finally:
            ticket.release()
        call.model = safe_model(req.model)
        call.stream = req.stream
        call.endpoint = req.endpoint
        admit.check_model(call, req.model)
        await stored.prepare(self, call, req)
        await self._serve(call, entry, req, headers, receive, send)

    async def _serve(
        self,
        call: Call,
        entry: KeyEntry,
        req: CallRequest,
        headers: dict[str, str],
        receive: Receive,
        send: Send,
    ) -> None:
        """Admit the call, answer it from the cache or a node, settle its cost."""
        admission = self.admission
        chain = admission.chain(call, req)
        budget = admission.budget(req, chain[0][1])
        prices, amount = admission.worst_case(call, chain, req, budget, time.time())
        ckey: str | None = None
        cache_ttl = 0
        if req.deterministic:
            ckey, cache_ttl, hit = await cached.lookup(self, call, req, headers)
            if hit is not None:
                await cached.serve(self, call, req, hit, prices.get(req.model), send)
                return
        reserved = await admission.reserve(call, amount, req.prompt_tokens_estimate + budget)
        price = None
        try:
            served_model = await self.forwarding.forward(
                call, req, chain, receive, send, ckey, cache_ttl
            )
            price = prices.get(served_model)
        except BaseException:
            if reserved:
                await admission.settle(call, price)
            raise
        if reserved:
            # The event went to the emitter (and its journal) with the answer's
            # last bytes (``Recorder.sending``); when no last bytes went out
            # (the client left), it goes now, before the settle's round trip to
            # the limits store, so a process killed during that round trip
            # still has it on disk.
            self.recorder.emit(call)
            await admission.settle(call, price)

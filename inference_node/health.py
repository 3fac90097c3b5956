"""Probing nodes: ``/health``, ``/v1/models`` and ``/metrics`` of every node at
once (asyncio + aiohttp, each request under a timeout), then recording what was
seen and flipping a node's health after enough probes in a row.

A probe succeeds when ``/health`` and ``/v1/models`` both answer 2xx (and the
latter with a model list). ``/metrics`` is optional: 404 just means the node
has none, and a broken one never fails the probe. Error texts are written here,
never copied from exceptions, so they name no host, port or token: they are
shown even for shared platform nodes whose address tenants must not learn."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.facade import AuditEvent, audit_record
from inference_node.metrics import NodeLoad, node_load, recent_hit_rate
from inference_node.models import Node, NodeHealth, NodeStatus
from inference_node.selectors import invalidate_routing_snapshot

logger = logging.getLogger(__name__)
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_DISCOVERED_MODELS = 200
PROBED_STATUSES = (NodeStatus.ACTIVE, NodeStatus.DRAINING)


@dataclass(frozen=True)
class ProbeTarget:
    node_id: int
    base_url: str
    token: str = field(default="", repr=False)

    @classmethod
    def of(cls, node: Node) -> ProbeTarget:
        return cls(node_id=node.pk, base_url=node.base_url, token=node.token)


@dataclass(frozen=True)
class ProbeResult:
    node_id: int
    ok: bool
    probed_at: datetime
    latency_ms: float | None = None  # round trip of /health
    error: str = ""
    # [{"id": ..., "max_model_len": ...}]; None when /v1/models gave no list.
    models: tuple[dict, ...] | None = None
    load: NodeLoad | None = None  # None when /metrics is absent or unreadable
    metrics: str = "absent"  # "ok", "absent" (404) or "error"


@dataclass(frozen=True)
class HealthChange:
    node_id: int
    name: str
    before: str
    after: str


@dataclass(frozen=True)
class ProbeRound:
    results: tuple[ProbeResult, ...]
    changes: tuple[HealthChange, ...]

    @property
    def ok(self) -> int:
        return sum(r.ok for r in self.results)


class _ProbeError(Exception):
    """A failed request, with a message safe to show."""


# --- the probes (no database) -------------------------------------------------------


async def _get(session: aiohttp.ClientSession, url: str, target: ProbeTarget, path: str):
    headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
    try:
        async with session.get(url, headers=headers, allow_redirects=False) as resp:
            body = bytearray()
            async for chunk in resp.content.iter_chunked(65536):
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    raise _ProbeError(f"{path} answered more than {MAX_BODY_BYTES} bytes")
            return resp.status, bytes(body)
    except _ProbeError:
        raise
    except TimeoutError:
        raise _ProbeError(f"{path}: no answer within the timeout") from None
    except aiohttp.ClientConnectorError as exc:
        refused = isinstance(exc.os_error, ConnectionRefusedError)
        raise _ProbeError(
            "cannot connect (connection refused)" if refused else "cannot connect"
        ) from None
    except aiohttp.ServerDisconnectedError:
        raise _ProbeError(f"{path}: the server closed the connection") from None
    except aiohttp.ClientError as exc:
        raise _ProbeError(f"{path}: {type(exc).__name__}") from None


def _status_error(path: str, status: int) -> _ProbeError:
    hint = " (check the node's token)" if status in (401, 403) else ""
    return _ProbeError(f"{path} answered HTTP {status}{hint}")


def _discovered(body: bytes) -> tuple[dict, ...]:
    try:
        data = json.loads(body)
    except ValueError:
        raise _ProbeError("/v1/models did not answer JSON") from None
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise _ProbeError("/v1/models answered no model list")
    out = []
    for item in items[:MAX_DISCOVERED_MODELS]:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            length = item.get("max_model_len")
            ok_length = isinstance(length, int) and not isinstance(length, bool) and length > 0
            out.append({"id": item["id"][:200], "max_model_len": length if ok_length else None})
    return tuple(out)


async def probe_node(
    session: aiohttp.ClientSession, target: ProbeTarget, *, timeout: float
) -> ProbeResult:
    """One node's probe: the three requests run at once, each under ``timeout``."""
    base = target.base_url.rstrip("/")
    started = time.perf_counter()
    health_ms: list[float] = []

    async def health():
        status, _ = await _get(session, f"{base}/health", target, "/health")
        health_ms.append((time.perf_counter() - started) * 1000)
        if not 200 <= status < 300:
            raise _status_error("/health", status)

    async def models():
        status, body = await _get(session, f"{base}/v1/models", target, "/v1/models")
        if not 200 <= status < 300:
            raise _status_error("/v1/models", status)
        return _discovered(body)

    async def metrics():
        status, body = await _get(session, f"{base}/metrics", target, "/metrics")
        if status in (404, 405):
            return None
        if not 200 <= status < 300:
            raise _status_error("/metrics", status)
        return node_load(body.decode("utf-8", "replace"))

    async def timed(coro):
        return await asyncio.wait_for(coro, timeout)

    outcomes = await asyncio.gather(
        timed(health()), timed(models()), timed(metrics()), return_exceptions=True
    )
    now = timezone.now()
    health_out, models_out, metrics_out = outcomes
    for out in (health_out, models_out, metrics_out):
        if isinstance(out, BaseException) and not isinstance(out, (_ProbeError, TimeoutError)):
            raise out
    if isinstance(metrics_out, NodeLoad):
        load, metrics_state = metrics_out, "ok"
    elif metrics_out is None:
        load, metrics_state = None, "absent"
    else:
        load, metrics_state = None, "error"
    latency = round(health_ms[0], 2) if health_ms else None
    errors = [_message(o) for o in (health_out, models_out) if isinstance(o, BaseException)]
    return ProbeResult(
        node_id=target.node_id,
        ok=not errors,
        probed_at=now,
        latency_ms=latency,
        error="; ".join(dict.fromkeys(errors))[:500],
        models=None if isinstance(models_out, BaseException) else models_out,
        load=load,
        metrics=metrics_state,
    )


def _message(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer within the timeout"
    return str(exc)


async def probe_targets(
    targets: Sequence[ProbeTarget], *, timeout: float, concurrency: int = 50
) -> list[ProbeResult]:
    """Probe all ``targets`` concurrently (at most ``concurrency`` at a time)."""
    if not targets:
        return []
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency * 3, force_close=True)
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=client_timeout) as session:

        async def one(target):
            async with gate:
                try:
                    return await probe_node(session, target, timeout=timeout)
                except Exception as exc:  # one odd node must not end the round
                    logger.exception("probe of node %s failed unexpectedly", target.node_id)
                    return ProbeResult(
                        node_id=target.node_id,
                        ok=False,
                        probed_at=timezone.now(),
                        error=f"probe failed ({type(exc).__name__})",
                    )

        return list(await asyncio.gather(*(one(t) for t in targets)))


def run_probes(
    targets: Sequence[ProbeTarget], *, timeout: float | None = None
) -> list[ProbeResult]:
    """Synchronous entry point (Celery task, console "test now")."""
    return asyncio.run(
        probe_targets(
            targets,
            timeout=float(timeout or settings.NODE_PROBE_TIMEOUT_SECONDS),
            concurrency=settings.NODE_PROBE_CONCURRENCY,
        )
    )


# --- recording (database) -------------------------------------------------------------


def record_probe(result: ProbeResult) -> tuple[Node | None, HealthChange | None]:
    """Store one probe's outcome on its node and flip its health when the run
    of failures (``NODE_UNHEALTHY_AFTER``) or successes (``NODE_HEALTHY_AFTER``)
    is long enough. A node of unknown health turns healthy on its first success.
    Each flip is an audit event (``node.healthy`` / ``node.unhealthy``) by
    "system"; a shared node's has no organization (it shows in the admin)."""
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(pk=result.node_id).first()
        if node is None:  # deleted while it was being probed
            return None, None
        before = node.health
        node.last_probe_at = result.probed_at
        node.last_latency_ms = result.latency_ms
        if result.models is not None:
            node.discovered_models = list(result.models)
        if result.ok:
            node.consecutive_successes += 1
            node.consecutive_failures = 0
            node.last_seen_at = result.probed_at
            node.last_error = ""
            _apply_load(node, result)
            if before == NodeHealth.UNKNOWN or (
                before == NodeHealth.UNHEALTHY
                and node.consecutive_successes >= settings.NODE_HEALTHY_AFTER
            ):
                node.health = NodeHealth.HEALTHY
        else:
            node.consecutive_failures += 1
            node.consecutive_successes = 0
            node.last_error = result.error
            if (
                before != NodeHealth.UNHEALTHY
                and node.consecutive_failures >= settings.NODE_UNHEALTHY_AFTER
            ):
                node.health = NodeHealth.UNHEALTHY
        change = None
        if node.health != before:
            node.health_changed_at = result.probed_at
            change = HealthChange(node.pk, node.name, before, node.health)
            audit_record(
                actor=None,
                action=f"node.{node.health}",
                target=node,
                organization=node.organization,
                params={
                    "from": before,
                    "to": node.health,
                    "consecutive_failures": node.consecutive_failures,
                    "consecutive_successes": node.consecutive_successes,
                    "error": node.last_error,
                },
            )
        node.save()
    if change is not None:
        transaction.on_commit(invalidate_routing_snapshot)
    return node, change


def _apply_load(node: Node, result: ProbeResult) -> None:
    load = result.load
    if result.metrics == "error":
        return  # keep the last figures; the probe itself was fine
    node.metrics_available = load is not None
    if load is None:
        node.running = node.waiting = node.kv_cache_usage = None
        node.prefix_cache_queries = node.prefix_cache_hits = node.prefix_cache_hit_rate = None
        return
    node.prefix_cache_hit_rate = recent_hit_rate(
        node.prefix_cache_queries, node.prefix_cache_hits, load
    )
    node.running, node.waiting, node.kv_cache_usage = (
        load.running,
        load.waiting,
        load.kv_cache_usage,
    )
    node.prefix_cache_queries, node.prefix_cache_hits = (
        load.prefix_cache_queries,
        load.prefix_cache_hits,
    )


def probe_nodes(nodes: Iterable[Node] | None = None) -> ProbeRound:
    """Probe every active and draining node (or just ``nodes``) and record it."""
    if nodes is None:
        nodes = Node.objects.filter(status__in=PROBED_STATUSES).only("pk", "base_url", "token")
    targets = [ProbeTarget.of(n) for n in nodes]
    results = run_probes(targets)
    changes = []
    for result in results:
        _node, change = record_probe(result)
        if change is not None:
            changes.append(change)
    return ProbeRound(results=tuple(results), changes=tuple(changes))


# --- circuit breakers (reported by the gateways) ---------------------------------------

CIRCUIT_ACTIONS = {"open": "node.circuit_opened", "closed": "node.circuit_closed"}


def record_circuit_events(transitions: list[dict]) -> int:
    """Store the circuit-breaker transitions a gateway reported (see
    ``gateway_bridge.circuits``) as audit events ``node.circuit_opened`` /
    ``node.circuit_closed`` by "system", dated when the gateway saw them.
    A transition already stored (same id: a redelivered batch), of a deleted
    node, or malformed is skipped. Returns how many were stored."""
    stored = 0
    for t in transitions:
        try:
            action = CIRCUIT_ACTIONS[t["state"]]
            node_id = int(t["node_id"])
            event_id = str(t["id"])[:64]
            at = datetime.fromtimestamp(float(t["at"]), tz=UTC)
        except (KeyError, TypeError, ValueError):
            logger.warning("circuit transition skipped: malformed %r", t)
            continue
        node = Node.objects.filter(pk=node_id).first()
        if node is None:
            continue
        with transaction.atomic():
            seen = AuditEvent.objects.filter(
                action=action, target_type="node", target_id=str(node.pk), params__id=event_id
            )
            if seen.exists():
                continue
            audit_record(
                actor=None,
                action=action,
                target=node,
                organization=node.organization,
                at=at,
                params={
                    "id": event_id,
                    "gateway": str(t.get("gateway", ""))[:200],
                    "reason": str(t.get("reason", ""))[:40],
                    "calls": int(t.get("calls") or 0),
                    "errors": int(t.get("errors") or 0),
                },
            )
        stored += 1
    return stored

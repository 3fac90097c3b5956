"""The probes themselves (network, no database): what one round asks each
node, by its health check, all nodes at once (asyncio + aiohttp, each request
under a timeout).

* ``health`` (self-hosted servers): ``/health``, ``/v1/models`` and
  ``/metrics``. The probe succeeds when the first two answer 2xx (the latter
  with a model list). ``/metrics`` is optional: 404 just means the node has
  none, and a broken one never fails the probe. It is read from shared
  platform nodes only: a tenant's node is asked for its health and model
  list, nothing else (no metric values read from whatever a tenant points
  at; ``metrics`` is then ``"skipped"``).
* ``models`` (vendors): the vendor's model list with the channel's first
  active key and the vendor's auth header (``inference_node.vendor_probe``).
  A 401 / 403 fails the probe and names the key's hint; disabling a key is the
  gateway's call (``credential_refused``), never a probe's. A channel with no
  active key fails without a request.

Error texts are written here, never copied from exceptions, so they name no
host, port or key: they are shown even for shared platform nodes whose address
tenants must not learn. A tenant's node under ``NODE_ALLOW_PRIVATE_URLS=False``
(``addresses.guarded``) is reached through ``PublicOnlyResolver``, so a name
that resolved to a public address when saved cannot be turned on this
deployment's own network later, and an IP literal is checked again before
each probe (the rules may have changed since it was saved): a refused node
is not contacted at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime
from urllib.parse import urlsplit

import aiohttp
from django.conf import settings
from django.utils import timezone

from inference_node import vendor_probe
from inference_node.addresses import (
    PrivateAddressRefused,
    PublicOnlyResolver,
    guarded,
    literal_refusal,
)
from inference_node.metrics import NodeLoad, node_load
from inference_node.models import CredentialStatus, HealthCheck, Node, NodeKind
from inference_node.selectors import ALL_KEYS_DISABLED, NO_API_KEY

logger = logging.getLogger(__name__)
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_DISCOVERED_MODELS = vendor_probe.MAX_DISCOVERED_MODELS
SKIPPED = object()  # /metrics not asked (a tenant's node)
REFUSED_ADDRESS = "refused: the node's address is not a public address"


@dataclass(frozen=True)
class ProbeTarget:
    node_id: int
    base_url: str
    # The node's token, or (a vendor channel) its first active key's secret.
    token: str = field(default="", repr=False)
    kind: str = NodeKind.OPENAI_COMPATIBLE
    api_path: str = ""
    health_check: str = HealthCheck.HEALTH
    key_hint: str = ""
    # Why a vendor channel has no key to probe with ("" when it has one).
    no_key: str = ""
    # Reach it only at public addresses (a tenant's node, unless staff allow private ones).
    guarded: bool = False
    # A tenant's node: asked for health and models only, never /metrics.
    tenant: bool = False

    @classmethod
    def of(cls, node: Node) -> ProbeTarget:
        active = getattr(node, "active_keys", None)
        if active is None:
            active = list(
                node.credentials.filter(status=CredentialStatus.ACTIVE).order_by("id")[:1]
            )
        first = active[0] if active else None
        no_key = ""
        if node.is_vendor and first is None:
            no_key = ALL_KEYS_DISABLED if node.credentials.exists() else NO_API_KEY
        if node.is_vendor:
            token, key_hint = (first.secret, first.secret_hint) if first else ("", "")
        else:  # a self-hosted node: its own token, else its first key
            token = node.token or (first.secret if first else "")
            key_hint = ""
        return cls(
            node_id=node.pk,
            base_url=node.base_url,
            token=token,
            kind=node.kind,
            api_path=node.api_path,
            health_check=node.health_check,
            key_hint=key_hint,
            no_key=no_key,
            guarded=guarded(node.organization_id),
            tenant=node.organization_id is not None,
        )


@dataclass(frozen=True)
class ProbeResult:
    node_id: int
    ok: bool
    probed_at: datetime
    latency_ms: float | None = None  # round trip of /health
    error: str = ""
    # [{"id": ..., "max_model_len": ...}]; None when /v1/models gave no list.
    models: tuple[dict, ...] | None = None
    load: NodeLoad | None = None  # None when /metrics is absent, unreadable or not read
    # "ok", "absent" (404), "error", or "skipped" (a tenant's node: not asked)
    metrics: str = "absent"

    def relayed(self) -> ProbeResult:
        """What "test now" shows a tenant about its own node: health (ok, latency,
        a message written here) and the model ids, nothing else it answered."""
        models = None
        if self.models is not None:
            models = tuple({"id": m["id"]} for m in self.models if "id" in m)
        return replace(self, models=models, load=None)


class _ProbeError(Exception):
    """A failed request, with a message safe to show."""


async def _get(session: aiohttp.ClientSession, url: str, path: str, headers: dict[str, str]):
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
        if isinstance(exc.os_error, PrivateAddressRefused):
            raise _ProbeError("refused: the host now resolves to a non-public address") from None
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
        return vendor_probe.parse_models(NodeKind.OPENAI_COMPATIBLE, body, "/v1/models")
    except ValueError as exc:
        raise _ProbeError(str(exc)) from None


def _load_of(metrics_out: object) -> tuple[NodeLoad | None, str]:
    """What the ``/metrics`` request gave: the node's load, and how it went
    (``ok``, ``skipped`` for a tenant's node, ``absent``, ``error``)."""
    if metrics_out is SKIPPED:
        return None, "skipped"
    if isinstance(metrics_out, NodeLoad):
        return metrics_out, "ok"
    if metrics_out is None:
        return None, "absent"
    return None, "error"


async def probe_node(
    session: aiohttp.ClientSession, target: ProbeTarget, *, timeout: float
) -> ProbeResult:
    """One node's probe (see the module's docstring for what each health check
    asks); a self-hosted node's three requests run at once, each under ``timeout``."""
    if target.health_check != HealthCheck.HEALTH:
        return await _probe_vendor(session, target, timeout=timeout)
    base = target.base_url.rstrip("/")
    started = time.perf_counter()
    health_ms: list[float] = []
    headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}

    async def health():
        status, _ = await _get(session, f"{base}/health", "/health", headers)
        health_ms.append((time.perf_counter() - started) * 1000)
        if not 200 <= status < 300:
            raise _status_error("/health", status)

    async def models():
        status, body = await _get(session, f"{base}/v1/models", "/v1/models", headers)
        if not 200 <= status < 300:
            raise _status_error("/v1/models", status)
        return _discovered(body)

    async def metrics():
        if target.tenant:
            return SKIPPED
        status, body = await _get(session, f"{base}/metrics", "/metrics", headers)
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
    load, metrics_state = _load_of(metrics_out)
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


async def _probe_vendor(
    session: aiohttp.ClientSession, target: ProbeTarget, *, timeout: float
) -> ProbeResult:
    """A vendor channel's probe: its model list with its first active key."""
    if not target.token:
        return ProbeResult(
            node_id=target.node_id,
            ok=False,
            probed_at=timezone.now(),
            error=target.no_key or NO_API_KEY,
        )
    url, path, headers = vendor_probe.models_request(
        target.kind, target.base_url, target.api_path, target.token
    )
    started = time.perf_counter()
    try:
        status, body = await asyncio.wait_for(_get(session, url, path, headers), timeout)
        latency = round((time.perf_counter() - started) * 1000, 2)
        if status in (401, 403):
            key = f"API key {target.key_hint}" if target.key_hint.startswith("…") else "API key"
            raise _ProbeError(f"{path} answered HTTP {status}: the vendor refused the {key}")
        if not 200 <= status < 300:
            raise _status_error(path, status)
        try:
            models = vendor_probe.parse_models(target.kind, body, path)
        except ValueError as exc:
            raise _ProbeError(str(exc)) from None
    except (_ProbeError, TimeoutError) as exc:
        return ProbeResult(
            node_id=target.node_id, ok=False, probed_at=timezone.now(), error=_message(exc)[:500]
        )
    return ProbeResult(
        node_id=target.node_id,
        ok=True,
        probed_at=timezone.now(),
        latency_ms=latency,
        models=models,
        metrics="absent",
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
    client_timeout = aiohttp.ClientTimeout(total=timeout)

    def session(**connector_options) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=concurrency * 3, force_close=True, **connector_options
        )
        return aiohttp.ClientSession(connector=connector, timeout=client_timeout)

    async with AsyncExitStack() as stack:
        plain = await stack.enter_async_context(session())
        public_only = plain
        if any(t.guarded for t in targets):
            public_only = await stack.enter_async_context(session(resolver=PublicOnlyResolver()))

        async def one(target):
            if target.guarded and literal_refusal(urlsplit(target.base_url).hostname or ""):
                return ProbeResult(
                    node_id=target.node_id,
                    ok=False,
                    probed_at=timezone.now(),
                    error=REFUSED_ADDRESS,
                )
            async with gate:
                try:
                    chosen = public_only if target.guarded else plain
                    return await probe_node(chosen, target, timeout=timeout)
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

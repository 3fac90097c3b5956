"""Stage 5, forward: route the call to a channel, choose a credential of its
key pool, speak the channel's protocol, and retry while nothing has reached
the client.

For each try the router picks a node (a channel) of the current model of the
chain: the lowest priority tier with a channel able to take it (breaker,
an unused credential left in its pool), then prefix affinity, bounded load
and the priority queue inside the tier. The key pool (``gateway_bridge.
keypool``) picks the credential by weight. Then, by the channel's kind
(``gateway_bridge.vendors``):

* **native** — the channel speaks the client's protocol (Anthropic on
  Anthropic, Gemini on Gemini, the Responses API on the OpenAI API):
  ``pipeline.native`` sends the client's bytes (model id rewritten) and
  relays the vendor's bytes;
* **OpenAI** — an OpenAI-compatible node or the OpenAI API: the OpenAI pivot
  body goes out, the answer is rendered by the client's response adapter, as
  always;
* **translated** — the dialect writes the pivot in the channel's protocol and
  turns its answer back into OpenAI chat objects for the client's adapter.
  What the pivot could not carry (``CallRequest.untranslatable``) is a 400
  naming it; what a translation leaves out without changing what is asked
  (``CallRequest.dropped``: a coding agent's default hosted tools, fields
  the pivot does not carry) is named in the answer's ``x-gateway-dropped``
  header.

Failures before anything reached the client: a vendor's 401 / 403 takes that
credential out of the pool (reported once, to be disabled with an audit
event; never retried in a loop) and a 429 cools it for the vendor's
``retry-after``: the call moves to the pool's next credential at once, and
these switches do not count as retries (each credential is tried at most
once per call). A connect error, a 5xx, a self-hosted node's 429, an answer
that is not JSON or a stream that ends before its first event moves the call
to another node after a jittered exponential backoff, up to
``GATEWAY_RETRIES`` times; when no node of a model is left (every channel of
every tier), the next model of the fallback chain is tried. A 4xx from the
channel is the client's error and is not retried. Once bytes reached the
client there is no retry. Every try's outcome feeds the channel's and the
credential's circuit breakers.

A key pinned to a node (``ApiKey.pinned_node_id``, a staff load test of one
channel) has that node as its only candidate (``admit.pinned_chain``): its
retries go to the same node, with no fallback model; when its circuit is
open the call is a 503 naming the node.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import TYPE_CHECKING

from gateway_bridge import answers
from gateway_bridge.keypool import retry_after_seconds
from gateway_bridge.pipeline import admit, native, relay
from gateway_bridge.pipeline.call import Call, Retry, StreamStarted
from gateway_bridge.pipeline.channel_request import is_native, request_for, say_dropped
from gateway_bridge.protocols.base import (
    OVERLOADED,
    RATE_LIMIT,
    UPSTREAM,
    CallRequest,
    GatewayError,
)
from gateway_bridge.routing import NoCandidates, Outcome, QueueFull, QueueTimeout
from gateway_bridge.upstreams import UpstreamError
from gateway_bridge.vendors import dialect_for

if TYPE_CHECKING:
    from gateway_bridge.asgi import Receive, Send
    from gateway_bridge.keypool import KeyPool
    from gateway_bridge.metrics import GatewayMetrics
    from gateway_bridge.pipeline.admit import Chain
    from gateway_bridge.pipeline.parts import RelayParts
    from gateway_bridge.routing import Lease, Router
    from gateway_bridge.upstreams import UpstreamPool
    from gateway_bridge.upstreams.response import UpstreamResponse
    from gateway_bridge.vendors.base import Dialect
    from inference_node.facade import RoutableCredential, RoutableNode

_NO_EXCLUSIONS: frozenset[int] = frozenset()
_OUTCOME_NAMES = {outcome: outcome.name.lower() for outcome in Outcome}
# Credential switches (a refused or cooling key) per call, beyond the retries.
MAX_KEY_SWITCHES = 16


class Forwarding:
    """This stage of one gateway: made once with the router, the channels' key
    pools, the upstream pool, the timeouts and the retry policy (``retries``
    after a failure before anything reached the client, ``backoff`` seconds
    doubled each time); ``out`` is what relays the answers (the metrics and
    the response cache). ``forward`` runs one call's tries (``_Forward``)."""

    def __init__(
        self,
        router: Router,
        keys: KeyPool,
        pool: UpstreamPool,
        metrics: GatewayMetrics,
        out: RelayParts,
        *,
        timeouts: dict[str, float | None],
        retries: int,
        backoff: float,
    ) -> None:
        self.router = router
        self.keys = keys
        self.pool = pool
        self.metrics = metrics
        self.out = out
        self.timeouts = timeouts
        self.retries = retries
        self.backoff = backoff

    async def forward(
        self,
        call: Call,
        req: CallRequest,
        chain: Chain,
        receive: Receive,
        send: Send,
        ckey: str | None,
        cache_ttl: int,
    ) -> str:
        """Send the call to a channel (retrying, falling back); answer the
        client. Returns the public model that served it."""
        return await _Forward(self, call, req, chain, receive, send, ckey, cache_ttl).run()


class _Try:
    """One try of a call on one channel with one credential, and how it went:
    the outcome the channel's breaker records, the credential's when the key
    (not the channel) failed, and the error to retry with (None: answered)."""

    __slots__ = ("error", "key_failed", "key_outcome", "outcome")

    def __init__(self) -> None:
        self.outcome = Outcome.FAILURE
        self.key_outcome: Outcome | None = None  # as ``outcome`` unless the key failed
        self.key_failed = False
        self.error: GatewayError | None = None

    def key_refused(self, error: GatewayError) -> None:
        """The vendor refused or throttled the credential: the pool's next one."""
        self.outcome, self.key_outcome, self.key_failed = Outcome.NEUTRAL, Outcome.FAILURE, True
        self.error = error


class _Forward:
    """One call's way through the channels: which tries it made, which it may
    still make (the retry and fallback policy around ``_try``)."""

    __slots__ = (
        "attempt", "cache_ttl", "call", "chain", "ckey", "exclude", "gw", "last_error",
        "link", "opened", "receive", "req", "send", "spent", "switches",
    )  # fmt: skip

    def __init__(
        self,
        gw: Forwarding,
        call: Call,
        req: CallRequest,
        chain: Chain,
        receive: Receive,
        send: Send,
        ckey: str | None,
        cache_ttl: int,
    ) -> None:
        self.gw = gw
        self.call = call
        self.req = req
        self.chain = chain
        self.receive = receive
        self.send = send
        self.ckey = ckey
        self.cache_ttl = cache_ttl
        self.attempt = 0  # retries made (key switches not counted)
        self.switches = 0  # credential switches made
        self.link = 0  # the fallback chain's model now tried
        self.exclude: set[int] = set()  # nodes that failed this call (this model)
        self.spent: set[int] = set()  # credentials that failed this call: never tried again
        self.last_error: GatewayError | None = None
        self.opened = False  # the last try opened its credential's circuit

    def usable(self, node: RoutableNode) -> bool:
        return self.gw.keys.usable(node, self.spent)

    async def run(self) -> str:
        """Try channels until one answers; the public model that served it."""
        keys = self.gw.keys
        req = self.req
        while True:
            model, lease = await self._lease()
            node = lease.node
            cred = keys.pick(node, self.spent, req.prompt_tokens_estimate)
            if cred is None:  # the pool emptied since the router looked: next channel
                lease.release(Outcome.NEUTRAL)
                self.exclude.add(node.node_id)
                self._switch_key()
                continue
            if keys.shared is None or cred.credential_id is None:
                tried = await self._try(model, lease, cred)  # this process's view alone
            else:
                held = f"{self.call.request_id}.{self.attempt}.{self.switches}"
                wait = await keys.acquire(cred, req.prompt_tokens_estimate, held)
                if wait:  # every process together is at the credential's limits
                    lease.release(Outcome.NEUTRAL)
                    self.last_error = _key_at_limit(wait)
                    self._switch_key()
                    continue
                self.opened = False
                try:
                    tried = await self._try(model, lease, cred)
                finally:
                    await keys.finished(cred, held, self.opened)
            if tried.error is None:
                return model
            # A failure before anything reached the client: retry elsewhere.
            self.last_error = tried.error
            if tried.key_failed and cred.credential_id is not None:
                # The key failed, not the channel: the pool's next key at once.
                self.spent.add(cred.credential_id)
                self.switches += 1
                if self.switches <= MAX_KEY_SWITCHES:
                    continue
            await self._retry_later(node, tried.error)

    def _switch_key(self) -> None:
        """Count one switch to another channel for want of a credential; past
        ``MAX_KEY_SWITCHES`` the call fails."""
        self.switches += 1
        if self.switches > MAX_KEY_SWITCHES:
            raise self.last_error or GatewayError(
                OVERLOADED, "no_healthy_node", "No channel can take this call right now."
            )

    async def _retry_later(self, node: RoutableNode, error: GatewayError) -> None:
        """Another try on another node after a jittered exponential backoff,
        or ``error`` when the retries are spent."""
        gw = self.gw
        self.attempt += 1
        if self.attempt > gw.retries:
            raise error
        gw.metrics.retries += 1
        self.exclude.add(node.node_id)
        delay = gw.backoff * (2 ** (self.attempt - 1))
        await asyncio.sleep(delay * (0.5 + random.random()))  # noqa: S311 - jitter

    async def _lease(self) -> tuple[str, Lease]:
        """A node of the chain's current model (the next model when none of
        this one is left), and the model."""
        gw = self.gw
        auth = self.call.entry.auth
        while True:
            model, nodes = self.chain[self.link]
            try:
                lease = await gw.router.acquire(
                    model,
                    nodes,
                    prefix=self.req.prefix_text,
                    priority=auth.priority,
                    exclude=frozenset(self.exclude) if self.exclude else _NO_EXCLUSIONS,
                    usable=self.usable,
                )
            except NoCandidates:
                pinned = auth.pinned_node_id
                if pinned is not None:  # a pinned key's one node: its circuit is open
                    raise self.last_error or admit.pinned_refusal(pinned) from None
                self.link += 1
                if self.link < len(self.chain):
                    self.exclude.clear()
                    gw.metrics.fallbacks += 1
                    continue
                raise (
                    self.last_error or self._resting() or _no_healthy_node(self.req.model)
                ) from None
            except QueueTimeout:
                raise _queue_timeout(gw.router.config.queue_timeout) from None
            except QueueFull:
                raise _queue_full() from None
            self.call.queue_s += lease.queue_seconds
            return model, lease

    def _resting(self) -> GatewayError | None:
        """A 429 naming the wait when the chain's channels are out only because
        their vendor keys rest (their limits, a vendor's 429); else None."""
        keys = self.gw.keys
        waits = [w for _, nodes in self.chain for n in nodes if (w := keys.resting(n)) is not None]
        return _key_at_limit(min(waits)) if waits else None

    async def _try(self, model: str, lease: Lease, cred: RoutableCredential) -> _Try:
        """One try on the leased node with ``cred``: the client answered, or
        the error to retry with; every try's outcome feeds the breakers."""
        gw, call, req = self.gw, self.call, self.req
        node = lease.node
        call.node_id = node.node_id
        call.node_name = node.name
        call.credential_id = cred.credential_id
        call.cost_price = node.cost
        call.model = model
        dialect = dialect_for(node.kind)
        native_call = is_native(req, node)
        try:
            path, payload = request_for(req, node, dialect, native_call)
        except GatewayError:
            lease.release(Outcome.NEUTRAL)
            raise
        if req.dropped:
            say_dropped(call, req, native_call)
        up_headers = [
            ("content-type", "application/json"),
            ("x-request-id", call.request_id),
            ("traceparent", call.trace.header),
            *dialect.auth_headers(cred.secret, call.client_headers),
        ]
        keys = gw.keys
        probe = keys.taken(cred, req.prompt_tokens_estimate)
        t_up = time.perf_counter()
        tried = _Try()
        try:
            resp = await gw.pool.request(
                "POST", node.base_url, path, payload, up_headers,
                public_only=node.public_only, **gw.timeouts,
            )  # fmt: skip
            try:
                await self._answer(tried, resp, cred, dialect, native_call, t_up)
            finally:
                resp.release()
        except StreamStarted as started:
            # Bytes reached the client: no retry; the stream already ended with an error frame.
            tried.outcome = Outcome.FAILURE if started.node_fault else Outcome.NEUTRAL
            tried.error = None
        except Retry as retry:
            tried.error = retry.error
        except UpstreamError as exc:
            tried.error = answers.upstream_exception_error(exc)
        finally:
            outcome = tried.outcome
            lease.release(outcome)
            self.opened = keys.release(cred, tried.key_outcome or outcome, probe)
            gw.metrics.node_outcomes[(node.name, _OUTCOME_NAMES[outcome])] += 1
            if call.upstream_s is None:
                call.upstream_s = time.perf_counter() - t_up
        return tried

    async def _answer(
        self,
        tried: _Try,
        resp: UpstreamResponse,
        cred: RoutableCredential,
        dialect: Dialect,
        native_call: bool,
        t_up: float,
    ) -> None:
        """The channel's answer to one try: relayed to the client (``tried``
        succeeds or is neutral), or ``tried.error`` set to retry with."""
        status = resp.status
        if (status in (401, 403) and cred.credential_id is not None) or (
            status == 429 or status >= 500
        ):
            await _failed(self.gw, tried, resp, cred, dialect)
        elif status >= 400:
            tried.outcome = Outcome.NEUTRAL
            await self._client_error(status, await resp.read(), dialect, native_call)
        elif native_call:
            if self.req.stream:
                done = await native.stream(
                    self.gw.out, self.call, self.req, resp, dialect, self.receive, self.send, t_up
                )
            else:
                await native.plain(self.gw.out, self.call, self.req, resp, dialect, self.send)
                self.call.upstream_s = time.perf_counter() - t_up
                done = True
            tried.outcome = Outcome.SUCCESS if done else Outcome.NEUTRAL
        elif self.req.stream:
            reader = dialect.stream_reader(self.req.model)
            done = await relay.stream(
                self.gw.out, self.call, self.req, resp, self.receive, self.send, t_up,
                self.ckey, self.cache_ttl, reader,
            )  # fmt: skip
            tried.outcome = Outcome.SUCCESS if done else Outcome.NEUTRAL
        else:
            await self._plain(tried, resp, dialect, t_up)

    async def _client_error(
        self, status: int, raw: bytes, dialect: Dialect, native_call: bool
    ) -> None:
        """A 4xx from the channel: the client's error, never retried."""
        if native_call:
            # Already in the client's own protocol: relayed as it came.
            err = dialect.error_of(status, raw)
            self.call.error_type = err.code
            await relay.respond(self.send, status, raw, self.call)
            return
        raise dialect.translated_error(status, raw)

    async def _plain(
        self, tried: _Try, resp: UpstreamResponse, dialect: Dialect, t_up: float
    ) -> None:
        """A whole (not streamed) answer, turned into an OpenAI chat object."""
        raw = await resp.read()
        self.call.upstream_s = time.perf_counter() - t_up
        obj = answers.json_object(raw)
        if obj is None:
            tried.error = GatewayError(
                UPSTREAM, "upstream_invalid_response",
                "The node answered with something that is not JSON.",
            )  # fmt: skip
            return
        obj, usage = dialect.to_chat(obj, self.req.model)
        tried.outcome = Outcome.SUCCESS
        await relay.plain(
            self.gw.out, self.call, self.req, obj, self.send, self.ckey, self.cache_ttl, usage
        )


async def _failed(
    gw: Forwarding,
    tried: _Try,
    resp: UpstreamResponse,
    cred: RoutableCredential,
    dialect: Dialect,
) -> None:
    """A refused key (401 / 403), a throttled one (429), or a failing channel
    (a self-hosted node's 429, a 5xx): ``tried.error`` to retry with."""
    status = resp.status
    keys = gw.keys
    if status in (401, 403) and cred.credential_id is not None:
        err = dialect.error_of(status, await resp.read())
        keys.refuse(cred, status, err.message)
        tried.key_refused(
            GatewayError(
                UPSTREAM,
                "upstream_auth_failed",
                "The channel's vendor refused its API key, and no other key could take the call.",
            )
        )
    elif status == 429 and cred.credential_id is not None:
        raw = await resp.read()
        await keys.cool_everywhere(cred, retry_after_seconds(resp.headers))
        tried.key_refused(dialect.error_of(status, raw))
    else:
        tried.error = dialect.translated_error(status, await resp.read())


def _key_at_limit(wait: float) -> GatewayError:
    return GatewayError(
        RATE_LIMIT,
        "upstream_key_limit",
        "The channel's vendor key is at its rate or concurrency limit; retry shortly.",
        headers=[("retry-after", str(max(1, math.ceil(wait))))],
    )


def _no_healthy_node(model: str) -> GatewayError:
    return GatewayError(
        OVERLOADED,
        "no_healthy_node",
        f"Every node serving '{model}' is failing right now; retry shortly.",
        headers=[("retry-after", "5")],
    )


def _queue_timeout(waited: float) -> GatewayError:
    return GatewayError(
        OVERLOADED,
        "queue_timeout",
        f"Every node serving this model is at capacity; the call waited {waited:g} s for a slot.",
        headers=[("retry-after", "1")],
    )


def _queue_full() -> GatewayError:
    return GatewayError(
        RATE_LIMIT,
        "queue_full",
        "Too many calls are waiting for this model; retry shortly.",
        headers=[("retry-after", "1")],
    )

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
import random
import time
from typing import TYPE_CHECKING

import orjson
from django.conf import settings

from gateway_bridge import answers
from gateway_bridge.keypool import retry_after_seconds
from gateway_bridge.pipeline import admit, native, relay
from gateway_bridge.pipeline.call import Call, Retry, StreamStarted
from gateway_bridge.pipeline.model_name import rewrite_model
from gateway_bridge.protocols.base import (
    OVERLOADED,
    RATE_LIMIT,
    UPSTREAM,
    CallRequest,
    GatewayError,
    invalid,
)
from gateway_bridge.routing import NoCandidates, Outcome, QueueFull, QueueTimeout
from gateway_bridge.upstreams import UpstreamError
from gateway_bridge.vendors import dialect_for

if TYPE_CHECKING:
    from gateway_bridge.gateway import Gateway

_NO_EXCLUSIONS: frozenset[int] = frozenset()
_OUTCOME_NAMES = {outcome: outcome.name.lower() for outcome in Outcome}
# The pivot's endpoint of a translated call (the client's may be "messages", ...).
PIVOT_ENDPOINTS = {
    "/v1/chat/completions": "chat.completions",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
}
# vLLM's extensions the pivot may carry (an Anthropic prefill): the OpenAI API refuses them.
VLLM_ONLY = ("continue_final_message", "add_generation_prompt")
# The OpenAI protocol's endpoints a channel of the OpenAI API itself (kind
# ``openai``) takes as sent: the pivot would lose what only OpenAI runs (the
# Responses API's client-run tools, encrypted reasoning).
OPENAI_NATIVE = frozenset({"responses"})
# Credential switches (a refused or cooling key) per call, beyond the retries.
MAX_KEY_SWITCHES = 16


def _prefixed(path: str, api_path: str) -> str:
    """``path`` with its first segment (``/v1``, ``/v1beta``) replaced by the
    channel's own API path (GLM: ``/api/paas/v4``)."""
    if not api_path:
        return path
    cut = path.find("/", 1)
    return api_path.rstrip("/") + (path[cut:] if cut > 0 else "")


def _native(req: CallRequest, node, dialect) -> bool:
    """Whether the channel takes the call as sent: it speaks the client's
    protocol (OpenAI's only for the endpoints of ``OPENAI_NATIVE``, on the
    OpenAI API: a compatible server gets the pivot)."""
    if req.protocol != dialect.PROTOCOL:
        return False
    return req.protocol != "openai" or (node.kind == "openai" and req.endpoint in OPENAI_NATIVE)


DROPPED_HEADER = b"x-gateway-dropped"


def _say_dropped(call: Call, req: CallRequest, native_call: bool) -> None:
    """The ``x-gateway-dropped`` header of this try's channel: what the
    translation left out ("; "-separated), none on a native channel."""
    call.headers_out[:] = [h for h in call.headers_out if h[0] != DROPPED_HEADER]
    if req.dropped and not native_call:
        value = "; ".join(req.dropped).encode("ascii", "backslashreplace")
        call.headers_out.append((DROPPED_HEADER, value))


def _request(req: CallRequest, node, dialect, native_call: bool) -> tuple[str, bytes]:
    """(path, body) of one try on ``node``."""
    upstream = node.upstream_model
    if not native_call and req.untranslatable:
        lost = req.untranslatable[0]
        raise invalid(
            f"{lost}: cannot be sent to this model's channel, which "
            f"speaks the {dialect.PROTOCOL} protocol",
            param=lost.partition(":")[0],
            code="unsupported",
        )
    if native_call:
        body = req.client_body or {}
        payload = rewrite_model(req.raw, body, upstream) if "model" in body else req.raw
        path = dialect.native_path(req.endpoint, upstream, req.stream, req.query)
    elif dialect.PROTOCOL == "openai":
        req.body["model"] = upstream
        if req.stream:
            req.body["stream"] = True
            req.body["stream_options"] = {"include_usage": True}
        body = req.body
        if node.kind == "openai" and any(k in body for k in VLLM_ONLY):
            body = {k: v for k, v in body.items() if k not in VLLM_ONLY}
        payload = orjson.dumps(body)
        path = req.upstream_path
    else:
        payload = orjson.dumps(dialect.from_chat(req.body, upstream, req.stream))
        path = dialect.path(
            PIVOT_ENDPOINTS.get(req.upstream_path, req.endpoint), upstream, req.stream
        )
    return _prefixed(path, node.api_path), payload


async def forward(gw: Gateway, call: Call, req: CallRequest, chain, receive, send, ckey, cache_ttl):
    """Send the call to a channel (retrying, falling back); answer the client.
    Returns the public model that served it."""
    auth = call.entry.auth
    keys = gw.keys
    attempt = 0
    switches = 0
    link = 0
    exclude: set[int] = set()
    spent: set[int] = set()  # credentials that failed this call: never tried again

    def usable(node) -> bool:
        return keys.usable(node, spent)

    last_error: GatewayError | None = None
    while True:
        model, nodes = chain[link]
        try:
            lease = await gw.router.acquire(
                model,
                nodes,
                prefix=req.prefix_text,
                priority=auth.priority,
                exclude=frozenset(exclude) if exclude else _NO_EXCLUSIONS,
                usable=usable,
            )
        except NoCandidates:
            pinned = auth.pinned_node_id
            if pinned is not None:  # a pinned key's one node: its circuit is open
                raise last_error or admit.pinned_refusal(pinned) from None
            link += 1
            if link < len(chain):
                exclude.clear()
                gw.metrics.fallbacks += 1
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
        cred = keys.pick(node, spent, req.prompt_tokens_estimate)
        if cred is None:  # the pool emptied since the router looked: next channel
            lease.release(Outcome.NEUTRAL)
            exclude.add(node.node_id)
            switches += 1
            if switches > MAX_KEY_SWITCHES:
                raise last_error or GatewayError(
                    OVERLOADED, "no_healthy_node", "No channel can take this call right now."
                )
            continue
        call.node_id = node.node_id
        call.node_name = node.name
        call.credential_id = cred.credential_id
        call.cost_price = node.cost
        call.model = model
        dialect = dialect_for(node.kind)
        native_call = _native(req, node, dialect)
        try:
            path, payload = _request(req, node, dialect, native_call)
        except GatewayError:
            lease.release(Outcome.NEUTRAL)
            raise
        if req.dropped:
            _say_dropped(call, req, native_call)
        up_headers = [
            ("content-type", "application/json"),
            ("x-request-id", call.request_id),
            ("traceparent", call.trace.header),
            *dialect.auth_headers(cred.secret, call.client_headers),
        ]
        probe = keys.taken(cred, req.prompt_tokens_estimate)
        t_up = time.perf_counter()
        outcome = Outcome.FAILURE
        key_outcome = None  # as outcome unless the key, not the channel, failed
        key_failed = False
        retry_error: GatewayError | None = None
        try:
            resp = await gw.pool.request(
                "POST",
                node.base_url,
                path,
                payload,
                up_headers,
                public_only=node.public_only,
                **gw.timeouts,
            )
            try:
                status = resp.status
                if status in (401, 403) and cred.credential_id is not None:
                    err = dialect.error_of(status, await resp.read())
                    keys.refuse(cred, status, err.message)
                    outcome, key_outcome, key_failed = Outcome.NEUTRAL, Outcome.FAILURE, True
                    retry_error = GatewayError(
                        UPSTREAM,
                        "upstream_auth_failed",
                        "The channel's vendor refused its API key, and no other key could "
                        "take the call.",
                    )
                elif status == 429 and cred.credential_id is not None:
                    raw = await resp.read()
                    keys.cool(cred, retry_after_seconds(resp.headers))
                    outcome, key_outcome, key_failed = Outcome.NEUTRAL, Outcome.FAILURE, True
                    retry_error = dialect.error_of(status, raw)
                elif status == 429 or status >= 500:
                    raw = await resp.read()
                    retry_error = (
                        answers.upstream_status_error(status, raw)
                        if dialect.PROTOCOL == "openai"
                        else dialect.error_of(status, raw)
                    )
                    if retry_error.status < 500 and status >= 500:
                        retry_error = answers.upstream_status_error(status, raw)
                elif status >= 400:
                    raw = await resp.read()
                    outcome = Outcome.NEUTRAL
                    if native_call:
                        # Already in the client's own protocol: relayed as it came.
                        err = dialect.error_of(status, raw)
                        call.error_type = err.code
                        await relay.respond(send, status, raw, call)
                        return model
                    if dialect.PROTOCOL == "openai":
                        raise answers.upstream_client_error(status, raw)
                    raise dialect.error_of(status, raw)
                elif native_call:
                    if req.stream:
                        done = await native.stream(
                            gw, call, req, resp, dialect, receive, send, t_up
                        )
                    else:
                        await native.plain(gw, call, req, resp, dialect, send)
                        call.upstream_s = time.perf_counter() - t_up
                        done = True
                    outcome = Outcome.SUCCESS if done else Outcome.NEUTRAL
                    return model
                elif req.stream:
                    reader = (
                        None if dialect.PROTOCOL == "openai" else dialect.StreamReader(req.model)
                    )
                    done = await relay.stream(
                        gw, call, req, resp, receive, send, t_up, ckey, cache_ttl, reader
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
                        usage = None
                        if dialect.PROTOCOL != "openai":
                            obj, usage = dialect.to_chat(obj, req.model)
                        outcome = Outcome.SUCCESS
                        await relay.plain(gw, call, req, obj, send, ckey, cache_ttl, usage)
                        return model
            finally:
                resp.release()
        except StreamStarted as started:
            # Bytes reached the client: no retry; the stream already ended with an error frame.
            outcome = Outcome.FAILURE if started.node_fault else Outcome.NEUTRAL
            return model
        except Retry as retry:
            retry_error = retry.error
        except UpstreamError as exc:
            retry_error = answers.upstream_exception_error(exc)
        finally:
            lease.release(outcome)
            keys.release(cred, key_outcome or outcome, probe)
            gw.metrics.node_outcomes[(node.name, _OUTCOME_NAMES[outcome])] += 1
            if call.upstream_s is None:
                call.upstream_s = time.perf_counter() - t_up
        # A failure before anything reached the client: retry elsewhere.
        last_error = retry_error
        if key_failed:
            # The key failed, not the channel: the pool's next key at once.
            spent.add(cred.credential_id)
            switches += 1
            if switches <= MAX_KEY_SWITCHES:
                continue
        attempt += 1
        if attempt > gw.retries:
            raise retry_error
        gw.metrics.retries += 1
        exclude.add(node.node_id)
        delay = gw.backoff * (2 ** (attempt - 1))
        await asyncio.sleep(delay * (0.5 + random.random()))  # noqa: S311 - jitter

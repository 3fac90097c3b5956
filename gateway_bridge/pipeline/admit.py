"""Stage 4, admit: may this call run, and what may it cost at worst?

- The key may use the model; the model is enabled; the fallback chain (the
  asked model, then its catalogue fallbacks the key may use) has nodes.
- The output budget: what the client asked for, else the configured default,
  bounded by the context window (the prompt estimate comes from the
  protocol adapter, one rule for every protocol: ``console.kernel.tokens``).
- The worst case over the chain, priced by ``usage.rating`` with its one
  discount rule (``discount_for``: a negotiated price pays full, a list price
  gets the organization's discount), as ingest rates the call afterwards.
- One atomic store operation reserves that amount against every spend cap
  and the prepaid balance and counts the RPM / TPM limits; after the call
  ``settle`` books the actual cost and frees the rest.

``Admission`` is this stage of one gateway, made once with what it works
with (the gateway's state, its limits, the hold and the default output
budget) and owning the key plans' cache: a key's limit plan is cached until
its earliest period ends, so the common case builds no buckets per call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gateway_bridge.limits.plan import PlanCache
from gateway_bridge.pipeline.call import NO_USAGE, Call
from gateway_bridge.protocols.base import (
    INVALID_REQUEST,
    NOT_FOUND,
    OVERLOADED,
    PERMISSION,
    CallRequest,
    GatewayError,
)
from usage.facade import discount_for, rate

if TYPE_CHECKING:
    from gateway_bridge.limits import Limits
    from gateway_bridge.routing import NodeSnapshot
    from gateway_bridge.state import GatewayState
    from inference_node.facade import RoutableNode
    from usage.facade import PriceRow

    # The models to try, in order, with their candidate nodes.
    Chain = list[tuple[str, tuple[RoutableNode, ...]]]

logger = logging.getLogger("gateway_bridge.gateway")

EMBEDDING_ENDPOINTS = frozenset({"embeddings", "embedContent", "batchEmbedContents"})
MEDIA_PARTS = frozenset({"image_url", "input_audio", "file"})


def has_media(body: dict[str, Any]) -> bool:
    """Whether the pivot body's messages carry an image, audio or document part."""
    for message in body.get("messages") or ():
        content = message.get("content") if type(message) is dict else None
        if type(content) is list:
            for part in content:
                if type(part) is dict and part.get("type") in MEDIA_PARTS:
                    return True
    return False


def check_model(call: Call, model: str) -> None:
    """The key (and its sub-account and organization) may use ``model``."""
    if not call.entry.auth.model_allowed(model):
        raise GatewayError(
            PERMISSION,
            "model_not_allowed",
            f"This key may not use the model '{model}'.",
            param="model",
        )


def chain(state: GatewayState, call: Call, req: CallRequest) -> Chain:
    """The models to try, in order, with their candidate nodes."""
    auth = call.entry.auth
    snapshot = state.nodes
    info = state.catalog.get(req.model)
    if info is not None and not info.enabled:
        raise GatewayError(
            NOT_FOUND, "model_not_found", f"The model '{req.model}' is disabled.", param="model"
        )
    if info is not None and info.modality == "text" and has_media(req.body):
        raise GatewayError(
            INVALID_REQUEST,
            "unsupported_media",
            f"The model '{req.model}' takes text only; remove the image or document parts, "
            "or choose a model that takes images.",
            param="messages",
        )
    if auth.pinned_node_id is not None:
        return pinned_chain(call, req, snapshot)
    names = [req.model]
    if info is not None:
        names += [m for m in info.fallbacks if m != req.model and auth.model_allowed(m)]
    out: Chain = []
    for name in names:
        nodes = snapshot.for_model(name, auth.organization_id) if snapshot else ()
        if nodes:
            out.append((name, nodes))
    if out:
        return out
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


def pinned_refusal(node_id: int) -> GatewayError:
    """The 503 of a pinned key's call its node cannot take (down, circuit
    open, not serving the model): no other node or model is tried."""
    return GatewayError(
        OVERLOADED,
        "pinned_node_unavailable",
        f"The key is pinned to node {node_id}, which cannot serve this call "
        "(it does not serve this model, is down or its circuit is open); "
        "a pinned key uses no other node.",
        headers=[("retry-after", "5")],
    )


def pinned_chain(call: Call, req: CallRequest, snapshot: NodeSnapshot | None) -> Chain:
    """A pinned key's one candidate: its node, if the node routes ``req.model``
    now (a vendor channel with its credentials); no fallback model."""
    pinned = call.entry.auth.pinned_node_id
    assert pinned is not None  # only pinned keys come here (chain)
    nodes = snapshot.for_model(req.model, call.entry.auth.organization_id) if snapshot else ()
    nodes = tuple(n for n in nodes if n.node_id == pinned)
    if not nodes:
        raise pinned_refusal(pinned)
    return [(req.model, nodes)]


def budget(
    state: GatewayState, default_max_tokens: int, req: CallRequest, nodes: Sequence[RoutableNode]
) -> int:
    """The call's output budget; the node gets it as max_tokens."""
    if req.endpoint in EMBEDDING_ENDPOINTS:
        return 0
    ctx = max((n.context_window or 0 for n in nodes), default=0)
    if not ctx:
        info = state.catalog.get(req.model)
        ctx = info.context_window if info else 0
    prompt = req.prompt_tokens_estimate
    if ctx and prompt >= ctx:
        raise GatewayError(
            INVALID_REQUEST,
            "context_length_exceeded",
            f"This model's maximum context length is {ctx} tokens; the prompt has about {prompt}.",
            param="messages",
        )
    if req.max_output_tokens is not None:
        out: int = req.max_output_tokens
        if ctx and prompt + out > ctx:
            raise GatewayError(
                INVALID_REQUEST,
                "context_length_exceeded",
                f"This model's maximum context length is {ctx} tokens; the prompt "
                f"(about {prompt}) plus max_tokens ({out}) exceeds it.",
                param="max_tokens",
            )
        return out
    out = default_max_tokens
    if ctx:
        out = min(out, ctx - prompt)
    req.body["max_tokens"] = out
    return out


def cost(call: Call, tokens: tuple[int, int, int, int], price: PriceRow | None) -> int:
    """What ``tokens`` (input, cache read, cache write, output) cost this call's
    organization at ``price`` (0 without a price): ``usage.rating.rate`` with
    the one discount rule, as ingest rates the call afterwards."""
    if price is None:
        return 0
    return rate(tokens, price, discount_for(price, call.entry.discount_ppm))


def worst_case(
    state: GatewayState, call: Call, models: Chain, req: CallRequest, out_budget: int, ts: float
) -> tuple[dict[str, PriceRow | None], int]:
    """(price of each model, worst-case amount over the chain)."""
    auth = call.entry.auth
    price_of = state.price
    prices: dict[str, PriceRow | None] = {}
    worst = 0
    prompt = req.prompt_tokens_estimate
    for name, _ in models:
        price = price_of(name, auth.currency, auth.organization_id, ts)
        prices[name] = price
        if price is None:
            continue
        # Prompt tokens at the dearer of input and cache-write prices.
        if price.cache_write_per_mtok > price.input_per_mtok:
            tokens = (0, 0, prompt, out_budget)
        else:
            tokens = (prompt, 0, 0, out_budget)
        worst = max(worst, cost(call, tokens, price))
    return prices, worst


class Admission:
    """This stage of one gateway: the chain, the budget and the worst case of
    a call (the functions above, on the gateway's state), and its reservation
    in the limits store (``reserve``, then ``settle``)."""

    def __init__(
        self,
        state: GatewayState,
        limits: Limits,
        *,
        hold_seconds: float,
        default_max_tokens: int,
    ) -> None:
        self.state = state
        self.limits = limits
        self.hold_seconds = hold_seconds  # how long a reservation may be held
        self.default_max_tokens = default_max_tokens
        self.plans = PlanCache()

    def chain(self, call: Call, req: CallRequest) -> Chain:
        return chain(self.state, call, req)

    def budget(self, req: CallRequest, nodes: Sequence[RoutableNode]) -> int:
        return budget(self.state, self.default_max_tokens, req, nodes)

    def worst_case(
        self, call: Call, models: Chain, req: CallRequest, out_budget: int, ts: float
    ) -> tuple[dict[str, PriceRow | None], int]:
        return worst_case(self.state, call, models, req, out_budget, ts)

    async def reserve(self, call: Call, amount: int, tokens: int) -> bool:
        """Reserve ``amount`` and count the rate limits, atomically; False when
        the key has no caps or limits at all (nothing to settle later)."""
        auth = call.entry.auth
        now_ts = time.time()
        planned = self.plans.get(auth, now_ts)
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
        call.headers_out += [(k.encode(), v.encode()) for k, v in admission.headers]
        return True

    async def settle(self, call: Call, price: PriceRow | None) -> None:
        """Book what a reserved call actually cost (its usage at ``price``) and
        free the rest of its reservation; release it whole when it used nothing."""
        usage = call.usage
        store = self.limits.store
        try:
            if usage is NO_USAGE:
                await store.release(call.request_id)
                return
            tokens = (usage.input, usage.cache_read, usage.cache_write, usage.output)
            actual = cost(call, tokens, price)
            await store.settle(call.request_id, actual, usage.prompt_total + usage.output)
        except Exception:
            # The limits store failed (a Redis failover): the call was answered and
            # its usage event carries the cost; the reservation holds the worst case
            # until its deadline, so the cap stays safe. Never turn it into a 500.
            logger.warning(
                "gateway: settling %s in the limits store failed", call.request_id, exc_info=True
            )

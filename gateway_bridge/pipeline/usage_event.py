"""The last stage of a call: its usage event, built from the per-call state.

``usage_event`` fills every field of the usage contract
(``usage.facade.UsageEvent``) from what the stages recorded on the call,
once the call is over; the gateway hands the result to the emitter, which
encodes batches of them for the ingest worker. A field added to the contract
is one keyword here (the contract's test fails until it is filled).

The vendor's charge for the call (``upstream_cost``) is rated here, once, by
the one rating rule (``usage.facade.rate``, half up) at the channel's cost
price (``call.cost_price``, set by the forward stage) at full price
(``PPM``): the worker stores it as sent, in the cost price's currency. It
costs nothing for a call without a cost price (0 and "").
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from usage.facade import ENDPOINTS, PPM, UsageEvent, rate

if TYPE_CHECKING:
    from gateway_bridge.state import KeyEntry
    from gateway_bridge.usage_mapping import TokenUsage
    from inference_node.facade import CostPrice

# A key's priority class, as the event's small integer.
PRIORITY_CODES = {"low": 0, "normal": 1, "high": 2}
_fromtimestamp = datetime.fromtimestamp


class CallState(Protocol):
    """What this stage reads of the gateway's per-call state (``Call``)."""

    request_id: str
    started: float  # time.time() when the call arrived
    entry: KeyEntry  # the key cache entry: ``.auth`` is the authenticated key
    model: str | None
    node_id: int | None
    protocol: str
    endpoint: str
    stream: bool
    status: int
    error_type: str
    usage: TokenUsage
    ttft: float | None
    upstream_s: float | None
    queue_s: float
    client_ip: str | None
    cache_status: str
    credential_id: int | None
    cost_price: CostPrice | None  # currency and prices per Mtok
    end_user: str
    tags: dict[str, str]


def usage_event(call: CallState, elapsed: float, overhead: float) -> UsageEvent:
    """The usage event of a finished call that ``elapsed`` seconds in all,
    ``overhead`` of them in the gateway itself. ``call.entry`` is set (only
    authenticated calls are recorded)."""
    auth = call.entry.auth
    u = call.usage
    ttft = call.ttft
    upstream = call.upstream_s
    started = call.started
    price = call.cost_price
    if price is None:
        upstream_cost = 0
        upstream_currency = ""
    else:
        # ``rate`` reads only the per-Mtok prices, which a CostPrice has too.
        tokens = (u.input, u.cache_read, u.cache_write, u.output)
        upstream_cost = rate(tokens, price, PPM)  # type: ignore[arg-type]
        upstream_currency = price.currency
    return UsageEvent(
        request_id=call.request_id,
        started_at=_fromtimestamp(started, UTC),
        finished_at=_fromtimestamp(started + elapsed, UTC),
        organization_id=auth.organization_id,
        sub_account_id=auth.sub_account_id,
        api_key_id=auth.key_id,
        model=call.model or "(unknown)",
        node_id=call.node_id,
        protocol=call.protocol,
        endpoint=call.endpoint if call.endpoint in ENDPOINTS else "chat.completions",
        stream=call.stream,
        status_code=call.status,
        error_type="" if call.status < 400 else (call.error_type or "error")[:64],
        input_tokens=u.input,
        cache_read_tokens=u.cache_read,
        cache_write_tokens=u.cache_write,
        output_tokens=u.output,
        reasoning_tokens=min(u.reasoning, u.output),
        ttft_us=int(ttft * 1e6) if ttft is not None else None,
        latency_us=int(elapsed * 1e6),
        upstream_us=int(upstream * 1e6) if upstream is not None else None,
        overhead_us=int(overhead * 1e6),
        queue_us=int(call.queue_s * 1e6),
        client_ip=call.client_ip,
        priority=PRIORITY_CODES.get(auth.priority, 1),
        cache_status=call.cache_status,
        credential_id=call.credential_id,
        upstream_cost=upstream_cost,
        upstream_currency=upstream_currency,
        end_user=call.end_user,
        tags=call.tags,
        is_test=auth.test_traffic,
    )

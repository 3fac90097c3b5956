"""Answers the gateway gives itself, without a node: the model list, one
model's description, and a prompt's token count (``count_tokens`` /
``countTokens``). Each authenticates like any call and records no usage
event except the token count (which costs nothing)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gateway_bridge.pipeline import admit, auth, body, relay
from gateway_bridge.pipeline.adapters import ADAPTERS
from gateway_bridge.pipeline.call import Call, safe_model
from gateway_bridge.protocols.base import NOT_FOUND, GatewayError, ModelInfo

if TYPE_CHECKING:
    from gateway_bridge.asgi import Receive, Scope, Send
    from gateway_bridge.pipeline.parts import Parts
    from gateway_bridge.state import KeyEntry


def visible_models(gw: Parts, entry: KeyEntry) -> list[ModelInfo]:
    """The models served to the key's organization that the key may use."""
    key = entry.auth
    state = gw.state
    snapshot = state.nodes
    if snapshot is None:
        return []
    served = snapshot.models(key.organization_id)
    out: list[ModelInfo] = []
    for name in sorted(served):
        if not key.model_allowed(name):
            continue
        info = state.catalog.get(name)
        if info is not None and not info.enabled:
            continue
        nodes = snapshot.for_model(name, key.organization_id)
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


async def models(
    gw: Parts,
    call: Call,
    scope: Scope,
    receive: Receive,
    send: Send,
    headers: dict[str, str],
    _model: str | None,
) -> None:
    entry = await auth.authenticate(gw.state, gw.trusted, call, scope, headers)
    call.record = False
    infos = visible_models(gw, entry)
    await relay.respond(send, 200, ADAPTERS[call.protocol].render_models(infos), call)


async def model(
    gw: Parts,
    call: Call,
    scope: Scope,
    receive: Receive,
    send: Send,
    headers: dict[str, str],
    name: str | None,
) -> None:
    entry = await auth.authenticate(gw.state, gw.trusted, call, scope, headers)
    call.record = False
    assert name is not None  # the route names the model
    name = name.removeprefix("models/")
    infos = [m for m in visible_models(gw, entry) if m.name == name]
    if not infos:
        raise GatewayError(
            NOT_FOUND,
            "model_not_found",
            f"The model '{name}' does not exist or you do not have access to it.",
            param="model",
        )
    rendered = json.loads(ADAPTERS[call.protocol].render_models(infos))
    for list_key in ("data", "models"):
        if isinstance(rendered.get(list_key), list) and rendered[list_key]:
            rendered = rendered[list_key][0]
            break
    await relay.respond(send, 200, json.dumps(rendered).encode(), call)


async def count(
    gw: Parts,
    call: Call,
    scope: Scope,
    receive: Receive,
    send: Send,
    headers: dict[str, str],
    path_model: str | None,
) -> None:
    entry = await auth.authenticate(gw.state, gw.trusted, call, scope, headers)
    ticket = gw.large.ticket(entry)  # a large body: a slot, and counted off the loop
    try:
        raw = await body.read_raw(receive, headers, gw.max_body, large=ticket)
        counted = await gw.large.count(call, raw, path_model) if ticket.claimed else None
    finally:
        ticket.release()
    adapter = ADAPTERS[call.protocol]
    if counted is None:
        data = body.loads(raw)
        model, answer = adapter.count_model(data, path_model), None
    else:
        model, answer = counted
    call.model = safe_model(model)
    admit.check_model(call, call.model)
    if answer is None:
        answer = adapter.count_body(data, path_model)
    call.endpoint = "count_tokens"
    await relay.respond(send, 200, answer, call)

"""Stored responses of the Responses API: ``store``, ``previous_response_id``,
``GET`` and ``DELETE /v1/responses/{id}``.

What is kept, per response, under its organization's id: the response object
as the client got it (what ``GET`` shows) and the conversation up to it —
the earlier items, this call's input items, its output items — which a later
``previous_response_id`` continues from (each record holds the whole
conversation: deleting or losing an earlier response does not break a later
one). Instructions are not carried over, as with OpenAI.

Where: ``cache.TtlStore`` under the namespace ``resp``, keyed
``<organization id>:<response id>`` — in Redis when
``GATEWAY_RESPONSES_REDIS_URL`` (by default ``REDIS_URL``) is set (every
gateway process sees every response; they live as long as Redis keeps its
data: with no persistence configured a Redis restart forgets them), else in
this process's LRU, bounded by ``GATEWAY_RESPONSES_MAX_ENTRIES`` and
``GATEWAY_RESPONSES_MAX_BYTES`` (lost on a restart and not shared between
processes). A response over ``GATEWAY_RESPONSES_MAX_ENTRY_BYTES`` is not
stored (retrieving it is a 404). Each expires after
``GATEWAY_RESPONSES_RETENTION_SECONDS`` (30 days by default). The database is
never written.

A response is stored before its last bytes reach the client (``CallRequest.
on_answer``), so a client can continue from it at once — except a stream
passed through to an OpenAI channel, stored as soon as its last event went
out. A stream the client cuts, or that fails, stores nothing. A call passed
through gets the stored items in its ``input`` in place of
``previous_response_id``, which never reaches the vendor (there it would name
the channel's account's responses, not the caller's). Tenancy: every lookup is keyed by the
caller's organization, so another organization's id is a 404 like an unknown
one, and shows nothing.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from gateway_bridge.pipeline import auth, relay
from gateway_bridge.pipeline.call import Call
from gateway_bridge.protocols import responses
from gateway_bridge.protocols.base import NOT_FOUND, CallRequest, GatewayError, dumps

if TYPE_CHECKING:
    from gateway_bridge.asgi import Receive, Scope, Send
    from gateway_bridge.pipeline.parts import Parts

_ID = re.compile(r"^resp_[A-Za-z0-9_-]{1,96}$")


def _key(organization_id: int, response_id: str) -> str:
    return f"{organization_id}:{response_id}"


def _not_found(
    response_id: str, *, param: str | None = None, previous: bool = False
) -> GatewayError:
    shown = response_id if _ID.match(response_id) else "(invalid id)"
    what = "Previous response" if previous else "Response"
    return GatewayError(
        NOT_FOUND,
        "previous_response_not_found" if previous else "response_not_found",
        f"{what} with id '{shown}' not found.",
        param=param,
    )


async def prepare(gw: Parts, call: Call, req: CallRequest) -> None:
    """A Responses call: its id, the conversation it continues, where it is
    stored once answered. Other calls pass through untouched."""
    facts = req.extra.get("responses")
    if facts is None:
        return
    adapter = responses.adapter_of(req)
    adapter.response_id = "resp_" + call.request_id.removeprefix("req_")
    adapter.created_at = int(call.started)
    org = call.entry.auth.organization_id
    previous = facts["previous_response_id"]
    if previous is not None:
        record = await gw.responses.get(_key(org, previous)) if _ID.match(previous) else None
        if record is None:
            raise _not_found(previous, param="previous_response_id", previous=True)
        responses.continue_from(req, record["conversation"])
        if req.client_body is not None:
            _expand_for_vendor(req, record["conversation"])
    if facts["store"]:
        req.on_answer = functools.partial(_save, gw, org, req)


def _expand_for_vendor(req: CallRequest, history: list[dict[str, Any]]) -> None:
    """The body an OpenAI channel gets as sent: the stored items in ``input``
    instead of ``previous_response_id`` (which would name a response of the
    vendor's account, not the caller's), without item ids (items the vendor
    never stored) and without reasoning it cannot read (no encrypted content)."""
    items = [
        {k: v for k, v in item.items() if k != "id"}
        for item in history
        if item.get("type") != "reasoning" or item.get("encrypted_content")
    ]
    client_body = req.client_body or {}  # set: the call is passed through (prepare)
    body = {k: v for k, v in client_body.items() if k != "previous_response_id"}
    body["input"] = [*items, *req.extra["responses"]["input"]]
    req.client_body = body
    req.raw = dumps(body)


async def _save(
    gw: Parts, org: int, req: CallRequest, native: dict[str, Any] | None = None
) -> None:
    """Store the answered response; ``native``: the vendor's own response
    object (a passed-through call), whose id is the one the client saw."""
    adapter = responses.adapter_of(req)
    if native is not None:
        if not isinstance(native.get("id"), str) or not _ID.match(native["id"]):
            return
        adapter.result = native
        output = native.get("output")
        adapter.output = (
            [i for i in output if isinstance(i, dict)] if isinstance(output, list) else []
        )
    if adapter.result is None:
        return
    record = {"response": adapter.result, "conversation": responses.conversation(req)}
    await gw.responses.put(_key(org, adapter.result["id"]), record, gw.responses.max_ttl)


async def stored(
    gw: Parts,
    call: Call,
    scope: Scope,
    receive: Receive,
    send: Send,
    headers: dict[str, str],
    response_id: str | None,
) -> None:
    """``GET /v1/responses/{id}`` (the stored response) and ``DELETE`` (forget it)."""
    entry = await auth.authenticate(gw.state, gw.trusted, call, scope, headers)
    call.record = False
    assert response_id is not None  # the route names the response
    key = _key(entry.auth.organization_id, response_id)
    if scope["method"] == "DELETE":
        if not _ID.match(response_id) or not await gw.responses.delete(key):
            raise _not_found(response_id)
        body = {"id": response_id, "object": "response", "deleted": True}
    else:
        record = await gw.responses.get(key) if _ID.match(response_id) else None
        if record is None:
            raise _not_found(response_id)
        body = record["response"]
    await relay.respond(send, 200, dumps(body), call)

"""Cross-app reactions without cross-app imports.

The apps are layered (see the README's architecture section and the
``[tool.importlinter]`` contracts): ``gateway_bridge`` and ``invoicing`` sit
on ``usage``, which sits on ``inference_node`` and ``accounts``. A lower app
never imports a higher one, and the two top apps never import each other.
When something in one app must make another react, the lower one *fires* a
named hook and the other *connects* a receiver to it in its
``AppConfig.ready()``:

* ``CALLS_INGESTED`` — usage has inserted call records (inside its ingest
  transaction); invoicing debits the prepaid ledger from the totals.
* ``BALANCE_CHANGED`` — the prepaid ledger moved outside usage debits (a
  top-up, a refund, an adjustment), after commit; gateways re-read.
* ``OUTBOUND_EVENT`` — something an organization's own systems may follow
  happened (an alert fired or resolved; an invoice finalized, paid or overdue;
  a credit note issued; a top-up succeeded). Keyword arguments:
  ``organization_id``, ``event_type`` (dotted, e.g. ``"alert.fired"``,
  ``"invoice.paid"``), ``data`` (a JSON-serialisable dict) and ``event_id``
  (a stable string: firing twice with the same id delivers once). The outbound
  webhooks app (``console.features.webhooks``) records it and delivers it to the
  organization's destinations; fire it inside the caller's transaction
  (it is recorded there and delivered after commit).

And when a lower app needs a value that a higher one owns, the owner
*provides* it and the lower app *asks* for it:

* ``PREPAID_BALANCE`` — ``(organization_id) -> int`` micro-units, for the
  gateway's limit counters rebuilt from the database.
* ``KEY_SPEND`` — ``(organization_id=, key_ids=, periods=) -> {key_id:
  {period: micro-units, "life": micro-units}}``: what keys spent, the figures
  the gateway seeds its spend caps from (usage provides it; the keys pages
  draw their spend bars with it).
* ``MODEL_CATALOGUE`` — ``() -> list`` of entries with ``name``,
  ``display_name`` and ``enabled``: the model catalogue (usage provides it;
  the accounts services refuse allow-list entries that are not in it).

Receivers run synchronously, in the order they were connected, in the
caller's thread (and transaction, where the caller holds one). A hook with
no receiver is a no-op; asking for a value nobody provides raises
``LookupError`` so a missing wiring fails loudly instead of reading zero.

This module imports nothing from any app: every app may import it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

CALLS_INGESTED = "usage.calls_ingested"
BALANCE_CHANGED = "invoicing.balance_changed"
OUTBOUND_EVENT = "console.outbound_event"
PREPAID_BALANCE = "invoicing.prepaid_balance"
KEY_SPEND = "usage.key_spend"
MODEL_CATALOGUE = "usage.model_catalogue"

_receivers: dict[str, list[Callable[..., Any]]] = {}
_providers: dict[str, Callable[..., Any]] = {}
_lock = threading.Lock()


def connect(name: str, receiver: Callable[..., Any]) -> None:
    """Call ``receiver(**kwargs)`` whenever ``name`` fires. Connecting the same
    receiver twice is a no-op (``ready()`` may run more than once in tests)."""
    with _lock:
        receivers = _receivers.setdefault(name, [])
        if receiver not in receivers:
            receivers.append(receiver)


def disconnect(name: str, receiver: Callable[..., Any]) -> None:
    with _lock:
        receivers = _receivers.get(name, [])
        if receiver in receivers:
            receivers.remove(receiver)


def fire(name: str, **kwargs: Any) -> None:
    """Run every receiver of ``name``. A receiver's exception propagates to the
    caller: a hook that must not fail the caller catches inside itself."""
    for receiver in tuple(_receivers.get(name, ())):
        receiver(**kwargs)


def provide(name: str, provider: Callable[..., Any]) -> None:
    """Register the one function that answers ``ask(name, ...)``."""
    with _lock:
        _providers[name] = provider


def ask(name: str, *args: Any, **kwargs: Any) -> Any:
    try:
        provider = _providers[name]
    except KeyError:
        raise LookupError(f"no app provides {name!r}; is its app installed?") from None
    return provider(*args, **kwargs)

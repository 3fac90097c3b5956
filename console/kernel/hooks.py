"""Cross-app reactions without cross-app imports.

The apps are layered (see docs/architecture.md and the
``[tool.importlinter]`` contracts): ``gateway_bridge`` and ``invoicing`` sit
on ``usage``, which sits on ``inference_node`` and ``accounts``. A lower app
never imports a higher one, and the two top apps never import each other.
When something in one app must make another react, the lower one *fires* a
hook (``Hook.fire``) and the other *connects* a receiver to it in its
``AppConfig.ready()`` (``Hook.connect``): typed objects, not names, so mypy
checks that a receiver takes what the hook's firer passes:

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
*provides* it and the lower app *asks* for it (``Port.provide`` / ``Port.ask``):

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
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class Hook(Generic[P]):
    """A reaction one app fires and others connect to. Its signature is the
    keyword arguments every receiver takes, checked by mypy at both ends:
    ``fire`` with other arguments, or a receiver that does not accept them,
    is a type error."""

    def __init__(self, name: str, signature: Callable[P, None]) -> None:
        self.name = name
        self._receivers: list[Callable[P, object]] = []
        self._lock = threading.Lock()

    def connect(self, receiver: Callable[P, object]) -> None:
        """Call ``receiver`` whenever the hook fires. Connecting the same
        receiver twice is a no-op (``ready()`` may run more than once in tests)."""
        with self._lock:
            if receiver not in self._receivers:
                self._receivers.append(receiver)

    def disconnect(self, receiver: Callable[P, object]) -> None:
        with self._lock:
            if receiver in self._receivers:
                self._receivers.remove(receiver)

    def fire(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Run every receiver (what it returns is ignored). A receiver's exception propagates to the
        caller: a hook that must not fail the caller catches inside itself."""
        for receiver in tuple(self._receivers):
            receiver(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Hook {self.name}>"


class Port(Generic[P, R]):
    """A value a higher app owns and a lower one asks for: the owner
    ``provide``s the one function that answers, the asker calls ``ask``
    with the port's signature (mypy checks both ends)."""

    def __init__(self, name: str, signature: Callable[P, R]) -> None:
        self.name = name
        self._provider: Callable[P, R] | None = None

    def provide(self, provider: Callable[P, R]) -> None:
        """Register the one function that answers ``ask`` (a later one replaces it)."""
        self._provider = provider

    @property
    def provider(self) -> Callable[P, R] | None:
        return self._provider

    def ask(self, *args: P.args, **kwargs: P.kwargs) -> R:
        provider = self._provider
        if provider is None:
            raise LookupError(f"no app provides {self.name!r}; is its app installed?")
        return provider(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Port {self.name}>"


class UsageTotals(Protocol):
    """What ``CALLS_INGESTED`` tells of one organization's newly stored calls
    (usage's ``OrgUsageTotals``): ``cost`` in micro-units; ``request_ids`` name
    exactly these calls, for a receiver's idempotency key."""

    @property
    def organization_id(self) -> int: ...
    @property
    def calls(self) -> int: ...
    @property
    def cost(self) -> int: ...
    @property
    def request_ids(self) -> tuple[str, ...]: ...


class CatalogueEntry(Protocol):
    """One model of the catalogue, as ``MODEL_CATALOGUE`` answers it."""

    @property
    def name(self) -> str: ...
    @property
    def display_name(self) -> str: ...
    @property
    def enabled(self) -> bool: ...


# The signatures: never called, they only type the hooks and ports below.
def _calls_ingested(*, totals: Sequence[UsageTotals]) -> None: ...
def _balance_changed(*, organization_id: int, delta: int) -> None: ...
def _outbound_event(
    *, organization_id: int, event_type: str, data: dict[str, Any], event_id: str
) -> None: ...
def _prepaid_balance(organization_id: int) -> int:
    raise NotImplementedError  # a signature only


def _key_spend(
    *, organization_id: int, key_ids: list[int], periods: dict[str, tuple[datetime, datetime]]
) -> dict[int, dict[str, int]]:
    raise NotImplementedError  # a signature only


def _model_catalogue() -> Sequence[CatalogueEntry]:
    raise NotImplementedError  # a signature only


CALLS_INGESTED = Hook("usage.calls_ingested", _calls_ingested)
BALANCE_CHANGED = Hook("invoicing.balance_changed", _balance_changed)
OUTBOUND_EVENT = Hook("console.outbound_event", _outbound_event)
PREPAID_BALANCE = Port("invoicing.prepaid_balance", _prepaid_balance)
KEY_SPEND = Port("usage.key_spend", _key_spend)
MODEL_CATALOGUE = Port("usage.model_catalogue", _model_catalogue)

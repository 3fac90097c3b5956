"""console.kernel.hooks: typed cross-app reactions (``Hook``: fire/connect) and
values (``Port``: provide/ask). Each test makes its own hook or port, so the
product's receivers (connected in the apps' ``ready()``) are never touched."""

from __future__ import annotations

import pytest

from console.kernel import hooks


def _signature(*, organization_id: int = 0, delta: int = 0, n: int = 0) -> None: ...


def _answer(organization_id: int, scale: int = 1) -> int:
    raise NotImplementedError


@pytest.fixture
def hook(request):
    return hooks.Hook(f"test.{request.node.name}", _signature)


@pytest.fixture
def port(request):
    return hooks.Port(f"test.{request.node.name}", _answer)


def test_fire_runs_receivers_in_the_order_they_were_connected(hook):
    heard = []
    hook.connect(lambda **kw: heard.append(("first", kw)))
    hook.connect(lambda **kw: heard.append(("second", kw)))

    hook.fire(organization_id=7, delta=-5)

    assert heard == [
        ("first", {"organization_id": 7, "delta": -5}),
        ("second", {"organization_id": 7, "delta": -5}),
    ]


def test_connecting_the_same_receiver_twice_runs_it_once(hook):
    heard = []

    def receiver(**kw):
        heard.append(kw)

    hook.connect(receiver)
    hook.connect(receiver)  # ready() may run twice in tests
    hook.fire(n=1)

    assert heard == [{"n": 1}]


def test_a_disconnected_receiver_hears_nothing(hook):
    heard = []

    def receiver(**kw):
        heard.append(kw)

    hook.connect(receiver)
    hook.disconnect(receiver)
    hook.fire(n=1)

    assert heard == []


def test_firing_a_hook_without_receivers_is_a_no_op(hook):
    hook.fire(n=1)


def test_a_receiver_error_reaches_the_caller_and_stops_later_receivers(hook):
    heard = []

    def broken(**kw):
        raise RuntimeError("receiver failed")

    hook.connect(broken)
    hook.connect(lambda **kw: heard.append(kw))

    with pytest.raises(RuntimeError, match="receiver failed"):
        hook.fire()
    assert heard == []


def test_ask_returns_what_the_provider_answers(port):
    port.provide(lambda organization_id, scale=1: organization_id * 10 * scale)

    assert port.ask(4) == 40
    assert port.ask(4, scale=2) == 80


def test_the_last_provider_wins(port):
    port.provide(lambda organization_id, scale=1: 1)
    port.provide(lambda organization_id, scale=1: 2)

    assert port.ask(0) == 2


def test_asking_for_a_value_nobody_provides_raises_lookup_error(port):
    with pytest.raises(LookupError, match=port.name):
        port.ask(1)


def test_the_products_hooks_and_ports_are_wired_when_the_apps_are_ready():
    """Every app's ready() has run (pytest-django sets Django up): each port has
    its provider, and each hook the receivers its owner connects."""
    assert hooks.PREPAID_BALANCE.provider is not None
    assert hooks.KEY_SPEND.provider is not None
    assert hooks.MODEL_CATALOGUE.provider is not None
    assert hooks.CALLS_INGESTED._receivers, "invoicing debits the prepaid ledger"
    assert hooks.BALANCE_CHANGED._receivers, "the gateway credits its counters"
    assert hooks.OUTBOUND_EVENT._receivers, "webhooks record outbound events"

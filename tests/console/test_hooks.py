"""console.kernel.hooks: named cross-app reactions (fire/connect) and providers
(provide/ask). Each test uses its own hook names, so the product's receivers
(connected in the apps' ``ready()``) are never touched."""

from __future__ import annotations

import pytest

from console.kernel import hooks


@pytest.fixture
def name(request):
    """A hook name no app uses, dropped again after the test."""
    hook = f"test.{request.node.name}"
    yield hook
    hooks._receivers.pop(hook, None)
    hooks._providers.pop(hook, None)


def test_fire_runs_receivers_in_the_order_they_were_connected(name):
    heard = []
    hooks.connect(name, lambda **kw: heard.append(("first", kw)))
    hooks.connect(name, lambda **kw: heard.append(("second", kw)))

    hooks.fire(name, organization_id=7, delta=-5)

    assert heard == [
        ("first", {"organization_id": 7, "delta": -5}),
        ("second", {"organization_id": 7, "delta": -5}),
    ]


def test_connecting_the_same_receiver_twice_runs_it_once(name):
    heard = []

    def receiver(**kw):
        heard.append(kw)

    hooks.connect(name, receiver)
    hooks.connect(name, receiver)  # ready() may run twice in tests
    hooks.fire(name, n=1)

    assert heard == [{"n": 1}]


def test_a_disconnected_receiver_hears_nothing(name):
    heard = []

    def receiver(**kw):
        heard.append(kw)

    hooks.connect(name, receiver)
    hooks.disconnect(name, receiver)
    hooks.fire(name, n=1)

    assert heard == []


def test_firing_a_hook_without_receivers_is_a_no_op(name):
    hooks.fire(name, anything=1)


def test_a_receiver_error_reaches_the_caller_and_stops_later_receivers(name):
    heard = []

    def broken(**kw):
        raise RuntimeError("receiver failed")

    hooks.connect(name, broken)
    hooks.connect(name, lambda **kw: heard.append(kw))

    with pytest.raises(RuntimeError, match="receiver failed"):
        hooks.fire(name)
    assert heard == []


def test_ask_returns_what_the_provider_answers(name):
    hooks.provide(name, lambda organization_id, scale=1: organization_id * 10 * scale)

    assert hooks.ask(name, 4) == 40
    assert hooks.ask(name, 4, scale=2) == 80


def test_the_last_provider_wins(name):
    hooks.provide(name, lambda: "old")
    hooks.provide(name, lambda: "new")

    assert hooks.ask(name) == "new"


def test_asking_for_a_value_nobody_provides_raises_lookup_error(name):
    with pytest.raises(LookupError, match=name):
        hooks.ask(name, 1)

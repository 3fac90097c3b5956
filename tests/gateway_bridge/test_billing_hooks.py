"""The gateway and billing react to each other through ``console.kernel.hooks``
only: a committed top-up reaches the gateways' balance through
``BALANCE_CHANGED`` (connected in ``GatewayBridgeConfig.ready``), and the
limit counters rebuilt from the database read the prepaid balance from
whichever app provides ``PREPAID_BALANCE`` (invoicing, in its ``ready``)."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from accounts.keys import authenticated_view
from accounts.models import ApiKey
from console.kernel import hooks
from gateway_bridge import limits, notify
from gateway_bridge.limits.rebuild import seed_values
from invoicing.models import LedgerKind
from invoicing.selectors import prepaid_balance
from invoicing.services import ledger_entry_create

pytestmark = pytest.mark.django_db(transaction=True)
USD = 1_000_000


@pytest.fixture
def heard():
    """Messages this process's gateways hear (what ``state`` subscribes to)."""
    messages: list[str] = []
    unsubscribe = notify.subscribe(messages.append)
    yield messages
    unsubscribe()


@pytest.fixture
def prepaid_key(org):
    org.billing_mode = "prepaid"
    org.save(update_fields=["billing_mode"])
    key = ApiKey.objects.create(
        organization=org, name="k", secret_hash="0" * 64, public_id="hookkey0000001"
    )
    return authenticated_view(ApiKey.objects.select_related("organization").get(pk=key.pk))


def test_a_committed_top_up_reaches_the_gateways_balance(org, heard, settings):
    settings.GATEWAY_LIMITS_STORE = "memory"
    with transaction.atomic():
        ledger_entry_create(
            organization_id=org.pk, kind=LedgerKind.TOP_UP, amount=25 * USD, reference="pi_9"
        )
        assert heard == []  # not before the ledger entry commits
    assert heard == [f"balance:{org.pk}:{25 * USD}"]


def test_a_failing_gateway_receiver_does_not_fail_the_top_up(org, monkeypatch):
    def broken(organization_id, delta):
        raise ConnectionError("no gateway today")

    monkeypatch.setattr(limits, "credit_balance", broken)
    _, created = ledger_entry_create(
        organization_id=org.pk, kind=LedgerKind.TOP_UP, amount=USD, reference="pi_10"
    )
    assert created and prepaid_balance(org.pk) == USD


def test_the_rebuilt_balance_bucket_reads_the_ledger_through_the_provider(org, prepaid_key):
    ledger_entry_create(
        organization_id=org.pk, kind=LedgerKind.TOP_UP, amount=7 * USD, reference="pi_11"
    )
    assert seed_values(prepaid_key, _now()) == {f"{{o:{org.pk}}}bal:o:{org.pk}": -7 * USD}


def test_the_rebuild_asks_whoever_provides_the_prepaid_balance(org, prepaid_key):
    original = hooks.PREPAID_BALANCE.provider
    asked: list[int] = []

    def provider(organization_id: int) -> int:
        asked.append(organization_id)
        return 123

    hooks.PREPAID_BALANCE.provide(provider)
    try:
        assert seed_values(prepaid_key, _now()) == {f"{{o:{org.pk}}}bal:o:{org.pk}": -123}
    finally:
        hooks.PREPAID_BALANCE.provide(original)
    assert asked == [org.pk]


def _now():
    return timezone.now()

"""Fixtures for the invoicing tests (the usage fixtures are reused: calls
reach invoices only through the real ingest path)."""

from __future__ import annotations

from unittest import mock

import pytest

from accounts.models import BillingMode
from tests.invoicing.pdf_text import SELLER
from tests.usage.conftest import _fresh_usage_caches, catalog, key, make_key  # noqa: F401


@pytest.fixture(autouse=True)
def refund_worker():
    """No broker in unit tests: ``execute_refund.delay`` runs the task at
    once, as a worker would (retries included); the mock records the calls."""
    from invoicing.tasks import execute_refund

    with mock.patch.object(
        execute_refund, "delay", side_effect=lambda *a, **k: execute_refund.apply(args=a, kwargs=k)
    ) as delay:
        yield delay


@pytest.fixture
def notified():
    """What ``console.kernel.hooks.BALANCE_CHANGED`` told its receivers, in order."""
    from console.kernel import hooks

    calls: list[tuple[int, int]] = []

    def heard(*, organization_id: int, delta: int) -> None:
        calls.append((organization_id, delta))

    hooks.BALANCE_CHANGED.connect(heard)
    try:
        yield calls
    finally:
        hooks.BALANCE_CHANGED.disconnect(heard)


@pytest.fixture
def prepaid(org):
    org.billing_mode = BillingMode.PREPAID
    org.save(update_fields=["billing_mode"])
    return org


@pytest.fixture
def month_calls(catalog, org, key):  # noqa: F811 - the usage fixtures
    """Calls of ``org`` (time zone Europe/Berlin) around March 2025, through
    the real ingest path: returns the request ids inside the local month."""
    from datetime import UTC, datetime, timedelta

    from tests.usage.factories import event
    from usage.ingest import ingest_events

    org.timezone = "Europe/Berlin"
    org.save(update_fields=["timezone"])
    # Local March 2025 in Berlin: 2025-02-28 23:00 UTC to 2025-03-31 22:00 UTC.
    times = [
        datetime(2025, 2, 28, 22, 59, tzinfo=UTC),  # February locally
        datetime(2025, 2, 28, 23, 0, tzinfo=UTC),  # first instant of March locally
        datetime(2025, 3, 15, 12, 0, tzinfo=UTC),
        datetime(2025, 3, 31, 21, 59, tzinfo=UTC),  # last hour of March locally
        datetime(2025, 3, 31, 22, 0, tzinfo=UTC),  # April locally
    ]
    events = []
    for i, t in enumerate(times):
        events.append(
            event(key, started_at=t, input_tokens=2_000_000 + i, output_tokens=333_000 + i)
        )
        events.append(
            event(
                key,
                started_at=t + timedelta(seconds=30),
                model="sim-chat-large",
                input_tokens=777_777,
                cache_read_tokens=5_000_000 + i,
                cache_write_tokens=123_457,
                output_tokens=51_001,
            )
        )
    ingest_events(events)
    start, end = datetime(2025, 2, 28, 23, tzinfo=UTC), datetime(2025, 3, 31, 22, tzinfo=UTC)
    return [
        e["request_id"] for e in events if start <= datetime.fromisoformat(e["started_at"]) < end
    ]


# --- Stripe: localstripe on loopback, signed webhooks -------------------------------

# localstripe's own ``start()`` listens on every interface and pickles its
# store to /tmp/localstripe.pickle (shared by whoever else runs it); this
# runs the same aiohttp app on 127.0.0.1 only, with the store in memory.
_LOCALSTRIPE = """
import sys
from aiohttp import web
from localstripe import resources, server
resources.Store.dump_to_disk = lambda self: None
web.run_app(server.app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""
STRIPE_TEST_KEY = "sk_test_helper_stripe_not_secret"
STRIPE_TEST_WEBHOOK_SECRET = "whsec_test_helper_stripe_not_secret"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unavailable(reason: str):
    """Skip without localstripe, except under CI, where the Stripe tests must run."""
    import os

    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"localstripe is required under CI: {reason}")
    pytest.skip(f"localstripe could not start: {reason}")


@pytest.fixture(scope="session")
def localstripe_url():
    """A localstripe server on 127.0.0.1 for the whole session."""
    import subprocess
    import sys
    import tempfile
    import time

    import requests

    try:
        import localstripe  # noqa: F401
    except ImportError as exc:
        _unavailable(f"not installed ({exc})")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LOCALSTRIPE, str(port)], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 20
        ready, why = False, "no answer"
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                r = requests.get(f"{url}/v1/customers", auth=(STRIPE_TEST_KEY, ""), timeout=1)
                ready, why = r.status_code == 200, f"HTTP {r.status_code}"
                if ready:
                    break
            except requests.RequestException as exc:
                why = str(exc)
            time.sleep(0.1)
        if not ready:
            proc.kill()
            proc.wait()
            log.seek(0)
            tail = log.read()[-2000:].decode(errors="replace")
            _unavailable(f"{why}; exit {proc.returncode}; output: {tail}")
        try:
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class StripeKit:
    """Test helpers around the Stripe settings: cards on file, PaymentIntent
    moves the customer's browser would make, signed webhook deliveries."""

    def __init__(self, settings, url: str):
        self.settings = settings
        self.url = url
        self.secret = STRIPE_TEST_WEBHOOK_SECRET
        self._n = 0

    @property
    def client(self):
        from invoicing import stripe_adapter

        return stripe_adapter.client()

    def outage(self):
        """Point Stripe at a closed loopback port (connection refused)."""
        self.settings.STRIPE_API_BASE = f"http://127.0.0.1:{_free_port()}"

    def restore(self):
        self.settings.STRIPE_API_BASE = self.url

    def card_for(self, org, number: str = "4242424242424242") -> str:
        """A card on file as the organization's default payment method."""
        from invoicing import stripe_adapter

        customer = stripe_adapter.customer_ensure(organization_id=org.pk)
        v1 = self.client.v1
        pm = v1.payment_methods.create(
            params={
                "type": "card",
                "card": {"number": number, "exp_month": 12, "exp_year": 2034, "cvc": "123"},
            }
        )
        v1.payment_methods.attach(pm.id, params={"customer": customer})
        v1.customers.update(
            customer, params={"invoice_settings": {"default_payment_method": pm.id}}
        )
        return pm.id

    def confirm_on_page(self, payment_intent_id: str, number: str = "4242424242424242") -> dict:
        """What Stripe.js does on the top-up page: a card, then confirm."""
        v1 = self.client.v1
        pm = v1.payment_methods.create(
            params={
                "type": "card",
                "card": {"number": number, "exp_month": 12, "exp_year": 2034, "cvc": "123"},
            }
        )
        v1.payment_intents.update(payment_intent_id, params={"payment_method": pm.id})
        return v1.payment_intents.confirm(payment_intent_id).to_dict()

    def confirm_setup(self, setup_intent_id: str, number: str = "4242424242424242") -> dict:
        """What ``stripe.confirmCardSetup`` does on the payment-method page:
        the card's details go to Stripe with the SetupIntent's confirmation."""
        card = {"number": number, "exp_month": "12", "exp_year": "2034", "cvc": "123"}
        return self.client.v1.setup_intents.confirm(
            setup_intent_id, params={"payment_method_data": {"type": "card", "card": card}}
        ).to_dict()

    def authenticate(self, payment_intent_id: str, *, success: bool = True) -> dict:
        """What ``stripe.confirmCardPayment`` does for 3-D Secure (localstripe's
        own endpoint, as its Stripe.js calls it)."""
        import requests

        secret = self.intent(payment_intent_id)["client_secret"]
        response = requests.post(
            f"{self.url}/v1/payment_intents/{payment_intent_id}/_authenticate",
            json={"key": "pk_test_helper_stripe", "client_secret": secret, "success": success},
            timeout=10,
        )
        response.raise_for_status()
        return response.json()

    def customer(self, organization) -> dict:
        organization.billing_profile.refresh_from_db()
        customer = organization.billing_profile.stripe_customer_id
        return self.client.v1.customers.retrieve(customer).to_dict()

    def payment_method(self, payment_method_id: str) -> dict:
        return self.client.v1.payment_methods.retrieve(payment_method_id).to_dict()

    def intent(self, payment_intent_id: str) -> dict:
        return self.client.v1.payment_intents.retrieve(payment_intent_id).to_dict()

    def refunds(self, payment_intent_id: str) -> list[dict]:
        listed = self.client.v1.refunds.list(params={"payment_intent": payment_intent_id})
        return [r.to_dict() for r in listed.data]

    def payment_intents(self, organization) -> list[dict]:
        """The organization's PaymentIntents at localstripe (by its customer:
        row ids repeat across tests on SQLite, customers never do)."""
        customer = organization.billing_profile.stripe_customer_id
        listed = self.client.v1.payment_intents.list(params={"limit": 100}).to_dict()["data"]
        return [pi for pi in listed if pi["customer"] == customer]

    def sign(self, payload: str, *, timestamp: int | None = None, secret: str | None = None):
        """Stripe's scheme: ``t=<unix>,v1=<hex HMAC-SHA256 of "t.payload">``."""
        import hashlib
        import hmac
        import time

        t = int(time.time()) if timestamp is None else timestamp
        mac = hmac.new(
            (secret or self.secret).encode(), f"{t}.{payload}".encode(), hashlib.sha256
        ).hexdigest()
        return f"t={t},v1={mac}"

    def event(self, type_: str, obj: dict, event_id: str | None = None) -> dict:
        from invoicing import stripe_adapter

        self._n += 1
        return {
            "id": event_id or f"evt_test_{self._n}_{obj.get('id', 'x')}",
            "object": "event",
            # The version our webhook endpoint is created with (the adapter's).
            "api_version": stripe_adapter.STRIPE_API_VERSION,
            "created": 1_700_000_000,
            "livemode": False,
            "pending_webhooks": 1,
            "type": type_,
            "data": {"object": obj},
        }

    def deliver(self, client, event: dict, **sign_kwargs):
        import json

        payload = json.dumps(event)
        return client.post(
            "/billing/stripe/webhook/",
            data=payload,
            content_type="application/json",
            HTTP_STRIPE_SIGNATURE=self.sign(payload, **sign_kwargs),
        )


@pytest.fixture
def stripe_on(settings, localstripe_url, monkeypatch):
    """Stripe switched on against the session's localstripe."""
    from invoicing import stripe_adapter

    settings.STRIPE_SECRET_KEY = STRIPE_TEST_KEY
    settings.STRIPE_PUBLISHABLE_KEY = "pk_test_helper_stripe"
    settings.STRIPE_WEBHOOK_SECRET = STRIPE_TEST_WEBHOOK_SECRET
    settings.STRIPE_API_BASE = localstripe_url
    settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS = 300
    # No stripe-python retry sleeps in the outage tests.
    monkeypatch.setattr(stripe_adapter, "MAX_NETWORK_RETRIES", 0)
    return StripeKit(settings, localstripe_url)


@pytest.fixture
def card_invoice(org, month_calls, stripe_on):
    """A finalized March invoice of a postpaid ``org`` with a card on file."""
    from invoicing.services import invoice_draft, invoice_finalize

    stripe_on.card_for(org)
    draft = invoice_draft(organization_id=org.pk, period="2025-03")
    return invoice_finalize(invoice_id=draft.pk)


# --- the finance console, API and exports --------------------------------------


def bill_month(organization, api_key, *, period_day=None, n: int = 3) -> list[str]:
    """``n`` calls of ``api_key`` in March 2025 (UTC mid-month, inside every
    time zone's March) through the real ingest path; their request ids."""
    from datetime import UTC, datetime, timedelta

    from tests.usage.factories import event
    from usage.ingest import ingest_events

    start = period_day or datetime(2025, 3, 15, 12, 0, tzinfo=UTC)
    events = [
        event(api_key, started_at=start + timedelta(minutes=i), input_tokens=1_000_000 + i)
        for i in range(n)
    ]
    ingest_events(events)
    return [e["request_id"] for e in events]


@pytest.fixture
def add_model_lines():
    """Adds to a draft 80 more usage lines, one per model (as many models as a
    busy month can bring): what makes its PDF run over pages."""
    from invoicing.models import InvoiceLine, LineKind, TokenClass

    def add(draft) -> None:
        last = draft.lines.order_by("-position").first().position
        InvoiceLine.objects.bulk_create(
            InvoiceLine(
                invoice=draft,
                position=last + 1 + i,
                kind=LineKind.USAGE,
                description=f"model-{i:03d} · input tokens",
                model=f"model-{i:03d}",
                token_class=TokenClass.INPUT,
                quantity=1_000_000 + i,
                unit_price_per_mtok=1_500_000,
                amount=1_500_000,
            )
            for i in range(80)
        )

    return add


@pytest.fixture
def draft(org, month_calls):
    """Acme's March 2025 invoice, drafted (six calls, Europe/Berlin)."""
    from invoicing.services import invoice_draft

    return invoice_draft(organization_id=org.pk, period="2025-03")


@pytest.fixture
def finalized(draft):
    from invoicing.services import invoice_finalize

    return invoice_finalize(invoice_id=draft.pk)


@pytest.fixture
def other_billing(other_org, catalog, make_key):  # noqa: F811 - the usage fixtures
    """Globex with its own finalized March invoice, a credit note, a payment
    and a ledger entry: what Acme's members must never reach."""
    from types import SimpleNamespace

    from accounts.actors import Actor
    from accounts.models import Role
    from invoicing.models import Payment, PaymentKind, PaymentMethod, PaymentStatus
    from invoicing.services import (
        credit_note_create,
        invoice_draft,
        invoice_finalize,
        invoice_mark_paid,
        prepaid_adjust,
    )
    from tests.factories import MembershipFactory

    bill_month(other_org, make_key(other_org, "globex"))
    finance = Actor(MembershipFactory(organization=other_org, role=Role.FINANCE))
    invoice = invoice_finalize(
        invoice_id=invoice_draft(organization_id=other_org.pk, period="2025-03").pk
    )
    note = credit_note_create(
        invoice_id=invoice.pk, actor=finance, amount=10_000, reason="globex secret reason"
    )
    payment = invoice_mark_paid(
        invoice_id=invoice.pk, actor=finance, reference="GLOBEX-REF-1", amount_minor=1
    )
    entry = prepaid_adjust(actor=finance, amount=5_000_000, reason="globex grant", kind="grant")
    # A refund by bank transfer still to be paid out (what "mark paid" addresses).
    refund = Payment.objects.create(
        organization=other_org, invoice=invoice, credit_note=note, kind=PaymentKind.REFUND,
        method=PaymentMethod.BANK_TRANSFER, status=PaymentStatus.PENDING,
        currency=invoice.currency, amount_minor=1,
    )  # fmt: skip
    return SimpleNamespace(
        org=other_org, invoice=invoice, note=note, payment=payment, entry=entry, finance=finance,
        refund=refund,
    )  # fmt: skip


@pytest.fixture
def seller(settings):
    settings.INVOICING_SELLER = SELLER
    settings.INVOICING_PAYMENT_INSTRUCTIONS = "IBAN DE02 1001 0010 0123 4567 89\nBIC PBNKDEFF"
    return SELLER

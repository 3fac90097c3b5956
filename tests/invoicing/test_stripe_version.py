"""The Stripe API version is ours, stated in one place
(``invoicing.stripe_adapter.STRIPE_API_VERSION``): every request carries it,
it is the version the installed stripe-python was generated for, and the
tests' webhook events are of the same version."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import stripe

from invoicing import stripe_adapter
from tests.invoicing.conftest import StripeKit


def test_the_pinned_version_is_the_one_stripe_python_was_generated_for():
    # Upgrading stripe-python changes its objects' shapes to a newer API version:
    # move STRIPE_API_VERSION with it, after reading Stripe's changelog.
    assert stripe.api_version == stripe_adapter.STRIPE_API_VERSION, (
        f"stripe {stripe.VERSION} speaks {stripe.api_version}; "
        f"invoicing.stripe_adapter pins {stripe_adapter.STRIPE_API_VERSION}"
    )


def test_the_webhook_fixtures_state_the_pinned_version():
    event = StripeKit(settings=None, url="").event("payment_intent.succeeded", {"id": "pi_1"})
    assert event["api_version"] == stripe_adapter.STRIPE_API_VERSION


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str | None]] = []
    answers = {
        "/v1/charges/ch_1": {"id": "ch_1", "object": "charge", "payment_intent": "pi_1"},
        "/v1/refunds": {
            "id": "re_1",
            "object": "refund",
            "status": "succeeded",
            "amount": 100,
            "currency": "usd",
            "payment_intent": "pi_1",
        },
    }

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.seen.append((self.command, self.path, self.headers.get("Stripe-Version")))
        body = json.dumps(self.answers[self.path.split("?")[0]]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_stripe(settings, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorder.seen = []
    settings.STRIPE_SECRET_KEY = "sk_test_version_check"
    settings.STRIPE_API_BASE = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(stripe_adapter, "MAX_NETWORK_RETRIES", 0)
    yield _Recorder.seen
    server.shutdown()
    server.server_close()


def test_every_request_carries_the_pinned_version(fake_stripe):
    assert stripe_adapter.charge_payment_intent("ch_1") == "pi_1"
    refund = stripe_adapter.refund_create(
        payment_intent_id="pi_1", amount_minor=100, idempotency_key="refund-1", metadata={}
    )
    assert refund.id == "re_1"
    assert [(method, path, version) for method, path, version in fake_stripe] == [
        ("GET", "/v1/charges/ch_1", stripe_adapter.STRIPE_API_VERSION),
        ("POST", "/v1/refunds", stripe_adapter.STRIPE_API_VERSION),
    ]

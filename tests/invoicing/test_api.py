"""The invoicing API: the console's permissions and error shape, filters
that name the bad field, cursor pages, invoice actions through the
services, credit notes, the ledger and the balance, another organization's
ids not found, and a schema that still generates."""

from __future__ import annotations

import pytest

from accounts.models import Role
from invoicing.models import CreditNote, InvoiceStatus, LineKind, Payment
from invoicing.services import prepaid_adjust

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client):
    def as_member(membership):
        client.force_login(membership.user)
        return client

    return as_member


def post(c, url, data=None):
    return c.post(url, data or {}, content_type="application/json")


def error(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]


@pytest.mark.parametrize("role", [Role.OWNER, Role.ADMIN, Role.FINANCE])
def test_billing_roles_read_everything(api, members, finalized, role):
    c = api(members[role])
    for url in ("/api/v1/invoices/", "/api/v1/credit-notes/", "/api/v1/ledger/"):
        response = c.get(url)
        assert response.status_code == 200 and "results" in response.json(), url
    assert c.get(f"/api/v1/invoices/{finalized.pk}/").status_code == 200
    assert c.get("/api/v1/balance/").status_code == 200


@pytest.mark.parametrize("role", [Role.DEVELOPER, Role.VIEWER])
def test_developers_and_viewers_get_403_in_the_error_shape(api, members, finalized, role):
    c = api(members[role])
    for url in (
        "/api/v1/invoices/",
        f"/api/v1/invoices/{finalized.pk}/",
        "/api/v1/credit-notes/",
        "/api/v1/ledger/",
        "/api/v1/balance/",
    ):
        response = c.get(url)
        assert response.status_code == 403, url
        assert error(response)["code"] == "permission_denied"
    response = post(c, f"/api/v1/invoices/{finalized.pk}/void/", {"reason": "x"})
    assert response.status_code == 403
    response = post(
        c, "/api/v1/credit-notes/", {"invoice": finalized.pk, "reason": "x", "full": True}
    )
    assert response.status_code == 403 and not CreditNote.objects.exists()


def test_anonymous_is_refused(client, finalized):
    for url in ("/api/v1/invoices/", "/api/v1/balance/", "/api/v1/ledger/"):
        assert client.get(url).status_code in (401, 403)


def test_invoice_list_filters_and_detail_lines(api, members, finalized):
    c = api(members[Role.FINANCE])
    data = c.get("/api/v1/invoices/", {"period": "2025-03", "status": "finalized"}).json()
    assert [i["number"] for i in data["results"]] == [finalized.number]
    row = data["results"][0]
    assert row["total"] == finalized.total and row["amount_due_minor"] == finalized.amount_due_minor
    assert "lines" not in row
    assert c.get("/api/v1/invoices/", {"status": "paid"}).json()["results"] == []
    assert c.get("/api/v1/invoices/", {"period": "2025-04"}).json()["results"] == []
    detail = c.get(f"/api/v1/invoices/{finalized.pk}/").json()
    usage = [ln for ln in detail["lines"] if ln["kind"] == LineKind.USAGE]
    assert sum(ln["amount"] for ln in usage) == finalized.usage_amount
    large = next(
        ln for ln in usage if ln["model"] == "sim-chat-large" and ln["token_class"] == "input"
    )
    assert large["unit_price_per_mtok"] == 1_000_000 and large["quantity"] > 0
    assert detail["credit_notes"] == [] and detail["payments"] == []
    assert detail["buyer"]["name"] == finalized.organization.name


@pytest.mark.parametrize(
    ("url", "params", "field"),
    [
        ("/api/v1/invoices/", {"period": "2025-3"}, "period"),
        ("/api/v1/invoices/", {"status": "open"}, "status"),
        ("/api/v1/credit-notes/", {"period": "x"}, "period"),
        ("/api/v1/credit-notes/", {"invoice": "abc"}, "invoice"),
        ("/api/v1/ledger/", {"kind": "gift"}, "kind"),
        ("/api/v1/ledger/", {"period": "1999-01"}, "period"),
        ("/api/v1/ledger/", {"period": "9999-12"}, "period"),
    ],
)
def test_bad_filters_are_400_naming_the_field(api, members, url, params, field):
    response = api(members[Role.FINANCE]).get(url, params)
    assert response.status_code == 400
    body = error(response)
    assert body["code"] == "invalid" and field in body["fields"], body


def test_cursor_pages(api, members, org):
    finance = members[Role.FINANCE]
    from accounts.actors import Actor

    for i in range(5):
        prepaid_adjust(
            actor=Actor(finance), amount=1_000_000 + i, reason=f"grant {i}", kind="grant"
        )
    c = api(finance)
    first = c.get("/api/v1/ledger/", {"page_size": 2}).json()
    assert len(first["results"]) == 2 and first["next"]
    seen = [e["id"] for e in first["results"]]
    url = first["next"]
    while url:
        page = c.get(url).json()
        seen += [e["id"] for e in page["results"]]
        url = page["next"]
    assert len(seen) == len(set(seen)) == 5
    assert c.get("/api/v1/ledger/", {"kind": "grant"}).json()["results"][0]["amount"] == 1_000_004


def test_refresh_finalize_and_void_actions(api, members, draft):
    c = api(members[Role.FINANCE])
    response = post(c, f"/api/v1/invoices/{draft.pk}/refresh/")
    assert response.status_code == 200 and response.json()["status"] == "draft"
    response = post(c, f"/api/v1/invoices/{draft.pk}/finalize/")
    body = response.json()
    assert response.status_code == 200 and body["status"] == "finalized"
    assert body["number"].startswith("INV-")
    again = post(c, f"/api/v1/invoices/{draft.pk}/finalize/")
    assert again.status_code == 409 and error(again)["code"] == "conflict"
    refresh = post(c, f"/api/v1/invoices/{draft.pk}/refresh/")
    assert refresh.status_code == 409
    no_reason = post(c, f"/api/v1/invoices/{draft.pk}/void/", {})
    assert no_reason.status_code == 400 and "reason" in error(no_reason)["fields"]
    void = post(c, f"/api/v1/invoices/{draft.pk}/void/", {"reason": "wrong month"})
    assert void.status_code == 200 and void.json()["status"] == InvoiceStatus.VOID


def test_the_running_month_cannot_be_finalized_yet(api, members, org):
    from django.utils import timezone

    from invoicing.services import invoice_draft
    from invoicing.services._common import period_of

    draft = invoice_draft(organization_id=org.pk, period=period_of(timezone.now(), org.timezone))
    response = post(api(members[Role.FINANCE]), f"/api/v1/invoices/{draft.pk}/finalize/")
    assert response.status_code == 409 and error(response)["code"] == "period_open"
    draft.refresh_from_db()
    assert draft.status == InvoiceStatus.DRAFT


def test_record_payment_and_mark_uncollectible(api, members, finalized):
    c = api(members[Role.FINANCE])
    url = f"/api/v1/invoices/{finalized.pk}/payments/"
    bad = post(c, url, {"reference": "R", "amount_minor": finalized.amount_due_minor + 1})
    assert bad.status_code == 400 and "amount" in error(bad)["fields"]
    bad = post(c, url, {"reference": "R", "method": "stripe"})
    assert bad.status_code == 400 and "method" in error(bad)["fields"]
    bad = post(c, url, {"amount_minor": 1})
    assert bad.status_code == 400 and "reference" in error(bad)["fields"]
    ok = post(c, url, {"reference": "BANK-1", "amount_minor": 100})
    assert ok.status_code == 201 and ok.json()["amount_minor"] == 100
    assert ok.json()["status"] == "succeeded"
    response = post(c, f"/api/v1/invoices/{finalized.pk}/mark-uncollectible/", {"reason": "gone"})
    assert response.status_code == 200 and response.json()["status"] == "uncollectible"
    assert response.json()["paid_minor"] == 100


def test_credit_notes_create_and_list(api, members, finalized, other_billing):
    c = api(members[Role.FINANCE])
    response = post(
        c, "/api/v1/credit-notes/", {"invoice": finalized.pk, "amount": 250_000, "reason": "slow"}
    )
    assert response.status_code == 201, response.json()
    note = response.json()
    assert note["invoice_number"] == finalized.number and note["amount"] == 250_000
    assert note["amount_minor"] == 25 and note["lines"][0]["amount"] == 250_000
    line = finalized.lines.filter(kind=LineKind.USAGE).first()
    by_line = post(
        c,
        "/api/v1/credit-notes/",
        {"invoice": finalized.pk, "lines": {str(line.pk): 1000}, "reason": "one line"},
    )
    assert by_line.status_code == 201
    listed = c.get("/api/v1/credit-notes/", {"invoice": finalized.pk}).json()["results"]
    assert [n["number"] for n in listed] == [by_line.json()["number"], note["number"]]
    assert c.get("/api/v1/credit-notes/", {"period": "2025-04"}).json()["results"] == []
    one = c.get(f"/api/v1/credit-notes/{note['id']}/")
    assert one.status_code == 200 and one.json()["reason"] == "slow"
    # Never another organization's.
    all_numbers = [n["number"] for n in c.get("/api/v1/credit-notes/").json()["results"]]
    assert other_billing.note.number not in all_numbers


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"reason": "x", "full": True}, "invoice"),
        ({"invoice": "abc", "reason": "x", "full": True}, "invoice"),
        ({"invoice": None, "reason": "x", "amount": 1}, "invoice"),
        ({"reason": "x", "amount": 1, "invoice": 999_999_999}, "invoice"),
        ({"invoice": 0, "reason": "x", "amount": 0}, "amount"),
        ({"invoice": 0, "reason": "", "amount": 5}, "reason"),
        ({"invoice": 0, "reason": "x", "amount": "1.5"}, "amount"),
        ({"invoice": 0, "reason": "x"}, "non_field_errors"),
        ({"invoice": 0, "reason": "x", "amount": 5, "full": True}, "non_field_errors"),
        ({"invoice": 0, "reason": "x", "lines": {"abc": 5}}, "lines"),
        ({"invoice": 0, "reason": "x", "lines": {"999999": 5}}, "line_999999"),
        ({"invoice": 0, "reason": "x", "amount": 10**15}, "amount"),
        ({"invoice": 2**70, "reason": "x", "amount": 5}, "invoice"),
        ({"invoice": 0, "reason": "x", "amount": 2**70}, "amount"),
        ({"invoice": 0, "reason": "x", "lines": {str(2**70): 5}}, "lines"),
    ],
)
def test_bad_credit_notes_are_400_naming_the_field(api, members, finalized, data, field):
    if data.get("invoice") == 0:
        data = {**data, "invoice": finalized.pk}
    response = post(api(members[Role.FINANCE]), "/api/v1/credit-notes/", data)
    assert response.status_code == 400, response.content
    body = error(response)
    assert field in body["fields"], body
    assert not CreditNote.objects.exists()


def test_a_draft_takes_no_credit_note(api, members, draft):
    response = post(
        api(members[Role.FINANCE]),
        "/api/v1/credit-notes/",
        {"invoice": draft.pk, "amount": 100, "reason": "x"},
    )
    assert response.status_code == 400 and "draft" in error(response)["message"]


def test_balance_and_ledger(api, members, org, other_billing):
    from accounts.actors import Actor

    prepaid_adjust(
        actor=Actor(members[Role.FINANCE]), amount=7_500_000, reason="grant", kind="grant"
    )
    prepaid_adjust(actor=Actor(members[Role.FINANCE]), amount=-500_001, reason="fix")
    c = api(members[Role.OWNER])
    balance = c.get("/api/v1/balance/").json()
    assert balance == {
        "balance": 6_999_999,
        "currency": "USD",
        "low_balance_threshold": None,
        "billing_mode": org.billing_mode,
    }
    entries = c.get("/api/v1/ledger/").json()["results"]
    assert sorted(e["amount"] for e in entries) == [-500_001, 7_500_000]
    assert other_billing.entry.reference not in [e["reference"] for e in entries]


# --- another organization ---------------------------------------------------------------


def _other_urls(o):
    inv = f"/api/v1/invoices/{o.invoice.pk}"
    return [
        ("get", f"{inv}/"),  # invoice-detail
        ("post", f"{inv}/refresh/"),  # invoice-refresh
        ("post", f"{inv}/finalize/"),  # invoice-finalize
        ("post", f"{inv}/void/"),  # invoice-void
        ("post", f"{inv}/mark-uncollectible/"),  # invoice-mark-uncollectible
        ("post", f"{inv}/payments/"),  # invoice-payments
        ("get", f"/api/v1/credit-notes/{o.note.pk}/"),  # credit-note-detail
    ]


def test_other_orgs_objects_are_404(api, members, other_billing):
    c = api(members[Role.OWNER])
    before = (other_billing.invoice.status, CreditNote.objects.count(), Payment.objects.count())
    for method, url in _other_urls(other_billing):
        if method == "get":
            response = c.get(url)
        else:
            response = post(c, url, {"reason": "x", "reference": "R"})
        assert response.status_code == 404, url
        assert error(response)["code"] in ("not_found", "error")
        assert b"GLOBEX" not in response.content
    # Crediting their invoice by id: a 400 on the field, nothing written.
    response = post(
        c,
        "/api/v1/credit-notes/",
        {"invoice": other_billing.invoice.pk, "full": True, "reason": "x"},
    )
    assert response.status_code == 400 and "invoice" in error(response)["fields"]
    other_billing.invoice.refresh_from_db()
    after = (other_billing.invoice.status, CreditNote.objects.count(), Payment.objects.count())
    assert after == before


def test_schema_generates(api, owner):
    response = api(owner).get("/api/v1/schema/")
    assert response.status_code == 200
    for path in (
        b"/api/v1/invoices/{id}/finalize/",
        b"/api/v1/credit-notes/",
        b"/api/v1/ledger/",
        b"/api/v1/balance/",
    ):
        assert path in response.content

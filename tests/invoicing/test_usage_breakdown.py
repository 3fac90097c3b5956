"""An invoice's usage broken down by a tag's value or by end user
(``?breakdown=tag:<key>`` / ``?breakdown=end_user``): on the page, in its
CSV and its PDF, the rows (the untagged calls in their own row) sum to the
invoice's usage amount to the micro-unit; another org's tags never count."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pypdfium2 as pdfium
import pytest
from django.urls import reverse

from accounts.models import Role
from invoicing.breakdown import invoice_breakdown
from tests.invoicing.pages import as_member, html
from tests.usage.factories import event
from usage.ingest import ingest_events

pytestmark = pytest.mark.django_db
# Inside Berlin's March 2025, the first instant and the last hour included.
TIMES = [
    datetime(2025, 2, 28, 23, 0, tzinfo=UTC),
    datetime(2025, 3, 10, 8, 30, tzinfo=UTC),
    datetime(2025, 3, 31, 21, 59, tzinfo=UTC),
]


@pytest.fixture
def tagged_month(org, month_calls, key, make_key, other_org):
    """Acme's March calls (``month_calls``, untagged) plus tagged ones; and
    Globex's tagged calls in the same days, which must never count."""
    events = []
    for i in range(12):
        t = TIMES[i % 3] + timedelta(seconds=i)
        tags = {"team": ("search", "ads")[i % 2]} if i % 3 else {}
        if i % 4 == 0:
            tags["env"] = "prod"
        events.append(
            event(
                key,
                started_at=t,
                input_tokens=123_457 + i,
                output_tokens=9_877 + 3 * i,
                end_user=f"u-{i % 3}" if i % 2 else "",
                tags=tags,
            )
        )
    globex = make_key(other_org, "globex")
    events += [event(globex, started_at=TIMES[1], tags={"team": "globex-secret"}) for _ in range(3)]
    ingest_events(events)
    from invoicing.services import invoice_draft

    return invoice_draft(organization_id=org.pk, period="2025-03")


@pytest.mark.parametrize("choice", ["tag:team", "tag:env", "end_user"])
def test_the_breakdown_sums_to_the_invoices_usage_to_the_micro_unit(tagged_month, choice):
    invoice = tagged_month
    b = invoice_breakdown(invoice, choice)
    assert b.amount == invoice.usage_amount == sum(r.amount for r in b.rows)
    assert b.calls == invoice.calls == sum(r.calls for r in b.rows)
    assert b.rows[-1].value is None  # the untagged (or anonymous) calls, last
    assert "globex-secret" not in {r.value for r in b.rows}


def test_the_finalized_invoice_breaks_down_the_same(tagged_month):
    from invoicing.services import invoice_finalize

    invoice = invoice_finalize(invoice_id=tagged_month.pk)
    b = invoice_breakdown(invoice, "tag:team")
    assert {r.value for r in b.rows} == {"search", "ads", None}
    assert b.amount == invoice.usage_amount


def test_the_page_shows_the_breakdown_with_its_csv_and_pdf(client, members, tagged_month):
    invoice = tagged_month
    c = as_member(client, members[Role.FINANCE])
    url = reverse("invoicing:invoice_detail", args=[invoice.pk])
    page = html(c.get(url))
    assert 'value="tag:team"' in page and 'value="end_user"' in page  # the choices
    page = html(c.get(url, {"breakdown": "tag:team"}))
    assert 'id="breakdown"' in page and "(untagged)" in page and "search" in page
    assert "globex-secret" not in page
    response = c.get(url, {"breakdown": "tag:team", "format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode("utf-8-sig"))))
    assert rows[0] == ["group", "calls", "tokens", "amount"]
    body = [r for r in rows[1:] if r[0] != "total"]
    total = rows[-1]
    micro = sum(int(Decimal(r[3]) * 1_000_000) for r in body)
    assert micro == int(Decimal(total[3]) * 1_000_000) == invoice.usage_amount
    assert {r[0] for r in body} == {"search", "ads", ""}
    pdf = c.get(reverse("invoicing:invoice_pdf", args=[invoice.pk]), {"breakdown": "end_user"})
    assert pdf.status_code == 200
    doc = pdfium.PdfDocument(pdf.content)
    text = "\n".join(doc[i].get_textpage().get_text_range() for i in range(len(doc)))
    assert "Usage by end user" in text and "u-1" in text and "Usage total" in text


def test_a_malformed_breakdown_is_said_on_the_page(client, members, tagged_month):
    c = as_member(client, members[Role.OWNER])
    url = reverse("invoicing:invoice_detail", args=[tagged_month.pk])
    response = c.get(url, {"breakdown": "tag:bad key"})
    assert response.status_code == 200
    assert 'id="breakdown-error"' in html(response)
    pdf_url = reverse("invoicing:invoice_pdf", args=[tagged_month.pk])
    assert c.get(pdf_url, {"breakdown": "colour"}).status_code == 404


def test_another_orgs_invoice_breakdown_is_unreachable(client, members, tagged_month, other_org):
    from tests.conftest import _member

    outsider = _member(other_org, Role.OWNER)
    c = as_member(client, outsider)
    url = reverse("invoicing:invoice_detail", args=[tagged_month.pk])
    assert c.get(url, {"breakdown": "tag:team", "format": "csv"}).status_code == 404
    pdf_url = reverse("invoicing:invoice_pdf", args=[tagged_month.pk])
    assert c.get(pdf_url, {"breakdown": "tag:team"}).status_code == 404

"""The SLA page and the overview's SLA figures: finance sees the month, the
failure budget and the drafted credit and approves it (the invoice's amount
due falls by the credit note); developers and viewers never see them;
another organization's month is out of reach; platform staff alone set a
target and evaluate now; the pages read in Chinese."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest
from django.urls import reverse
from django.utils import translation

from accounts.models import Role
from console.kernel.money import PPM
from invoicing.models import CreditNote, Invoice, SlaMonth, SlaStatus, SlaTarget
from invoicing.models.invoices import credit_description
from invoicing.money import div_round
from invoicing.services.sla import sla_evaluate
from tests.factories import MembershipFactory, UserFactory
from tests.invoicing.pages import as_member, follow_messages, html
from tests.invoicing.test_sla import AFTER, PERIOD, _invoice, march_calls

pytestmark = pytest.mark.django_db

SLA = reverse("invoicing:sla")


@pytest.fixture
def breached(catalog, org, key):
    org.timezone = "Europe/Berlin"
    org.save(update_fields=["timezone"])
    failed = march_calls(key, ok=97, failed=3, client_errors=4)
    invoice = _invoice(org)
    month = sla_evaluate(organization_id=org.pk, period=PERIOD, now=AFTER)
    return invoice, month, failed


def test_finance_sees_the_breach_and_approves_the_credit(client, breached, members):
    invoice, month, _failed = breached
    as_member(client, members[Role.FINANCE])
    page = html(client.get(SLA, {"period": PERIOD}))
    # 104 calls, 3 failed: 97.1153 %, below 99 %: 25 % of the invoice.
    assert 'id="sla-availability">97.1153 %' in page
    assert 'id="sla-target">99.9 %' in page
    assert 'id="sla-failed">3<' in page and 'id="sla-budget">0<' in page
    assert "over by 3" in page
    assert 'id="plot-sla_daily"' in page
    expected = div_round(invoice.total * 250_000, PPM)
    assert month.credit_rate_ppm == 250_000
    assert "Approve credit" in page
    due = invoice.amount_due_minor
    done = follow_messages(
        client,
        client.post(reverse("invoicing:sla_decide"), {"month": month.pk, "action": "approve"}),
    )
    note = CreditNote.objects.get(invoice=invoice)
    assert note.amount == expected and f"Credit note {note.number} issued" in done
    invoice.refresh_from_db()
    assert due - invoice.amount_due_minor == note.amount_minor
    assert SlaMonth.objects.get(pk=month.pk).status == SlaStatus.APPROVED
    # Pressing again drafts and issues nothing more.
    again = client.post(reverse("invoicing:sla_decide"), {"month": month.pk, "action": "approve"})
    assert "already credit approved" in follow_messages(client, again)
    assert CreditNote.objects.filter(invoice=invoice).count() == 1


def test_the_failed_calls_csv_lists_the_platforms_failures_only(client, breached, members):
    _inv, _month, failed = breached
    as_member(client, members[Role.FINANCE])
    response = client.get(reverse("invoicing:sla_failed_calls"), {"period": PERIOD})
    rows = list(csv.reader(io.StringIO(response.content.decode("utf-8-sig"))))
    assert rows[0] == [
        "request_id",
        "started_at (Europe/Berlin)",
        "model",
        "status_code",
        "error_type",
    ]
    assert sorted(r[0] for r in rows[1:]) == sorted(failed)
    assert {r[3] for r in rows[1:]} == {"502"}


@pytest.mark.parametrize("role", [Role.DEVELOPER, Role.VIEWER])
def test_developers_and_viewers_never_see_the_sla_money(client, breached, members, role):
    _inv, month, _failed = breached
    as_member(client, members[role])
    assert client.get(SLA, {"period": PERIOD}).status_code == 403
    assert client.get(reverse("invoicing:sla_failed_calls")).status_code == 403
    assert client.get(reverse("analytics:chart_overview_sla")).status_code == 403
    post = client.post(reverse("invoicing:sla_decide"), {"month": month.pk, "action": "approve"})
    assert post.status_code == 403
    assert 'id="chart-overview_sla"' not in html(client.get(reverse("console:overview")))
    assert not CreditNote.objects.exists()


def test_another_organizations_sla_is_out_of_reach(client, breached, other_members):
    _inv, month, _failed = breached
    as_member(client, other_members[Role.FINANCE])
    page = html(client.get(SLA, {"period": PERIOD}))
    assert 'id="sla-calls">0<' in page and "97.1153" not in page
    response = client.post(
        reverse("invoicing:sla_decide"), {"month": month.pk, "action": "approve"}
    )
    assert response.status_code == 404
    rows = client.get(reverse("invoicing:sla_failed_calls"), {"period": PERIOD}).content
    assert rows.decode("utf-8-sig").strip().count("\n") == 0  # the header alone
    assert not CreditNote.objects.exists()
    assert SlaMonth.objects.get(pk=month.pk).status == SlaStatus.DRAFTED


def test_the_overview_shows_finance_the_month_so_far(client, catalog, org, key, members):
    now = datetime.now(UTC)
    from tests.usage.factories import event
    from usage.ingest import ingest_events

    ingest_events(
        [
            event(key, started_at=now),
            event(key, started_at=now, status_code=503, error_type="upstream_error"),
        ]
    )
    as_member(client, members[Role.FINANCE])
    assert 'id="chart-overview_sla"' in html(client.get(reverse("console:overview")))
    chart = html(client.get(reverse("analytics:chart_overview_sla")))
    assert "50 %" in chart and "over by 1" in chart
    assert "Below the target this month" in chart


def test_only_platform_staff_set_the_target_and_evaluate_now(client, breached, org, members):
    _inv, month, _failed = breached
    as_member(client, members[Role.OWNER])
    target = reverse("invoicing:sla_staff_target")
    evaluate = reverse("invoicing:sla_staff_evaluate")
    assert client.post(target, {"target": "95"}).status_code == 404
    assert client.post(evaluate, {"period": PERIOD}).status_code == 404
    assert not SlaTarget.objects.exists()

    staff = UserFactory(is_staff=True)
    MembershipFactory(organization=org, role=Role.ADMIN, user=staff)
    client.force_login(staff)
    assert "Evaluate now" in html(client.get(SLA, {"period": PERIOD}))
    bad = follow_messages(client, client.post(target, {"target": "lots"}))
    assert "Give the target in percent" in bad
    follow_messages(client, client.post(target, {"target": "97", "ttft": "x"}))
    assert not SlaTarget.objects.exists()
    follow_messages(client, client.post(target, {"target": "97", "period": PERIOD}))
    assert SlaTarget.objects.get(organization=org).availability_ppm == 970_000
    assert SlaTarget.objects.get(organization=org).ttft_p99_ms is None  # the default
    done = follow_messages(client, client.post(evaluate, {"period": PERIOD}))
    assert "2025-03 evaluated: target met" in done
    month.refresh_from_db()
    assert (month.status, month.target_ppm) == (SlaStatus.MET, 970_000)
    assert SlaMonth.objects.filter(organization=org).count() == 1
    # The running month cannot be evaluated yet.
    running = datetime.now(UTC).strftime("%Y-%m")
    assert "has not ended yet" in follow_messages(
        client, client.post(evaluate, {"period": running})
    )


def test_the_sla_page_and_credit_read_in_chinese(client, breached, members):
    invoice, month, _failed = breached
    finance = members[Role.FINANCE]
    finance.user.language = "zh-hans"
    finance.user.save(update_fields=["language"])
    as_member(client, finance)
    page = html(client.get(SLA, {"period": PERIOD}))
    assert "可用性" in page and "Failure budget" not in page and "Approve credit" not in page
    client.post(reverse("invoicing:sla_decide"), {"month": month.pk, "action": "approve"})
    line = CreditNote.objects.get(invoice=invoice).lines.get()
    with translation.override("zh-hans"):
        worded = credit_description(line.description)
    assert worded != line.description and "SLA" in worded and "2025-03" in worded
    assert Invoice.objects.get(pk=invoice.pk).credited > 0

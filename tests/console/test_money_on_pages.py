"""Every console page of a populated organization shows money one way
(``console.kernel.money``): in the currency's minor units, never in scientific
notation, never as a raw count of micro-units.

Three organizations (USD with tax and a discount, JPY, and a prepaid one in
BHD) get calls with tiny and large costs, a finalized invoice with a payment
and a credit note, top-ups and grants, keys and sub-accounts with caps (one
typed as ``1E+2``), and the audit entries all of that records. Their owner
(and platform staff, for the margin page) then opens every console page the
URL configuration has (``tests/console/routes.py`` walks it), full page and
htmx partial, and the analytics chart partials, and the test reads what a
person reads there:

* no number in scientific notation (``1E+2``, ``1.5e-06``);
* none of the micro-unit amounts planted in the database written as an
  integer (a cost of 14,293,328 micro-units is "14.29 USD", never
  "14293328" or "14,293,328");
* every ``<number> <CUR>`` with exactly the currency's decimals (two for
  USD, none for JPY, three for BHD), except on the pages where a user asks
  for exact figures (the call log and a call's detail, prices per million
  tokens, the staff margin report, the credit-note form's limits): there,
  at least the currency's decimals and at most six;
* money charts label ticks with the currency's decimals, and hover too,
  but for an amount under one minor unit: two significant digits there
  (``console.kernel.money``'s small-amount form, issue 38).

CSV exports: money columns name the currency, and cells are plain decimals.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.actors import Actor
from accounts.models import Role
from console.kernel.money import CURRENCY_CODES, minor_units, parse_amount
from tests.console.routes import all_routes, client_for, fill
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory, issue_key

CODES = sorted({*CURRENCY_CODES, "BHD", "KWD"})
LARGE_COST = 14_293_328  # micro-units: "14.29 USD", "14 JPY", "14.293 BHD"
TINY_COST = 4  # micro-units (a token in, a token out): "< 0.01 USD"
PRICE_PER_MTOK = 2_000_000  # 2 units per million input tokens: cost != token count

# Pages where a person asks for exact figures: costs of single calls, prices
# per million tokens, the staff margin report (to the micro-unit, like its
# CSV). Elsewhere only a limit a person types up to ("at most 5.407911 USD",
# a form's help or error) names its amount exactly.
EXACT_PAGES = (
    "usage:calls",
    "usage:calls_tail",
    "usage:call_detail",
    "usage:models",
    "analytics:marketplace",  # prices per million tokens, beside the list price
    "analytics:margin",
    "inference_node:node_detail",  # cost prices per million tokens
)
# Not pages for people to read, or not money: skipped by the walk.
SKIP = {
    "accounts:organization_switch",
    "accounts:password_change",
    "accounts:logout",
    "invoicing:invoice_pdf",  # PDFs: tests/invoicing (the pdf work)
    "invoicing:credit_note_pdf",
}


# --- what a person reads ------------------------------------------------------------------


class _Text(HTMLParser):
    """The visible text of a page, plus what a person sees in attributes
    (form values, confirmations, titles); scripts and styles apart (their
    JSON is checked as a chart). A secret shown to be copied (an element
    marked ``data-secret``: the two-factor key, recovery codes) is random
    text, not a figure: left out (its "72E6" is no scientific notation)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.scripts: list[str] = []
        self._skip = 0
        self._skipping: list[str] = []  # the tags whose content is left out, innermost last
        self._script = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "style") or "data-secret" in a:
            self._skip += 1
            self._script = tag == "script"
            self._skipping.append(tag)
            return
        if self._skipping and tag == self._skipping[-1]:
            self._skip += 1  # the same tag nested inside a skipped one
            self._skipping.append(tag)
            return
        if tag == "input" and a.get("type") == "hidden":
            return
        for name in ("value", "data-confirm", "title", "placeholder", "aria-label"):
            if a.get(name):
                self.parts.append(a[name])

    def handle_endtag(self, tag):
        if self._skipping and tag == self._skipping[-1]:
            self._skipping.pop()
            self._skip -= 1
            self._script = False

    def handle_data(self, data):
        if self._skip:
            if self._script:
                self.scripts.append(data)
            return
        self.parts.append(data)


def read(html: str) -> tuple[str, list[str]]:
    parser = _Text()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split()), parser.scripts


SCIENTIFIC = re.compile(r"(?<![\w.#-])[-+]?\d+(?:\.\d+)?[eE][-+]?\d+(?![\w.])")
AMOUNT = re.compile(
    r"(?<![\w.,])(?P<number>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<decimals>\d+))?"
    r"\s(?P<code>" + "|".join(CODES) + r")\b"
)


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    amounts: int = 0
    pages: int = 0
    charts: int = 0
    csv_columns: int = 0

    def add(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")


def check_text(text: str, where: str, planted: set[int], *, exact: bool, out: Findings) -> None:
    for m in SCIENTIFIC.finditer(text):
        out.add(
            where, f"scientific notation {m.group(0)!r} in …{text[m.start() - 40 : m.end() + 20]}…"
        )
    for value in planted:
        for form in (str(value), f"{value:,}"):
            if re.search(rf"(?<![\w.,]){re.escape(form)}(?![\w,]|\.\d)", text):
                out.add(where, f"raw micro-units {form!r}")
    for m in AMOUNT.finditer(text):
        out.amounts += 1
        code, decimals = m["code"], len(m["decimals"] or "")
        digits = minor_units(code)
        whole = m["number"].replace(",", "")
        if len(whole) > 3 and "," not in m["number"]:
            out.add(where, f"{m.group(0)!r} without digit grouping")
        limit = text[max(0, m.start() - 8) : m.start()].endswith("at most ")
        ok = digits <= decimals <= 6 if exact or limit else decimals == digits
        if not ok:
            context = text[max(0, m.start() - 40) : m.end() + 10]
            out.add(
                where, f"{m.group(0)!r} has {decimals} decimals ({code}: {digits}) in …{context}…"
            )


def check_hover_text(text: str, where: str, out: Findings) -> None:
    """A money point's hover text: the currency's decimals, or, under one
    minor unit, the small-amount form (more decimals, at most six)."""
    for m in AMOUNT.finditer(text):
        out.amounts += 1
        digits, decimals = minor_units(m["code"]), len(m["decimals"] or "")
        small = digits < decimals <= 6 and m["number"] == "0"
        small = small and int(m["decimals"][:digits] or "0") == 0
        if decimals != digits and not small:
            out.add(where, f"{text!r} has {decimals} decimals ({m['code']}: {digits})")


def check_charts(scripts: list[str], where: str, currency: str, out: Findings) -> None:
    """A money trace's hover label and a money axis's ticks use the
    currency's decimals."""
    want = f",.{minor_units(currency)}f"
    for script in scripts:
        for blob in re.findall(r"\{.*\}", script, flags=re.S):
            try:
                fig = json.loads(blob)
            except ValueError:
                continue
            for data in _figures(fig):
                out.charts += 1
                for trace in data.get("data", []):
                    hover = trace.get("hovertemplate") or ""
                    if re.search(rf"\s{currency}\b", hover) and want not in hover:
                        out.add(where, f"trace {trace.get('name')!r} hover {hover!r}, want {want}")
                    if "%{customdata}" in hover:
                        for text in trace.get("customdata") or []:
                            check_hover_text(str(text), f"{where} hover", out)
                yaxis = data.get("layout", {}).get("yaxis", {})
                title = (yaxis.get("title") or {}).get("text") or ""
                if f"({currency})" in title and yaxis.get("tickformat") != want:
                    out.add(where, f"axis {title!r} tickformat {yaxis.get('tickformat')!r}")


def _figures(node):
    if isinstance(node, dict):
        if "data" in node and "layout" in node:
            yield node
        for v in node.values():
            yield from _figures(v)
    elif isinstance(node, list):
        for v in node:
            yield from _figures(v)


# --- the populated organizations ---------------------------------------------------------


def _previous_period(now: datetime) -> tuple[str, datetime]:
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    last_month = first - timedelta(days=1)
    return f"{last_month:%Y-%m}", last_month.replace(day=10, hour=12, tzinfo=UTC)


def _populate(currency: str, *, prepaid: bool, staff) -> dict:
    from accounts.services import sub_account_create
    from invoicing.models import BillingProfile, CreditNote, Invoice, LedgerEntry
    from invoicing.services import (
        credit_note_create,
        invoice_draft,
        invoice_finalize,
        invoice_mark_paid,
        prepaid_adjust,
        topup_record_manual,
    )
    from tests.inference_node.factories import NodeFactory
    from tests.usage.factories import PriceFactory, event
    from usage.ingest import ingest_events
    from usage.ingest.directory import invalidate_directory
    from usage.models import CallRecord, CatalogModel
    from usage.prices import invalidate_price_book

    org = OrganizationFactory(
        name=f"Money {currency}",
        slug=f"money-{currency.lower()}",
        currency=currency,
        billing_mode="prepaid" if prepaid else "postpaid",
    )
    members = {r: MembershipFactory(organization=org, role=r) for r in (Role.OWNER, Role.FINANCE)}
    MembershipFactory(organization=org, role=Role.OWNER, user=staff)
    owner = Actor(members[Role.OWNER], "203.0.113.9")
    finance = Actor(members[Role.FINANCE], "203.0.113.9")
    BillingProfile.objects.update_or_create(
        organization=org,
        defaults={
            "tax_rate_ppm": 190_000 if currency == "USD" else 0,
            "invoice_discount_ppm": 75_000 if currency == "USD" else 0,
            "low_balance_threshold": parse_amount("1E+2"),
            "legal_name": f"Money {currency} Ltd",
        },
    )
    model = CatalogModel.objects.get(name="sim-chat-small")
    PriceFactory(
        model=model,
        currency=currency,
        organization=org,
        input_per_mtok=PRICE_PER_MTOK,
        cache_read_per_mtok=PRICE_PER_MTOK // 10,
        cache_write_per_mtok=PRICE_PER_MTOK,
        output_per_mtok=PRICE_PER_MTOK,
        effective_from=datetime(2024, 1, 1, tzinfo=UTC),
    )
    invalidate_price_book()
    invalidate_directory()
    node = NodeFactory(organization=org, name=f"node-{currency.lower()}", serves=["sim-chat-small"])

    sub = sub_account_create(
        actor=owner,
        name=f"team-{currency.lower()}",
        spend_cap_daily=parse_amount("1E+3"),
        spend_cap_monthly=987_654_321,
    )
    key, _raw = issue_key(
        owner,
        name=f"capped-{currency.lower()}",
        sub_account_id=sub.pk,
        spend_cap_daily=parse_amount("1E+2"),
        spend_cap_monthly=98_765_432,
        spend_cap_lifetime=parse_amount("1E+3"),
    )
    if prepaid:
        topup_record_manual(actor=finance, amount_minor=123_456, reference=f"wire-{currency}")
        prepaid_adjust(actor=finance, amount=parse_amount("1E+2"), reason="welcome grant")

    period, in_period = _previous_period(timezone.now())
    recent = timezone.now() - timedelta(hours=2)
    big_tokens = LARGE_COST * 1_000_000 // PRICE_PER_MTOK  # 7,146,664 tokens
    events = []
    # Different calls recently than in the invoiced month, so that no token
    # count of a range happens to equal an amount of micro-units.
    for when, medium in ((in_period, 617_284), (recent, 308_642)):
        for i, tokens in enumerate((big_tokens, 1, medium)):
            events.append(
                event(
                    key,
                    started_at=when + timedelta(minutes=i),
                    input_tokens=tokens,
                    output_tokens=1 if tokens == 1 else 0,
                    cache_read_tokens=0,
                )
            )
    ingest_events(events)
    costs = set(CallRecord.objects.filter(organization_id=org.pk).values_list("cost", flat=True))
    assert LARGE_COST in costs and TINY_COST in costs, costs

    draft = invoice_draft(organization_id=org.pk, period=period)
    invoice = invoice_finalize(invoice_id=draft.pk, actor=finance)
    invoice.refresh_from_db()
    paid = invoice.amount_due_minor // 3
    if paid:
        invoice_mark_paid(
            actor=finance, invoice_id=invoice.pk, reference=f"bank-{currency}", amount_minor=paid
        )
    credit_note_create(invoice_id=invoice.pk, actor=finance, amount=1_234_567, reason="outage")

    planted = {LARGE_COST, 987_654_321, 98_765_432, parse_amount("1E+2"), parse_amount("1E+3")}
    for inv in Invoice.objects.filter(organization=org):
        planted |= {inv.subtotal, inv.total, inv.tax_amount, inv.discount_amount}
    planted |= set(CreditNote.objects.filter(organization=org).values_list("amount", flat=True))
    planted |= set(LedgerEntry.objects.filter(organization=org).values_list("amount", flat=True))
    planted |= {abs(v) for v in planted}
    # Small values (a 3 micro-unit call) are too common as digits to search for.
    planted = {v for v in planted if abs(v) >= 100_000}
    return {
        "org": org,
        "owner": members[Role.OWNER],
        "values": {
            "sub_account": sub.pk,
            "api_key": key.pk,
            "call": events[0]["request_id"],
            "invoice": invoice.pk,
            "credit_note": CreditNote.objects.filter(invoice=invoice).first().pk,
            "node": node.pk,
        },
        "planted": planted,
    }


@pytest.fixture
def money_world(db, settings):
    from usage.ingest.directory import invalidate_directory
    from usage.prices import invalidate_price_book
    from usage.seed import seed_catalog

    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    invalidate_price_book()
    invalidate_directory()
    seed_catalog()
    staff = UserFactory(is_staff=True)
    orgs = {
        "USD": _populate("USD", prepaid=False, staff=staff),
        "JPY": _populate("JPY", prepaid=False, staff=staff),
        "BHD": _populate("BHD", prepaid=True, staff=staff),
    }
    yield {"orgs": orgs, "staff": staff}
    invalidate_price_book()
    invalidate_directory()


# --- the walk ----------------------------------------------------------------------------

PARAM_KINDS = {
    "sub_account_id": "sub_account",
    "key_id": "api_key",
    "request_id": "call",
    "invoice_id": "invoice",
    "credit_note_id": "credit_note",
    "node_id": "node",
}
ANALYTICS_QUERIES = ("", "?range=30d")


def _pages(*, staff: bool):
    """The console's readable pages (GET), from the URL configuration."""
    for route in all_routes():
        if route.access is None or route.key in SKIP or route.key.startswith("admin:"):
            continue
        if route.access.kind == "admin" and not route.key.startswith("analytics:margin"):
            continue
        if route.access.kind not in ("page", "admin"):
            continue
        if (route.access.kind == "admin") != staff:
            continue
        if any(p not in PARAM_KINDS for p in route.params):
            continue  # members, invitations, credentials: no money on them
        yield route


def _walk(client, world_org, *, staff: bool, out: Findings) -> set[str]:
    currency = world_org["org"].currency
    seen = set()
    for route in _pages(staff=staff):
        url = fill(route.template, {p: world_org["values"][PARAM_KINDS[p]] for p in route.params})
        queries = ANALYTICS_QUERIES if route.key.startswith("analytics:") else ("",)
        for query in queries:
            for htmx in (False, True):
                headers = {"HX-Request": "true"} if htmx else {}
                response = client.get(url + query, headers=headers)
                where = f"{currency} {route.key} {url}{query}{' (htmx)' if htmx else ''}"
                if response.status_code in (301, 302, 403, 404, 405):
                    continue
                assert response.status_code == 200, f"{where}: {response.status_code}"
                seen.add(route.key)
                kind = response.get("Content-Type", "")
                raw = (
                    b"".join(response.streaming_content) if response.streaming else response.content
                )
                body = raw.decode()
                if "text/csv" in kind:
                    _check_csv(body, where, world_org["planted"], currency, out)
                    break
                out.pages += 1
                text, scripts = read(body)
                exact = route.key in EXACT_PAGES
                check_text(text, where, world_org["planted"], exact=exact, out=out)
                check_charts(scripts, where, currency, out)
    return seen


MONEY_HEADER = re.compile(
    r"(amount|total|subtotal|tax|discount|paid|due|credit|cost|spend|"
    r"saved|balance|revenue|margin|refund)",
    re.I,
)


def _check_csv(body: str, where: str, planted: set[int], currency: str, out: Findings) -> None:
    rows = list(csv.reader(io.StringIO(body)))
    if not rows:
        return
    header = rows[0]
    for cell in (c for row in rows for c in row):
        if SCIENTIFIC.fullmatch(cell.strip()):
            out.add(where, f"CSV cell in scientific notation {cell!r}")
        if cell.strip().lstrip("-").isdigit() and int(cell) in planted:
            out.add(where, f"CSV cell with raw micro-units {cell!r}")
    for i, name in enumerate(header):
        if not MONEY_HEADER.search(name) or re.search(r"tokens|calls|_at$|date|id$|reason", name):
            continue
        values = [row[i] for row in rows[1:] if i < len(row) and row[i]]
        # A money column (decimals) says its currency: in its name, or a currency column.
        money = values and all(re.fullmatch(r"-?\d+\.\d+", v) for v in values)
        if money and currency not in name and "currency" not in header and "unit" not in name:
            out.add(where, f"CSV money column {name!r} does not name the currency")
        out.csv_columns += bool(money)


def test_every_console_page_shows_money_in_the_currency(money_world):
    out = Findings()
    seen: set[str] = set()
    for world_org in money_world["orgs"].values():
        client = client_for(world_org["owner"])
        seen |= _walk(client, world_org, staff=False, out=out)
    # The walk reached the pages that show money, with money on them.
    for key in (
        "console:overview",
        "accounts:api_keys",
        "accounts:api_key_detail",
        "accounts:sub_accounts",
        "accounts:audit",
        "invoicing:invoices",
        "invoicing:invoice_detail",
        "invoicing:balance",
        "analytics:spend",
        "analytics:chart_spend",
        "analytics:chart_billing",
        "usage:call_detail",
    ):
        assert key in seen, f"the walk did not reach {key}"
    assert out.pages > 100 and out.amounts > 200 and out.charts > 20, out
    assert out.csv_columns > 10, out
    assert not out.problems, f"{len(out.problems)} problems:\n" + "\n".join(out.problems)


def test_the_staff_margin_report_shows_money_in_the_currency(money_world):
    out = Findings()
    client = client_for()
    client.force_login(money_world["staff"])
    for world_org in money_world["orgs"].values():
        session = client.session
        session["current_org_id"] = world_org["org"].pk
        session.save()
        seen = _walk(client, world_org, staff=True, out=out)
        assert "analytics:margin" in seen
    assert out.amounts > 10, out
    assert not out.problems, f"{len(out.problems)} problems:\n" + "\n".join(out.problems)


def test_the_audit_log_and_invoice_history_name_amounts_in_the_currency(money_world):
    from console.kernel.money import format_amount
    from invoicing.models import Invoice

    for currency, world_org in money_world["orgs"].items():
        client = client_for(world_org["owner"])
        invoice = Invoice.objects.get(pk=world_org["values"]["invoice"])
        audit, _ = read(client.get(reverse("accounts:audit")).content.decode())
        total = format_amount(invoice.total, currency)
        assert f"total: {total}" in audit, audit
        assert f"amount: {format_amount(1_234_567, currency)}" in audit  # the credit note
        assert f"spend_cap_daily: {format_amount(100_000_000, currency)}" in audit
        detail, _ = read(
            client.get(reverse("invoicing:invoice_detail", args=[invoice.pk])).content.decode()
        )
        assert f"total: {total}" in detail
        assert str(invoice.total) not in audit + detail


def test_a_tiny_spend_is_said_to_be_under_a_cent_not_zero(db, settings):
    from tests.usage.factories import PriceFactory, event
    from usage.ingest import ingest_events
    from usage.ingest.directory import invalidate_directory
    from usage.models import CatalogModel
    from usage.prices import invalidate_price_book
    from usage.seed import seed_catalog

    # Given an organization whose only call cost 4 micro-units
    seed_catalog()
    org = OrganizationFactory(currency="USD")
    owner = MembershipFactory(organization=org, role=Role.OWNER)
    PriceFactory(
        model=CatalogModel.objects.get(name="sim-chat-small"),
        organization=org,
        input_per_mtok=PRICE_PER_MTOK,
        output_per_mtok=PRICE_PER_MTOK,
    )
    invalidate_price_book()
    invalidate_directory()
    key, _ = issue_key(Actor(owner), name="tiny")
    # An hour ago, but never before today's midnight (UTC, the organization's):
    # "today" and "this month" both hold the call whenever the test runs.
    now = timezone.now()
    when = max(now - timedelta(hours=1), now.replace(hour=0, minute=0, second=0, microsecond=0))
    ingest_events([event(key, started_at=when, input_tokens=1, output_tokens=1)])
    client = client_for(owner)
    try:
        # When the owner looks at this month's spend
        text, _ = read(client.get(reverse("analytics:chart_overview_kpis")).content.decode())
        # Then it is under a cent, not nothing
        assert "< 0.01 USD" in text, text
        assert "0.00 USD" not in text
        # And the top spenders' table tells such amounts apart (issue 38: the
        # small-amount form), still never nothing
        text, _ = read(client.get(reverse("analytics:chart_top_spenders")).content.decode())
        assert "0.000004 USD" in text, text
        assert "< 0.01 USD" not in text and "0.00 USD" not in text
    finally:
        invalidate_price_book()
        invalidate_directory()

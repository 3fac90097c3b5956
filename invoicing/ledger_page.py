"""The ledger as the balance page shows it: newest first, in the
organization's zone, usage debits (one entry per ingest batch, several a
second on a busy gateway) summed per local day with their calls, every
other entry (top-ups, grants, adjustments, credit notes, refunds) a row of
its own, and the balance after each row.

A usage row is a *run*: the usage debits of one local day with no other
entry between them. Where a top-up falls mid-day the day's usage is two
rows, one on each side of it, so the balance after every row is the
balance at that point in time, not only a sum that adds up.

The database does the summing: per window of days, one query lists the
other entries (the run boundaries), one sums the usage debits grouped by
(local day, run); nothing reads the debits one by one. Pages are keyset
(``before`` = an entry id, the oldest of the previous page's last row), so
no COUNT or OFFSET, and a page never ends inside a run."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

from django.db.models import BigIntegerField, Case, Count, Max, Q, Sum, Value, When
from django.db.models.functions import Cast, StrIndex, Substr, TruncDate
from django.utils.translation import gettext, ngettext

from invoicing.models import LedgerEntry, LedgerKind
from invoicing.rules import USAGE_REASON_RE
from invoicing.selectors import parse_id, prepaid_balance, require_billing_view

FIRST_WINDOW = timedelta(days=7)


@dataclass(frozen=True)
class LedgerRow:
    """One row: one entry, or a run of usage debits (``day`` set).
    ``balance_after`` is the balance once the row's movement is counted;
    ``cursor`` the oldest entry's id (the next page starts below it)."""

    kind: str
    kind_label: str
    at: datetime  # the newest entry's time
    day: date | None  # a run of usage debits: its local day
    amount: int
    currency: str
    entries: int
    calls: int | None  # a run: the calls its debits name (None if one does not say)
    reference: str
    reason: str
    created_by: str
    balance_after: int
    cursor: int | None

    @property
    def grouped(self) -> bool:
        return self.day is not None


@dataclass(frozen=True)
class LedgerPage:
    rows: list[LedgerRow]
    older: int | None  # ``before`` for the next page; None on the last one


def _older(at: datetime, pk: int | None = None) -> Q:
    """Entries before the position (``at``, ``pk``) in newest-first order;
    without ``pk``, everything before the instant ``at``."""
    if pk is None:
        return Q(created_at__lt=at)
    return Q(created_at__lt=at) | Q(created_at=at, id__lt=pk)


def _day_start(at: datetime, tz: tzinfo) -> datetime:
    return datetime.combine(at.astimezone(tz).date(), time.min, tzinfo=tz)


_CALLS = Case(
    When(
        reason__regex=USAGE_REASON_RE,
        then=Cast(Substr("reason", 1, StrIndex("reason", Value(" ")) - 1), BigIntegerField()),
    ),
    default=Value(0),
    output_field=BigIntegerField(),
)


def _runs(window, boundaries: list, tz: tzinfo):
    """The usage debits of ``window`` summed per (local day, run); a run's
    number is how many boundaries (other entries) are newer than it."""
    run = Case(
        *(When(~_older(b.created_at, b.pk), then=Value(i)) for i, b in enumerate(boundaries)),
        default=Value(len(boundaries)),
    )
    return (
        window.filter(kind=LedgerKind.USAGE)
        .annotate(day=TruncDate("created_at", tzinfo=tz), run=run)
        .values("day", "run")
        .annotate(
            amount=Sum("amount"),
            entries=Count("id"),
            newest=Max("created_at"),
            calls=Sum(_CALLS),
            unsaid=Count("id", filter=~Q(reason__regex=USAGE_REASON_RE)),
        )
        .order_by()
    )


def ledger_page(*, actor, tzinfo: tzinfo, before=None, size: int = 50) -> LedgerPage:
    """``size`` rows of the actor's organization's ledger from the entry
    ``before`` (an id) down, newest first."""
    require_billing_view(actor)
    base = LedgerEntry.objects.filter(organization_id=actor.organization_id)
    position: Q | None = None
    pk = parse_id(before)
    anchor = base.filter(pk=pk).values_list("created_at", "id").first() if pk else None
    if anchor:
        position = _older(*anchor)
        balance = int(base.filter(position).aggregate(s=Sum("amount"))["s"] or 0)
    else:
        balance = prepaid_balance(actor.organization_id)
    currency = actor.organization.currency
    items: list[tuple] = []  # ("entry" or "run", it, its window, the window's boundaries)
    span = FIRST_WINDOW
    while len(items) <= size:
        below = base.filter(position) if position is not None else base
        head = below.order_by("-created_at", "-id").values_list("created_at", flat=True).first()
        if head is None:
            break
        start = _day_start(head - span, tzinfo)
        window = below.filter(created_at__gte=start)
        others = list(
            window.exclude(kind=LedgerKind.USAGE)
            .select_related("created_by")
            .order_by("-created_at", "-id")[: size + 1]
        )
        if len(others) > size:  # enough rows: look no further than the last one needed
            last = others[-1]
            window = window.filter(~_older(last.created_at, last.pk))
        ordered: list[tuple] = []
        for r in _runs(window, others, tzinfo):
            ordered.append(((r["run"] * 2, -r["day"].toordinal()), "run", r))
        for i, e in enumerate(others):
            ordered.append(((i * 2 + 1, 0), "entry", e))
        ordered.sort(key=lambda t: t[0])
        for _, what, obj in ordered:
            items.append((what, obj, window, others))
        position = Q(created_at__lt=start)  # (a cut window has given enough rows)
        span *= 2
    rows = []
    for what, obj, _, _ in items[:size]:
        row = _entry_row(obj, balance) if what == "entry" else _run_row(obj, currency, balance)
        rows.append(row)
        balance -= row.amount
    older = None
    if len(items) > size:
        what, obj, window, others = items[size - 1]
        older = obj.pk if what == "entry" else _oldest_of_run(window, others, obj, tzinfo)
    return LedgerPage(rows=rows, older=older)


# How the services word the reasons they write themselves (stored in English):
# a page words them again in the reader's language. A person's own reason
# (a grant's, an adjustment's, a credit note's) stays as typed.
_CARD_TOP_UP = re.compile(r"Card top-up \(payment (?P<id>\d+)\)")
_BANK_TOP_UP = re.compile(r"Bank transfer top-up (?P<reference>.+)", re.S)
_CREDIT_NOTE = re.compile(r"Credit note (?P<number>\S+): (?P<reason>.*)", re.S)


def reason_text(reason: str) -> str:
    """A ledger entry's reason for a page, in the active language."""
    if re.fullmatch(USAGE_REASON_RE.strip("^$"), reason):
        calls = int(reason.split()[0])
        return ngettext("%(calls)s call", "%(calls)s calls", calls) % {"calls": calls}
    if found := _CARD_TOP_UP.fullmatch(reason):
        return gettext("Card top-up (payment %(id)s)") % {"id": found["id"]}
    if found := _BANK_TOP_UP.fullmatch(reason):
        return gettext("Bank transfer top-up %(reference)s") % {"reference": found["reference"]}
    if found := _CREDIT_NOTE.fullmatch(reason):
        return gettext("Credit note %(number)s: %(reason)s") % {
            "number": found["number"],
            "reason": found["reason"],
        }
    return reason


def _entry_row(entry, balance: int) -> LedgerRow:
    return LedgerRow(
        kind=entry.kind,
        kind_label=entry.get_kind_display(),
        at=entry.created_at,
        day=None,
        amount=entry.amount,
        currency=entry.currency,
        entries=1,
        calls=None,
        reference=entry.reference,
        reason=reason_text(entry.reason),
        created_by=entry.created_by.email if entry.created_by_id else "",
        balance_after=balance,
        cursor=entry.pk,
    )


def _run_row(run: dict, currency: str, balance: int) -> LedgerRow:
    return LedgerRow(
        kind=LedgerKind.USAGE,
        kind_label=LedgerKind.USAGE.label,
        at=run["newest"],
        day=run["day"],
        amount=run["amount"],
        currency=currency,
        entries=run["entries"],
        calls=None if run["unsaid"] else run["calls"],
        reference="",
        reason="",
        created_by="",
        balance_after=balance,
        cursor=None,
    )


def _oldest_of_run(window, boundaries, run: dict, tz: tzinfo) -> int | None:
    """The id of a run's oldest debit: where the next page starts."""
    lower = boundaries[run["run"]] if run["run"] < len(boundaries) else None
    upper = boundaries[run["run"] - 1] if run["run"] > 0 else None
    start = datetime.combine(run["day"], time.min, tzinfo=tz)
    end = datetime.combine(run["day"] + timedelta(days=1), time.min, tzinfo=tz)
    qs = window.filter(kind=LedgerKind.USAGE, created_at__gte=start, created_at__lt=end)
    if upper is not None:
        qs = qs.filter(_older(upper.created_at, upper.pk))
    if lower is not None:
        qs = qs.filter(~_older(lower.created_at, lower.pk))
    return qs.order_by("created_at", "id").values_list("id", flat=True).first()

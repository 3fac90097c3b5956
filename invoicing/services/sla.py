"""The SLA ledger: a monthly availability target per organization, measured
from the hourly rollups, and a credit drafted when a closed month misses it.

**Availability** is the share of calls not failed by the platform or an
upstream: a call answered 5xx (an upstream error, a timeout, the gateway's
own failure, a queue timeout) is failed; a client error (4xx: a bad request,
a rate limit, a spend cap) is the client's and counts as served. In parts
per million, integers throughout: the month misses its target when
``served * 1_000_000 < target_ppm * calls``. A month without calls meets it.
Calls are billed calls: the rollups hold no load-test call marked "not
billed" (``is_test``), and ``failed_calls`` lists none, so a load test
driven past its knee costs no credit.

**Failure budget**: the failed calls the target allows for the calls so far,
``calls * (1_000_000 - target_ppm) // 1_000_000``, and what is left of it.

**Latency bound** (optional): the month's p99 time to first token, from the
hourly TTFT sketches (within 1 % of the exact value), rounded up to the
millisecond; a month over its bound is breached too.

**Credit schedule** (the conventional tiered service credit, as a share of
the month's invoice total): below the target 10 %, below 99 % 25 %, below
95 % 50 % (a tier applies only below the organization's own target); over
the p99 TTFT bound, at least the first tier (10 %).
The credit is ``invoice.total * rate`` rounded half up to the micro-unit
(``invoicing.money.div_round``), never more than what is left to credit.

**Month close**: once an organization's month (in its time zone) has ended
and the invoicing grace period is over, ``sla_evaluate_closed`` (beat,
hourly) evaluates it once: one ``SlaMonth`` row per organization and month,
so evaluating again (the beat, or staff's "evaluate now") never drafts a
second credit. A breach is drafted; finance approves it, which issues a
credit note on that month's invoice through the credit-note mechanism
(``credit_notes.draft_note`` / ``issue_note``: the invoice's amount due falls by
it, or it is refunded when paid), listing the failed calls' request ids;
or dismisses it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone as tz
from django.utils.translation import gettext as _

from accounts.facade import NotFound, Organization, Perm, ValidationFailed, audit_record
from console.kernel.money import PPM, format_amount
from invoicing.models import Invoice, InvoiceStatus, SlaMonth, SlaStatus, SlaTarget
from invoicing.models.sla import SLA_CREDIT_TEXT, SLA_TTFT_TEXT, percent_text
from invoicing.money import div_round
from invoicing.services._common import org_zone, period_bounds, period_of, previous_period
from invoicing.services.credit_notes import draft_note, issue_note, lock_creditable_invoice
from usage import facade as usage

# (availability below this, share of the invoice credited), checked in order;
# ``None`` stands for the organization's own target.
CREDIT_SCHEDULE: tuple[tuple[int | None, int], ...] = (
    (950_000, 500_000),
    (990_000, 250_000),
    (None, 100_000),
)
# A month over its p99 TTFT bound is credited at least this share.
TTFT_CREDIT_PPM = 100_000


def targets_for(organization_id: int) -> tuple[int, int]:
    """The organization's availability target (ppm) and p99 TTFT bound (ms,
    0: none): staff's override, else the platform defaults."""
    override = SlaTarget.objects.filter(organization_id=organization_id).first()
    ppm = settings.SLA_AVAILABILITY_TARGET_PPM
    bound = settings.SLA_TTFT_P99_MS
    if override is not None:
        ppm = override.availability_ppm
        if override.ttft_p99_ms is not None:
            bound = override.ttft_p99_ms
    return ppm, bound


def below(served: int, calls: int, threshold_ppm: int) -> bool:
    """Whether ``served / calls`` is below ``threshold_ppm`` (exact, in integers)."""
    return calls > 0 and served * PPM < threshold_ppm * calls


def credit_rate_ppm(served: int, calls: int, target_ppm: int) -> int:
    """The share of the invoice the schedule credits (0: the target was met)."""
    if not below(served, calls, target_ppm):
        return 0
    for threshold, rate in CREDIT_SCHEDULE:
        if below(served, calls, target_ppm if threshold is None else threshold):
            return rate
    return 0


@dataclass(frozen=True)
class SlaDay:
    start: datetime
    calls: int
    failed: int

    @property
    def availability_ppm(self) -> int:
        return availability_ppm(self.calls - self.failed, self.calls)


@dataclass(frozen=True)
class SlaFigures:
    """A month (or the part of it so far) against the target."""

    organization_id: int
    period: str
    start: datetime
    end: datetime
    target_ppm: int
    calls: int
    failed: int
    days: tuple[SlaDay, ...]
    ttft_bound_ms: int = 0  # 0: no bound
    ttft_p99_ms: int | None = None  # None: no call measured one

    @property
    def served(self) -> int:
        return self.calls - self.failed

    @property
    def availability_ppm(self) -> int:
        return availability_ppm(self.served, self.calls)

    @property
    def budget(self) -> int:
        """Failed calls the target allows for the calls so far."""
        return self.calls * (PPM - self.target_ppm) // PPM

    @property
    def budget_left(self) -> int:
        """Negative when the month is over budget."""
        return self.budget - self.failed

    @property
    def availability_breached(self) -> bool:
        return below(self.served, self.calls, self.target_ppm)

    @property
    def ttft_breached(self) -> bool:
        return bool(self.ttft_bound_ms) and ttft_over(self.ttft_p99_ms, self.ttft_bound_ms)

    @property
    def breached(self) -> bool:
        return self.availability_breached or self.ttft_breached

    @property
    def credit_rate_ppm(self) -> int:
        rate = credit_rate_ppm(self.served, self.calls, self.target_ppm)
        return max(rate, TTFT_CREDIT_PPM) if self.ttft_breached else rate


def ttft_over(p99_ms: int | None, bound_ms: int) -> bool:
    return bool(bound_ms) and p99_ms is not None and p99_ms > bound_ms


def availability_ppm(served: int, calls: int) -> int:
    """Rounded down: a month just under its target never reads as meeting it."""
    return served * PPM // calls if calls else PPM


def sla_figures(organization: Organization, period: str, *, now: datetime | None = None):
    """The month ``period`` (in the organization's time zone) from the hourly
    rollups: calls, failed calls (5xx) and each day's, up to ``now``, and
    the p99 time to first token."""
    start, end = period_bounds(period, organization.timezone)
    upto = min(end, now or tz.now())
    zone = org_zone(organization.timezone)
    target_ppm, bound_ms = targets_for(organization.pk)
    ttft = None
    if upto <= start:
        days: tuple[SlaDay, ...] = ()
        calls = failed = 0
    else:
        s = usage.series(
            organization.pk,
            start,
            upto,
            bucket="day",
            tz=zone,
            whole=True,
            sums=("calls", "calls_5xx"),
            hists=("ttft",),
            quantiles=(0.99,),
        )
        whole = s.whole[None]
        calls, failed = whole["calls"], whole["calls_5xx"]
        p99 = whole["ttft_ms"][0.99]
        ttft = math.ceil(p99) if p99 is not None else None
        days = tuple(
            SlaDay(start=p["start"], calls=p["calls"], failed=p["calls_5xx"])
            for p in s.groups[None]
        )
    return SlaFigures(
        organization_id=organization.pk,
        period=period,
        start=start,
        end=end,
        target_ppm=target_ppm,
        calls=calls,
        failed=failed,
        days=days,
        ttft_bound_ms=bound_ms,
        ttft_p99_ms=ttft,
    )


def current_period(organization: Organization, now: datetime | None = None) -> str:
    return period_of(now or tz.now(), organization.timezone)


def failed_calls(organization_id: int, start: datetime, end: datetime) -> list[usage.FailedCall]:
    """The month's calls failed by the platform or an upstream (the ones the
    figures count as failed), oldest first."""
    return usage.failed_billed_calls(organization_id, start, end)


def month_invoice(organization_id: int, period: str) -> Invoice | None:
    return (
        Invoice.objects.filter(organization_id=organization_id, period=period)
        .exclude(status=InvoiceStatus.VOID)
        .first()
    )


def credit_amount(month: SlaMonth, invoice: Invoice | None) -> int:
    """What approving ``month``'s credit would credit on ``invoice`` now
    (micro-units): the rate of its total, round half up, at most what is
    left to credit. 0 without an invoice."""
    if invoice is None or not month.credit_rate_ppm:
        return 0
    amount = div_round(invoice.total * month.credit_rate_ppm, PPM)
    return max(0, min(amount, invoice.total - invoice.credited))


def _closed(organization: Organization, period: str, now: datetime) -> bool:
    _start, end = period_bounds(period, organization.timezone)
    return now >= end


def _month_values(figures: SlaFigures, now: datetime) -> dict[str, Any]:
    """An evaluated month's fields from its figures: met, or a drafted credit."""
    return {
        "calls": figures.calls,
        "failed_calls": figures.failed,
        "availability_ppm": figures.availability_ppm,
        "target_ppm": figures.target_ppm,
        "ttft_p99_ms": figures.ttft_p99_ms,
        "ttft_bound_ms": figures.ttft_bound_ms,
        "credit_rate_ppm": figures.credit_rate_ppm,
        "status": SlaStatus.DRAFTED if figures.breached else SlaStatus.MET,
        "evaluated_at": now,
    }


def sla_evaluate(
    *, organization_id: int, period: str, actor=None, now: datetime | None = None
) -> SlaMonth:
    """Evaluate one closed month: writes its ``SlaMonth`` (met, or a drafted
    credit). Again on the same month: the figures are refreshed while the
    credit is still a draft (late calls), a decided one is left as it is;
    never a second row. ``actor``: platform staff ("evaluate now")."""
    now = now or tz.now()
    org = Organization.objects.filter(pk=organization_id).first()
    if org is None:
        raise NotFound("No such organization.")
    if not _closed(org, period, now):
        raise ValidationFailed.from_fields(
            {
                "period": _("%(period)s has not ended yet; a month is evaluated once it is over.")
                % {"period": period}
            }
        )
    values = _month_values(sla_figures(org, period, now=now), now)
    with transaction.atomic():
        month = (
            SlaMonth.objects.select_for_update()
            .filter(organization_id=org.pk, period=period)
            .first()
        )
        if month is None:
            try:
                with transaction.atomic():
                    month = SlaMonth.objects.create(organization_id=org.pk, period=period, **values)
            except IntegrityError:  # evaluated concurrently: that one stands
                return SlaMonth.objects.get(organization_id=org.pk, period=period)
        elif month.status in (SlaStatus.MET, SlaStatus.DRAFTED):
            for name, value in values.items():
                setattr(month, name, value)
            month.save(update_fields=list(values))
        else:
            return month
        if actor is not None:
            audit_record(
                actor=actor,
                action="sla.evaluate",
                target=month,
                params={
                    "period": period,
                    "availability": percent_text(month.availability_ppm),
                    "target": percent_text(month.target_ppm),
                    "status": month.status,
                },
            )
    return month


def sla_evaluate_closed(*, now: datetime | None = None) -> int:
    """The beat's month close: every active organization's month just ended
    (in its time zone), once the invoicing grace period is over, evaluated
    if it has not been. Returns how many months were evaluated."""
    now = now or tz.now()
    grace = timedelta(hours=settings.INVOICING_GRACE_HOURS)
    done = 0
    for org in Organization.objects.filter(is_active=True).order_by("pk"):
        period = previous_period(period_of(now, org.timezone))
        _start, end = period_bounds(period, org.timezone)
        if now < end + grace:
            continue
        if SlaMonth.objects.filter(organization_id=org.pk, period=period).exists():
            continue
        sla_evaluate(organization_id=org.pk, period=period, now=now)
        done += 1
    return done


def _month_for_decision(month_id: int, actor) -> SlaMonth:
    actor.require(Perm.BILLING_MANAGE)
    month = (
        SlaMonth.objects.select_for_update()
        .filter(pk=month_id, organization_id=actor.organization_id)
        .first()
    )
    if month is None:
        raise NotFound(_("No such SLA month."))
    if month.status != SlaStatus.DRAFTED:
        raise ValidationFailed.from_fields(
            {
                "__all__": _("This month's SLA credit is already %(status)s.")
                % {"status": month.get_status_display().lower()}
            }
        )
    return month


def sla_credit_approve(*, month_id: int, actor):
    """Finance approves a drafted SLA credit: one credit note on the month's
    invoice for the computed amount, listing the failed calls."""
    with transaction.atomic():
        month = _month_for_decision(month_id, actor)
        invoice = month_invoice(month.organization_id, month.period)
        if invoice is None or invoice.status == InvoiceStatus.DRAFT:
            raise ValidationFailed.from_fields(
                {
                    "__all__": _(
                        "Finalize the invoice for %(period)s first: the credit is a "
                        "credit note on it."
                    )
                    % {"period": month.period}
                }
            )
        invoice = lock_creditable_invoice(invoice.pk, actor)
        amount = credit_amount(month, invoice)
        if amount <= 0:
            raise ValidationFailed.from_fields(
                {"__all__": _("Nothing is left to credit on this invoice.")}
            )
        start, end = period_bounds(month.period, month.organization.timezone)
        ids = [call.request_id for call in failed_calls(month.organization_id, start, end)]
        text = SLA_CREDIT_TEXT.format(
            period=month.period,
            availability=percent_text(month.availability_ppm),
            target=percent_text(month.target_ppm),
            rate=percent_text(month.credit_rate_ppm),
            failed=month.failed_calls,
        )
        if ttft_over(month.ttft_p99_ms, month.ttft_bound_ms):
            text += SLA_TTFT_TEXT.format(ttft=month.ttft_p99_ms, bound=month.ttft_bound_ms)
        reason = f"SLA breach {month.period}"
        draft = draft_note(invoice, reason=reason, lines=[(text, amount, None, ids)])
        note = issue_note(invoice, draft, actor=actor, reason=reason)
        month.status = SlaStatus.APPROVED
        month.credit_amount = amount
        month.credit_note = note
        month.decided_by = actor.user
        month.decided_at = tz.now()
        month.save(
            update_fields=["status", "credit_amount", "credit_note", "decided_by", "decided_at"]
        )
        audit_record(
            actor=actor,
            action="sla.approve",
            target=month,
            params={
                "period": month.period,
                "credit_note": note.number,
                "amount": format_amount(amount, invoice.currency),
            },
        )
        return note


def sla_credit_dismiss(*, month_id: int, actor) -> SlaMonth:
    """Finance dismisses a drafted SLA credit (nothing is credited)."""
    with transaction.atomic():
        month = _month_for_decision(month_id, actor)
        month.status = SlaStatus.DISMISSED
        month.decided_by = actor.user
        month.decided_at = tz.now()
        month.save(update_fields=["status", "decided_by", "decided_at"])
        audit_record(
            actor=actor, action="sla.dismiss", target=month, params={"period": month.period}
        )
        return month


def sla_target_set(
    *,
    organization_id: int,
    availability_ppm: int | None,
    actor,
    ttft_p99_ms: int | None = None,
) -> None:
    """Platform staff set an organization's targets: ``availability_ppm``
    (``None``: back to the defaults, both) and ``ttft_p99_ms`` (ms, 0: no
    bound, ``None``: the platform default)."""
    if availability_ppm is not None and (
        type(availability_ppm) is not int or not 500_000 <= availability_ppm <= PPM
    ):
        raise ValidationFailed.from_fields(
            {"target": _("Give a target between 50 and 100 percent.")}
        )
    if ttft_p99_ms is not None and (
        type(ttft_p99_ms) is not int or not 0 <= ttft_p99_ms <= 600_000
    ):
        raise ValidationFailed.from_fields(
            {"ttft": _("Give the p99 TTFT bound in milliseconds, at most 600000 (0: none).")}
        )
    with transaction.atomic():
        if availability_ppm is None:
            SlaTarget.objects.filter(organization_id=organization_id).delete()
        else:
            SlaTarget.objects.update_or_create(
                organization_id=organization_id,
                defaults={
                    "availability_ppm": availability_ppm,
                    "ttft_p99_ms": ttft_p99_ms,
                    "updated_by": actor.user,
                    "updated_at": tz.now(),
                },
            )
        audit_record(
            actor=actor,
            action="sla.target",
            target=Organization.objects.get(pk=organization_id),
            params={
                "target": percent_text(availability_ppm) if availability_ppm else "default",
                "ttft_p99_ms": ttft_p99_ms,
            },
        )

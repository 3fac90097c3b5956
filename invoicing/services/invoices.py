"""Invoice lifecycle: draft → finalized (numbered, immutable, PDF) → paid,
void or uncollectible; and the monthly run that drafts every organization.

Locks are always taken in one order — the invoice row, then the year's
sequence row, then adjustment rows — so two workers cannot deadlock."""

from __future__ import annotations

import logging
from datetime import date, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone as tz
from django.utils.translation import gettext as _

from accounts.facade import Conflict, NotFound, Organization, Perm, ValidationFailed, audit_record
from console.kernel.celery import registered_task
from console.kernel.money import format_amount
from invoicing import stripe_adapter
from invoicing.models import (
    BillingProfile,
    DocumentLanguage,
    Invoice,
    InvoiceLine,
    InvoiceSequence,
    InvoiceStatus,
    Payment,
    PaymentKind,
    PaymentMethod,
    PaymentStatus,
)
from invoicing.pdf import invoice_pdf
from invoicing.rules import finalize_blocker
from invoicing.services import outbound
from invoicing.services._common import (
    event,
    local_noon,
    local_today,
    org_zone,
    period_bounds,
    period_of,
)
from invoicing.services._payments import paid_on_day, require_free_reference, save_with_reference
from invoicing.services.compute import Computed, compute_invoice
from usage.facade import (
    close_period,
    lock_unbilled_adjustments,
    mark_adjustments_billed,
    release_adjustments,
)

logger = logging.getLogger(__name__)


def _check_actor(actor, organization_id: int) -> None:
    if actor is None:
        return
    actor.require(Perm.BILLING_MANAGE)
    if actor.organization_id != organization_id:
        raise NotFound("No such invoice.")


def _write(invoice: Invoice, computed: Computed) -> None:
    for name in (
        "calls",
        "usage_amount",
        "adjustment_amount",
        "subtotal",
        "discount_ppm",
        "discount_amount",
        "tax_rate_ppm",
        "tax_amount",
        "total",
        "credits_applied",
        "amount_due_initial",
        "amount_due_initial_minor",
    ):
        setattr(invoice, name, getattr(computed, name))
    invoice.currency = computed.currency
    invoice.refreshed_at = tz.now()
    invoice.save()
    invoice.lines.all().delete()
    InvoiceLine.objects.bulk_create(
        [
            InvoiceLine(
                invoice=invoice,
                position=i,
                kind=line.kind,
                description=line.description[:255],
                model=line.model,
                token_class=line.token_class,
                price_id=line.price_id,
                quantity=line.quantity,
                unit_price_per_mtok=line.unit_price_per_mtok,
                amount=line.amount,
                adjustment_ids=line.adjustment_ids,
            )
            for i, line in enumerate(computed.lines, start=1)
        ]
    )


def invoice_preview(*, organization_id: int, period: str | None = None) -> Computed:
    """The invoice a month would get, computed now and stored nowhere (the
    running month by default)."""
    org = Organization.objects.get(pk=organization_id)
    period = period or period_of(tz.now(), org.timezone)
    start, end = period_bounds(period, org.timezone)
    return compute_invoice(org, start, end)


def invoice_draft(*, organization_id: int, period: str, actor=None) -> Invoice:
    """The organization's live invoice for ``period``: created as a draft, or
    refreshed if it is a draft already; a finalized one is returned as is."""
    _check_actor(actor, organization_id)
    org = Organization.objects.get(pk=organization_id)
    start, end = period_bounds(period, org.timezone)
    for _attempt in range(2):
        with transaction.atomic():
            invoice = (
                Invoice.objects.select_for_update()
                .filter(organization=org, period=period)
                .exclude(status=InvoiceStatus.VOID)
                .first()
            )
            if invoice is not None and invoice.status != InvoiceStatus.DRAFT:
                return invoice
            computed = compute_invoice(org, start, end)
            if invoice is None:
                try:
                    with transaction.atomic():
                        invoice = Invoice.objects.create(
                            organization=org,
                            period=period,
                            period_start=start,
                            period_end=end,
                            currency=org.currency,
                        )
                except IntegrityError:
                    continue  # another worker created it: lock theirs and refresh
                event(invoice, "drafted", actor)
            _write(invoice, computed)
            return invoice
    raise Conflict(_("The invoice is being drafted by another worker; try again."))


def _locked(invoice_id: int, actor=None) -> Invoice:
    invoice = Invoice.objects.select_for_update().filter(pk=invoice_id).first()
    if invoice is None:
        raise NotFound("No such invoice.")
    _check_actor(actor, invoice.organization_id)
    return invoice


def _name(invoice: Invoice) -> str:
    """How a message names an invoice: its number, or its month while it has none."""
    return invoice.number or _("the %(period)s draft") % {"period": invoice.period}


def invoice_refresh(*, invoice_id: int, actor=None) -> Invoice:
    with transaction.atomic():
        invoice = _locked(invoice_id, actor)
        if invoice.status == InvoiceStatus.VOID:
            raise Conflict(
                _("This invoice (%(name)s) is void; draft %(period)s again instead.")
                % {"name": _name(invoice), "period": invoice.period}
            )
        if invoice.status != InvoiceStatus.DRAFT:
            raise Conflict(
                _("Invoice %(name)s is %(status)s; correct it with a credit note.")
                % {"name": _name(invoice), "status": invoice.get_status_display().lower()}
            )
        org = invoice.organization
        _write(invoice, compute_invoice(org, invoice.period_start, invoice.period_end))
        event(invoice, "refreshed", actor)
    return invoice


def _next_number(year: int) -> str:
    # Create the year's row if missing without failing a concurrent creator,
    # then lock it: whoever holds it takes the next number, the rest wait.
    InvoiceSequence.objects.bulk_create([InvoiceSequence(year=year)], ignore_conflicts=True)
    seq = InvoiceSequence.objects.select_for_update().get(year=year)
    seq.last_number += 1
    seq.save(update_fields=["last_number"])
    return f"INV-{year:04d}-{seq.last_number:06d}"


def _buyer(org: Organization) -> dict:
    profile = BillingProfile.objects.filter(organization=org).first()
    return {
        "name": org.name,
        "legal_name": (profile.legal_name if profile else "") or org.name,
        "address": profile.address if profile else "",
        "tax_id": profile.tax_id if profile else "",
        "email": profile.billing_email if profile else "",
        # The language of the invoice's PDF and of its credit notes' PDFs.
        "language": profile.document_language if profile else DocumentLanguage.EN,
    }


def invoice_finalize(*, invoice_id: int, actor=None) -> Invoice:
    """Refresh the draft one last time, number it (gapless per year, under
    the sequence row's lock), close its period for re-rating, mark the
    adjustments it bills, and make its PDF. From here on it is immutable.

    Only once the month has ended plus the grace period (``finalize_blocker``):
    before that it raises ``Conflict`` (code ``period_open``)."""
    with transaction.atomic():
        invoice = _locked(invoice_id, actor)
        if invoice.status != InvoiceStatus.DRAFT:
            raise Conflict(
                _("This invoice is already %(status)s (%(name)s).")
                % {"status": invoice.get_status_display().lower(), "name": _name(invoice)}
            )
        blocker = finalize_blocker(invoice)
        if blocker:
            raise Conflict(blocker, code="period_open")
        org = invoice.organization
        computed = compute_invoice(org, invoice.period_start, invoice.period_end)
        _write(invoice, computed)
        if computed.adjustment_ids:
            locked = lock_unbilled_adjustments(computed.adjustment_ids)
            if len(locked) != len(computed.adjustment_ids):
                raise Conflict(_("Some adjustments were billed meanwhile; refresh the draft."))
        now = tz.now()
        local = now.astimezone(org_zone(org.timezone))
        invoice.number = _next_number(local.year)
        if computed.adjustment_ids:
            mark_adjustments_billed(computed.adjustment_ids, invoice.number)
        profile = BillingProfile.objects.filter(organization=org).first()
        terms = profile.payment_terms_days if profile else 14
        invoice.status = InvoiceStatus.FINALIZED
        invoice.issued_at = now
        invoice.due_at = now + timedelta(days=terms)
        invoice.buyer = _buyer(org)
        if invoice.amount_due_minor == 0:
            invoice.status = InvoiceStatus.PAID
            invoice.paid_at = now
        invoice.save()
        close_period(org.pk, invoice.period_start, invoice.period_end, invoice.number)
        invoice.pdf = invoice_pdf(invoice)
        invoice.save(update_fields=["pdf"])
        _announce_finalized(invoice, actor)
        if invoice.status == InvoiceStatus.FINALIZED and invoice.amount_due_minor > 0:
            invoice_id_ = invoice.pk
            transaction.on_commit(lambda: _enqueue_collection(invoice_id_))
    return invoice


def _announce_finalized(invoice: Invoice, actor) -> None:
    """A finalized invoice in its history, to the webhooks (finalized, and paid
    when nothing is due) and, for a person's action, in the audit trail."""
    event(
        invoice,
        "finalized",
        actor,
        number=invoice.number,
        total=format_amount(invoice.total, invoice.currency),
    )
    outbound.invoice_event(invoice, "invoice.finalized")
    if invoice.status == InvoiceStatus.PAID:
        outbound.invoice_event(invoice, "invoice.paid")
    if actor is not None:
        audit_record(
            actor=actor,
            action="invoice.finalize",
            target=invoice,
            params={
                "total": format_amount(invoice.total, invoice.currency),
                "amount_due": format_amount(
                    invoice.amount_due_minor, invoice.currency, unit="minor"
                ),
            },
        )


def _enqueue_collection(invoice_id: int) -> None:
    """Charge the card on file when Stripe is on (a Stripe outage leaves the
    invoice finalized; the task retries). A broker that cannot take the task
    leaves it to the beat retry, which collects finalized invoices that have
    no payment yet (``payments_retry_pending``)."""
    if not stripe_adapter.enabled():
        return
    try:
        registered_task("invoicing.collect_invoice").delay(invoice_id)
    except Exception:  # the invoice is committed; the beat retry collects it later
        logger.exception("could not enqueue collection of invoice %s", invoice_id)


def invoice_void(*, invoice_id: int, actor=None, reason: str = "") -> Invoice:
    """Void a draft or an unpaid, uncredited finalized invoice. Its number stays
    used (gapless); the adjustments it billed are released for the re-issue."""
    with transaction.atomic():
        invoice = _locked(invoice_id, actor)
        if invoice.status in (InvoiceStatus.VOID, InvoiceStatus.PAID):
            raise Conflict(
                _("A %(status)s invoice cannot be voided; issue a credit note.")
                % {"status": invoice.get_status_display().lower()}
            )
        if invoice.paid_minor or invoice.credit_notes.exists():
            raise Conflict(_("This invoice has payments or credit notes; issue a credit note."))
        if invoice.payments.filter(status=PaymentStatus.PENDING).exists():
            raise Conflict(_("A payment is in progress for this invoice; wait for it to settle."))
        if invoice.number:
            release_adjustments(invoice.number)
        invoice.status = InvoiceStatus.VOID
        invoice.voided_at = tz.now()
        invoice.save(update_fields=["status", "voided_at"])
        event(invoice, "voided", actor, reason=reason)
        if actor is not None:
            audit_record(
                actor=actor, action="invoice.void", target=invoice, params={"reason": reason}
            )
    return invoice


def invoice_mark_uncollectible(*, invoice_id: int, actor=None, reason: str = "") -> Invoice:
    with transaction.atomic():
        invoice = _locked(invoice_id, actor)
        if invoice.status != InvoiceStatus.FINALIZED:
            raise Conflict(
                _("Only an open invoice can be marked uncollectible (%(status)s).")
                % {"status": invoice.get_status_display().lower()}
            )
        invoice.status = InvoiceStatus.UNCOLLECTIBLE
        invoice.save(update_fields=["status"])
        event(invoice, "uncollectible", actor, reason=reason)
        if actor is not None:
            audit_record(
                actor=actor,
                action="invoice.mark_uncollectible",
                target=invoice,
                params={
                    "reason": reason,
                    "amount_due": format_amount(
                        invoice.amount_due_minor, invoice.currency, unit="minor"
                    ),
                },
            )
    return invoice


def _apply_payment(invoice: Invoice, amount_minor: int, *, paid_at=None) -> None:
    """``paid_at``: when the invoice counts as paid if this pays it off (now
    unless finance recorded an earlier day)."""
    invoice.paid_minor += amount_minor
    if invoice.amount_due_minor == 0 and invoice.status in (
        InvoiceStatus.FINALIZED,
        InvoiceStatus.UNCOLLECTIBLE,
    ):
        invoice.status = InvoiceStatus.PAID
        invoice.paid_at = paid_at or tz.now()
        outbound.invoice_event(invoice, "invoice.paid")
    invoice.save(update_fields=["paid_minor", "status", "paid_at"])


def invoice_mark_paid(
    *,
    invoice_id: int,
    actor=None,
    reference: str,
    method: str = PaymentMethod.BANK_TRANSFER,
    amount_minor: int | None = None,
    paid_on: date | None = None,
) -> Payment:
    """Record a payment finance received by hand (bank transfer, with its
    reference, on ``paid_on``: default today in the organization's time
    zone; not in the future, not before the invoice was issued).

    The reference is unique in the organization: a transfer already
    recorded (for this invoice, another one, a top-up) is refused with what
    it was recorded for, also when two submissions race (the database's
    constraint decides, see ``_payments``)."""
    reference = (reference or "").strip()[:128]
    if not reference:
        raise ValidationFailed.from_fields({"reference": "Give the transfer's reference."})
    if method not in (PaymentMethod.BANK_TRANSFER, PaymentMethod.OTHER):
        raise ValidationFailed.from_fields({"method": "Record bank transfers or other payments."})
    with transaction.atomic():
        invoice = _locked(invoice_id, actor)
        if invoice.status not in (InvoiceStatus.FINALIZED, InvoiceStatus.UNCOLLECTIBLE):
            raise Conflict(
                _("A %(status)s invoice takes no payment.")
                % {"status": invoice.get_status_display().lower()}
            )
        zone = invoice.organization.timezone
        day = paid_on_day(
            paid_on,
            timezone_name=zone,
            not_before=invoice.issued_at,
            not_before_what=_("the invoice was issued"),
        )
        amount = _payment_amount(invoice, amount_minor)
        require_free_reference(invoice.organization_id, reference)
        payment = save_with_reference(
            Payment(
                organization_id=invoice.organization_id,
                invoice=invoice,
                kind=PaymentKind.INVOICE,
                method=method,
                status=PaymentStatus.SUCCEEDED,
                currency=invoice.currency,
                amount_minor=amount,
                reference=reference,
                paid_on=day,
                created_by=getattr(actor, "user", None),
            )
        )
        paid_at = None if day == local_today(zone) else local_noon(day, zone)
        _apply_payment(invoice, amount, paid_at=paid_at)
        _announce_payment(invoice, payment, actor)
    return payment


def _payment_amount(invoice: Invoice, amount_minor: int | None) -> int:
    """The amount a manual payment records: all that is due when not given;
    refused when not above zero or above what is due."""
    due = invoice.amount_due_minor
    amount = due if amount_minor is None else amount_minor
    if amount <= 0 or amount > due:
        owed = format_amount(due, invoice.currency, unit="minor")
        raise ValidationFailed.from_fields(
            {"amount": f"Enter an amount above zero and at most what is due ({owed})."}
        )
    return amount


def _announce_payment(invoice: Invoice, payment: Payment, actor) -> None:
    """A manual payment in the invoice's history and, for a person's action,
    in the audit trail."""
    shown = format_amount(payment.amount_minor, invoice.currency, unit="minor")
    paid_on = payment.paid_on.isoformat()
    event(
        invoice,
        "payment_recorded",
        actor,
        amount=shown,
        reference=payment.reference,
        paid_on=paid_on,
    )
    if actor is not None:
        audit_record(
            actor=actor,
            action="invoice.mark_paid",
            target=invoice,
            params={
                "amount": shown,
                "reference": payment.reference,
                "paid_on": paid_on,
                "method": payment.method,
            },
        )

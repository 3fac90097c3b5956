"""Credit notes: the only correction of a finalized invoice.

Full or partial, by line, by amount, or for an incident's calls
(``invoicing.services.incident_credits``); the sum of
an invoice's credit notes never exceeds its total (checked under the
invoice's row lock). Effect, in the order applied: what is still due is
reduced first; anything beyond that was paid, and is refunded — to the card
through Stripe when it was paid by card, to the prepaid balance for prepaid
organizations, otherwise recorded as a refund finance pays by hand.

Line and incident credits are net amounts (before the invoice's discount
and tax); the note adds the invoice's discount and tax on them as lines of
its own, so crediting every line credits the whole total.

The console previews a note first (``credit_note_preview``,
``incident_credit_preview``: lines, amounts, the effect, the invoice's new
amount due) and issues it with the preview's signed ``confirmation``, which
is refused if the invoice or the note would differ by then."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass

from django.core import signing
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone as tz
from django.utils.translation import gettext as _

from accounts.facade import BillingMode, Conflict, NotFound, Perm, ValidationFailed, audit_record
from console.kernel.celery import registered_task
from console.kernel.money import PPM, format_amount, format_rate
from invoicing import stripe_adapter
from invoicing.models import (
    CreditNote,
    CreditNoteEffect,
    CreditNoteLine,
    Invoice,
    InvoiceStatus,
    LedgerKind,
    LineKind,
    Payment,
    PaymentKind,
    PaymentMethod,
    PaymentStatus,
)
from invoicing.money import div_round, from_minor, to_minor
from invoicing.services import outbound
from invoicing.services._common import event
from invoicing.services.ledger import ledger_entry_create

logger = logging.getLogger(__name__)

CREDITABLE = (InvoiceStatus.FINALIZED, InvoiceStatus.PAID, InvoiceStatus.UNCOLLECTIBLE)
MAX_NOTES = 99


def lock_creditable_invoice(invoice_id: int, actor) -> Invoice:
    invoice = Invoice.objects.select_for_update().filter(pk=invoice_id).first()
    if invoice is None or (actor is not None and invoice.organization_id != actor.organization_id):
        raise NotFound("No such invoice.")
    if invoice.status not in CREDITABLE:
        raise ValidationFailed.from_fields(
            {
                "__all__": _("A %(status)s invoice takes no credit note.")
                % {"status": invoice.get_status_display().lower()}
            }
        )
    return invoice


def grossed_lines(invoice: Invoice, net: int) -> list[tuple[str, int]]:
    """The invoice's discount and tax on a net credit, as extra note lines."""
    out = []
    discount = div_round(net * invoice.discount_ppm, PPM)
    if discount:
        out.append(("Discount on the credited amount", -discount))
    tax = div_round((net - discount) * invoice.tax_rate_ppm, PPM)
    if tax:
        out.append((f"Tax {format_rate(invoice.tax_rate_ppm)} on the credited amount", tax))
    return out


def _stripe_refundable_minor(invoice: Invoice) -> tuple[int, Payment | None]:
    """How much of the invoice's card payments is not refunded yet, and the payment."""
    paid = list(
        invoice.payments.filter(
            kind=PaymentKind.INVOICE, method=PaymentMethod.STRIPE, status=PaymentStatus.SUCCEEDED
        ).order_by("-amount_minor")
    )
    if not paid:
        return 0, None
    refunded = (
        Payment.objects.filter(
            invoice=invoice, kind=PaymentKind.REFUND, method=PaymentMethod.STRIPE
        )
        .exclude(status=PaymentStatus.FAILED)
        .aggregate(s=Sum("amount_minor"))["s"]
        or 0
    )
    return sum(p.amount_minor for p in paid) - refunded, paid[0]


@dataclass(frozen=True)
class PlannedLine:
    description: str
    amount: int  # micro-units, net (the discount and tax lines are their own)
    calls: int  # for an incident credit: the calls it covers


@dataclass(frozen=True)
class CreditNotePlan:
    """What a credit note would do, before it is issued: its lines and
    amount, how it splits into a reduction of what is due and a refund, the
    effect, and the invoice's amount due before and after. ``confirmation``
    is a signed token of all that and of the invoice's state; issuing with
    it (``credit_note_create(confirmation=...)``) is refused when anything
    differs by then ("the invoice changed; review again")."""

    invoice_id: int
    invoice_number: str
    currency: str
    lines: tuple[PlannedLine, ...]
    amount: int
    amount_minor: int
    due_reduction_minor: int
    refund_minor: int
    effect: str
    amount_due_minor: int
    new_amount_due_minor: int
    left_to_credit: int
    left_after: int
    confirmation: str

    @property
    def effect_label(self) -> str:
        return CreditNoteEffect(self.effect).label


@dataclass
class _Draft:
    """The computed note (not saved yet) and what issuing it needs."""

    lines: list[tuple]  # (description, net amount, invoice line or None, request ids)
    amount: int
    minor: int
    due_reduction: int
    refund: int
    effect: str
    card_payment: Payment | None


CONFIRM_SALT = "invoicing.credit_note.confirm"
CONFIRM_MAX_AGE = 3600  # seconds a preview may be confirmed in


def draft_note(invoice: Invoice, *, reason: str, lines: list[tuple]) -> _Draft:
    """``lines``: (description, net amount, invoice line or None, request ids)."""
    if not (reason or "").strip():
        raise ValidationFailed.from_fields({"reason": _("Give a reason for the credit note.")})
    amount = sum(a for _, a, _, _ in lines)
    remaining = invoice.total - invoice.credited
    cur = invoice.currency
    if amount <= 0:
        raise ValidationFailed.from_fields({"amount": _("A credit note must credit something.")})
    if amount > remaining:
        raise ValidationFailed.from_fields(
            {
                "amount": _("That is more than the %(left)s left to credit.")
                % {"left": format_amount(remaining, cur, exact=True)}
            }
        )
    if invoice.credit_notes.count() + 1 > MAX_NOTES:
        raise Conflict(_("This invoice has as many credit notes as it can take."))
    minor = to_minor(invoice.credited + amount, cur) - to_minor(invoice.credited, cur)
    due_reduction = min(minor, invoice.amount_due_minor)
    refund = minor - due_reduction
    effect = CreditNoteEffect.REDUCE_DUE
    card_payment = None
    if refund:
        refundable, card_payment = _stripe_refundable_minor(invoice)
        if card_payment is not None and refundable >= refund:
            effect = CreditNoteEffect.REFUND_CARD
        elif invoice.organization.billing_mode == BillingMode.PREPAID or invoice.credits_applied:
            effect = CreditNoteEffect.REFUND_BALANCE
        else:
            effect = CreditNoteEffect.REFUND_MANUAL
    return _Draft(lines, amount, minor, due_reduction, refund, str(effect), card_payment)


def _fingerprint(invoice: Invoice, draft: _Draft, reason: str) -> dict:
    """Everything a preview showed, and the invoice's state it was computed from."""
    lines = [
        [d, a, line.pk if line is not None else None, sorted(ids or [])]
        for d, a, line, ids in draft.lines
    ]
    digest = hashlib.sha256(
        json.dumps([lines, reason.strip()], ensure_ascii=False).encode()
    ).hexdigest()
    return {
        "invoice": invoice.pk,
        "state": [
            invoice.status,
            invoice.credited,
            invoice.paid_minor,
            invoice.due_reduced_minor,
            invoice.credit_notes.count(),
        ],
        "amount": draft.amount,
        "minor": draft.minor,
        "split": [draft.due_reduction, draft.refund],
        "effect": draft.effect,
        "lines": digest,
    }


def plan_of(invoice: Invoice, draft: _Draft, reason: str) -> CreditNotePlan:
    due = invoice.amount_due_minor
    return CreditNotePlan(
        invoice_id=invoice.pk,
        invoice_number=invoice.number or "",
        currency=invoice.currency,
        lines=tuple(
            PlannedLine(description=d[:255], amount=a, calls=len(ids or []))
            for d, a, _, ids in draft.lines
        ),
        amount=draft.amount,
        amount_minor=draft.minor,
        due_reduction_minor=draft.due_reduction,
        refund_minor=draft.refund,
        effect=draft.effect,
        amount_due_minor=due,
        new_amount_due_minor=due - draft.due_reduction,
        left_to_credit=invoice.total - invoice.credited,
        left_after=invoice.total - invoice.credited - draft.amount,
        confirmation=signing.dumps(_fingerprint(invoice, draft, reason), salt=CONFIRM_SALT),
    )


def check_confirmation(invoice: Invoice, draft: _Draft, reason: str, confirmation: str) -> None:
    try:
        seen = signing.loads(confirmation, salt=CONFIRM_SALT, max_age=CONFIRM_MAX_AGE)
    except signing.SignatureExpired:
        raise Conflict(
            _("The preview is more than an hour old; review again."), code="preview_stale"
        ) from None
    except signing.BadSignature:
        raise Conflict(
            _("The preview could not be verified; review again."), code="preview_stale"
        ) from None
    if seen != _fingerprint(invoice, draft, reason):
        raise Conflict(
            _("The invoice changed since the preview; review again: nothing was credited."),
            code="preview_stale",
        )


def _create_note(invoice: Invoice, draft: _Draft, *, actor, reason: str) -> CreditNote:
    """The credit note and its lines, numbered after the invoice's last note."""
    seq = invoice.credit_notes.count() + 1
    note = CreditNote.objects.create(
        invoice=invoice,
        organization_id=invoice.organization_id,
        number=f"{invoice.number}-CN{seq:02d}",
        sequence=seq,
        currency=invoice.currency,
        amount=draft.amount,
        amount_minor=draft.minor,
        due_reduction_minor=draft.due_reduction,
        refund_minor=draft.refund,
        effect=draft.effect,
        reason=reason,
        created_by=getattr(actor, "user", None),
    )
    CreditNoteLine.objects.bulk_create(
        [
            CreditNoteLine(
                credit_note=note,
                description=d[:255],
                amount=a,
                invoice_line=line,
                request_ids=ids or [],
            )
            for d, a, line, ids in draft.lines
        ]
    )
    return note


def _credit_invoice(invoice: Invoice, draft: _Draft) -> bool:
    """The invoice's credited totals after the note; a finalized invoice left
    with nothing due is paid. True when the note paid it."""
    invoice.credited += draft.amount
    invoice.credited_minor += draft.minor
    invoice.due_reduced_minor += draft.due_reduction
    fields = ["credited", "credited_minor", "due_reduced_minor"]
    if invoice.status == InvoiceStatus.FINALIZED and invoice.amount_due_minor == 0:
        invoice.status, invoice.paid_at = InvoiceStatus.PAID, tz.now()
        fields += ["status", "paid_at"]
    invoice.save(update_fields=fields)
    return "status" in fields


def _pay_out(invoice: Invoice, note: CreditNote, draft: _Draft, *, actor, reason: str) -> None:
    """What the note refunds: to the prepaid balance (a ledger entry), or a
    pending refund payment (to the card, sent to Stripe once the note
    commits; or a bank transfer finance pays by hand)."""
    cur, effect, refund = invoice.currency, draft.effect, draft.refund
    if effect == CreditNoteEffect.REFUND_BALANCE:
        ledger_entry_create(
            organization_id=invoice.organization_id,
            kind=LedgerKind.CREDIT_NOTE,
            amount=from_minor(refund, cur),
            reference=note.number,
            reason=f"Credit note {note.number}: {reason}"[:500],
            created_by=getattr(actor, "user", None),
            currency=cur,
        )
        return
    if not refund:
        return
    card = effect == CreditNoteEffect.REFUND_CARD
    payment = Payment.objects.create(
        organization_id=invoice.organization_id,
        invoice=invoice,
        credit_note=note,
        kind=PaymentKind.REFUND,
        method=PaymentMethod.STRIPE if card else PaymentMethod.BANK_TRANSFER,
        status=PaymentStatus.PENDING,
        currency=cur,
        amount_minor=refund,
        reference=note.number,
        stripe_payment_intent_id=draft.card_payment.stripe_payment_intent_id
        if card and draft.card_payment is not None
        else "",
        created_by=getattr(actor, "user", None),
    )
    if card:
        pid = payment.pk
        transaction.on_commit(lambda: _enqueue_refund(pid))


def issue_note(invoice: Invoice, draft: _Draft, *, actor, reason: str) -> CreditNote:
    reason = reason.strip()
    cur = invoice.currency
    note = _create_note(invoice, draft, actor=actor, reason=reason)
    paid = _credit_invoice(invoice, draft)
    outbound.credit_note_issued(note)
    if paid:
        outbound.invoice_event(invoice, "invoice.paid")
    _pay_out(invoice, note, draft, actor=actor, reason=reason)
    shown = {
        "amount": format_amount(draft.amount, cur),
        "reduces_due": format_amount(draft.due_reduction, cur, unit="minor"),
        "refund": format_amount(draft.refund, cur, unit="minor"),
    }
    event(invoice, "credit_note", actor, number=note.number, effect=draft.effect, **shown)
    if actor is not None:
        audit_record(
            actor=actor,
            action="credit_note.create",
            target=note,
            params={"invoice": invoice.number, **shown, "effect": draft.effect, "reason": reason},
        )
    return note


def _enqueue_refund(payment_id: int) -> None:
    """After the credit note commits: the refund goes to a Celery task
    (``invoicing.execute_refund``), never to Stripe inside the request. A
    broker that cannot take it leaves the refund pending for the beat retry."""
    if not stripe_adapter.enabled():
        return
    try:
        registered_task("invoicing.execute_refund").delay(payment_id)
    except Exception:  # the note is committed; payments_retry_pending sends it later
        logger.exception("could not enqueue refund %s; the beat retry will send it", payment_id)


def _requested_lines(
    invoice: Invoice, *, amount: int | None, line_amounts: dict | None, full: bool
) -> list[tuple]:
    if full:
        return [("Full credit of the invoice", invoice.total - invoice.credited, None, None)]
    if amount is not None:
        if type(amount) is not int:
            raise ValidationFailed.from_fields({"amount": "Amounts are micro-units."})
        return [("Credit", amount, None, None)]
    assert line_amounts is not None  # _one_of: one of the three was given
    return _line_credits(invoice, line_amounts)


def _one_of(actor, amount, line_amounts, full) -> None:
    if actor is not None:
        actor.require(Perm.BILLING_MANAGE)
    if sum(x is not None and x is not False for x in (amount, line_amounts or None, full)) != 1:
        raise ValidationFailed.from_fields(
            {"__all__": _("Credit the full invoice, an amount, or chosen lines (one of them).")}
        )


def credit_note_preview(
    *,
    invoice_id: int,
    actor=None,
    reason: str,
    amount: int | None = None,
    line_amounts: dict[int, int] | None = None,
    full: bool = False,
) -> CreditNotePlan:
    """What ``credit_note_create`` with the same arguments would issue, and
    the token that confirms it. Writes nothing."""
    _one_of(actor, amount, line_amounts, full)
    with transaction.atomic():
        invoice = lock_creditable_invoice(invoice_id, actor)
        lines = _requested_lines(invoice, amount=amount, line_amounts=line_amounts, full=full)
        return plan_of(invoice, draft_note(invoice, reason=reason, lines=lines), reason)


def credit_note_create(
    *,
    invoice_id: int,
    actor=None,
    reason: str,
    amount: int | None = None,
    line_amounts: dict[int, int] | None = None,
    full: bool = False,
    confirmation: str | None = None,
) -> CreditNote:
    """One credit note: ``full`` (everything not yet credited), ``amount``
    (micro-units, gross), or ``line_amounts`` ({invoice line id: net micro-units}).

    ``confirmation``: the token of a ``credit_note_preview``; when given, the
    note is issued only if it is exactly what was previewed, on the invoice
    as it was (the console always gives one)."""
    _one_of(actor, amount, line_amounts, full)
    with transaction.atomic():
        invoice = lock_creditable_invoice(invoice_id, actor)
        lines = _requested_lines(invoice, amount=amount, line_amounts=line_amounts, full=full)
        draft = draft_note(invoice, reason=reason, lines=lines)
        if confirmation is not None:
            check_confirmation(invoice, draft, reason, confirmation)
        return issue_note(invoice, draft, actor=actor, reason=reason)


def _line_credits(invoice: Invoice, line_amounts: dict[int, int]) -> list[tuple]:
    by_id = {
        line.pk: line
        for line in invoice.lines.filter(kind__in=[LineKind.USAGE, LineKind.ADJUSTMENT])
    }
    credited = dict(
        CreditNoteLine.objects.filter(invoice_line_id__in=list(by_id))
        .values_list("invoice_line_id")
        .annotate(s=Sum("amount"))
    )
    out, net = [], 0
    errors = {}
    for line_id, value in sorted(line_amounts.items()):
        line = by_id.get(int(line_id))
        if line is None:
            errors[f"line_{line_id}"] = _("No such usage line on this invoice.")
            continue
        left = line.amount - credited.get(line.pk, 0)
        if type(value) is not int or value <= 0 or value > left:
            most = format_amount(left, invoice.currency, exact=True)
            errors[f"line_{line_id}"] = _(
                "Credit at most %(most)s on this line (more than zero)."
            ) % {"most": most}
            continue
        out.append((f"Credit: {line.description}", value, line, None))
        net += value
    if errors:
        raise ValidationFailed.from_fields(errors)
    return out + [(d, a, None, None) for d, a in grossed_lines(invoice, net)]

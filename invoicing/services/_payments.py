"""What every payment recorded by hand shares: its reference is unique in the
organization (a transfer recorded once, whatever it paid: an invoice, a
top-up, or a refund paid out), and its day (``paid_on``) is a real one.

The reference is checked twice: here, to answer with what it was already
used for, and by the database (``invoicing_payment_reference_unique``), for
the submissions that race past the check (two invoices paid at once with
one transfer): the loser's insert fails, and becomes the same answer."""

from __future__ import annotations

from datetime import date, datetime

from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from accounts.facade import ValidationFailed
from console.kernel.money import format_amount
from invoicing.models import Payment, PaymentKind, PaymentMethod
from invoicing.services._common import local_day, local_today

MANUAL_METHODS = (PaymentMethod.BANK_TRANSFER, PaymentMethod.OTHER)


def reference_holder(organization_id: int, reference: str, *, exclude_pk=None) -> Payment | None:
    """The organization's payment recorded by hand with ``reference``, if any."""
    qs = Payment.objects.filter(organization_id=organization_id, reference=reference).exclude(
        method=PaymentMethod.STRIPE
    )
    if exclude_pk is not None:
        qs = qs.exclude(pk=exclude_pk)
    return qs.select_related("invoice", "credit_note").order_by("pk").first()


def describe(payment: Payment) -> str:
    """``an invoice payment of 14.29 USD on 2025-04-02 (INV-2025-000001)``."""
    what = {
        PaymentKind.INVOICE: _("an invoice payment"),
        PaymentKind.TOP_UP: _("a top-up"),
        PaymentKind.REFUND: _("a refund"),
    }.get(payment.kind) or _("a payment")
    day = payment.paid_on or payment.created_at.date()
    text = _("%(what)s of %(amount)s on %(day)s") % {
        "what": what,
        "amount": format_amount(payment.amount_minor, payment.currency, unit="minor"),
        "day": day.isoformat(),
    }
    doc = payment.credit_note or payment.invoice
    if doc is not None and getattr(doc, "number", None):
        text += f" ({doc.number})"
    return text


def reference_taken(holder: Payment) -> ValidationFailed:
    return ValidationFailed.from_fields(
        {
            "reference": _(
                "The reference %(reference)s is already recorded: %(what)s. "
                "Nothing was recorded again; a different transfer needs its own reference."
            )
            % {"reference": holder.reference, "what": describe(holder)}
        }
    )


def require_free_reference(organization_id: int, reference: str, *, exclude_pk=None) -> None:
    holder = reference_holder(organization_id, reference, exclude_pk=exclude_pk)
    if holder is not None:
        raise reference_taken(holder)


def save_with_reference(payment: Payment, *, update_fields=None) -> Payment:
    """Insert (or update) ``payment`` in a savepoint; a reference another
    transaction took meanwhile is the same form error as one taken before."""
    try:
        with transaction.atomic():
            payment.save(update_fields=update_fields)
    except IntegrityError:
        holder = reference_holder(payment.organization_id, payment.reference, exclude_pk=payment.pk)
        if holder is None:
            raise
        raise reference_taken(holder) from None
    return payment


def paid_on_day(
    paid_on: date | None,
    *,
    timezone_name: str,
    not_before: datetime | None = None,
    not_before_what: str = "",
) -> date:
    """The day a payment was made: today (in the organization's time zone)
    when not given; never in the future, never before ``not_before``."""
    today = local_today(timezone_name)
    day = today if paid_on is None else paid_on
    if not isinstance(day, date) or isinstance(day, datetime):
        raise ValidationFailed.from_fields({"paid_on": _("Give the day as YYYY-MM-DD.")})
    if day > today:
        raise ValidationFailed.from_fields(
            {
                "paid_on": _("That day is in the future (today is %(today)s).")
                % {"today": today.isoformat()}
            }
        )
    if not_before is not None:
        first = local_day(not_before, timezone_name)
        if day < first:
            raise ValidationFailed.from_fields(
                {
                    "paid_on": _("That is before %(what)s (%(day)s).")
                    % {"what": not_before_what, "day": first.isoformat()}
                }
            )
    return day

"""Forms of the finance console. They parse what a person typed (amounts in
currency units, times in the organization's time zone) into what the
services take (integer micro- or minor units, aware datetimes); the
services decide everything else, and their errors come back onto the form."""

from __future__ import annotations

import re
import secrets
import uuid
from datetime import UTC
from decimal import Decimal, InvalidOperation

from django import forms
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_lazy

from console.money import (
    MICRO,
    amount_input,
    format_amount,
    format_exact,
    minor_units,
    parse_amount,
)
from invoicing.models import DocumentLanguage, InvoiceStatus, LedgerKind, LineKind, PaymentMethod
from invoicing.money import from_minor
from invoicing.services._common import org_zone, period_of

PERIOD_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def clean_period(value: str) -> str:
    value = (value or "").strip()
    if value and (not PERIOD_RE.match(value) or not 2000 <= int(value[:4]) <= 2999):
        raise forms.ValidationError("Give the month as YYYY-MM, for example 2025-03.")
    return value


# No single amount typed into the console is larger than this (micro-units:
# a trillion currency units), so nothing can overflow a 64-bit column.
MAX_MICRO = 10**18


def parse_minor(text, currency: str, *, label: str = "amount") -> int:
    """``"12.34"`` USD → 1234 cents. More decimals than the currency has is an
    error, never a silent rounding."""
    try:
        value = Decimal(str(text).strip().replace(",", "").replace("_", ""))
    except InvalidOperation:
        raise forms.ValidationError(f"Enter the {label} as a number such as 25 or 12.50.") from None
    if not value.is_finite():
        raise forms.ValidationError("Enter a finite amount.")
    minor = value.scaleb(minor_units(currency))
    if abs(minor) > MAX_MICRO:
        raise forms.ValidationError("That amount is too large.")
    if minor != minor.to_integral_value():
        places = minor_units(currency)
        raise forms.ValidationError(f"{currency} amounts have at most {places} decimal places.")
    return int(minor)


class MoneyField(forms.Field):
    """An amount in currency units, cleaned to integer micro-units."""

    widget = forms.TextInput
    MAX_LENGTH = 32

    def __init__(self, *args, allow_negative: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.allow_negative = allow_negative

    def to_python(self, value):
        value = "" if value is None else str(value).strip()
        if value in self.empty_values:
            return None
        if len(value) > self.MAX_LENGTH:
            raise forms.ValidationError("That is not an amount.")
        try:
            micro = parse_amount(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        if micro < 0 and not self.allow_negative:
            raise forms.ValidationError("Enter a positive amount.")
        if abs(micro) > MAX_MICRO:
            raise forms.ValidationError("That amount is too large.")
        return micro


# --- lists and exports ---------------------------------------------------------------


class PeriodStatusForm(forms.Form):
    """``period`` (YYYY-MM) and ``status``, both optional; ``statuses`` are
    the values ``status`` may take on this page or export."""

    period = forms.CharField(
        required=False,
        max_length=7,
        widget=forms.TextInput(attrs={"placeholder": "YYYY-MM", "type": "month"}),
    )
    status = forms.ChoiceField(required=False)

    def __init__(self, data=None, *, statuses=tuple(InvoiceStatus), label="Status", **kwargs):
        super().__init__(data, **kwargs)
        choices = [(str(s), getattr(s, "label", str(s))) for s in statuses]
        self.fields["status"].choices = [("", "Any"), *choices]
        self.fields["status"].label = label

    def clean_period(self):
        return clean_period(self.cleaned_data["period"])

    def error_fields(self) -> dict[str, list[str]]:
        return {name: list(errors) for name, errors in self.errors.items()}


class InvoiceListForm(forms.Form):
    """The invoice list's GET parameters: what it shows (a list status,
    a range of periods, a currency when there are several) and its order.
    ``period`` (one month) is read as a range of that month."""

    status = forms.ChoiceField(required=False, label="Status")
    period_from = forms.CharField(
        required=False,
        max_length=7,
        label="From",
        widget=forms.TextInput(attrs={"placeholder": "YYYY-MM", "type": "month"}),
    )
    period_to = forms.CharField(
        required=False,
        max_length=7,
        label="To",
        widget=forms.TextInput(attrs={"placeholder": "YYYY-MM", "type": "month"}),
    )
    currency = forms.ChoiceField(required=False, label="Currency")
    sort = forms.ChoiceField(required=False, label="Sort by")

    def __init__(self, data=None, *, statuses, sorts, currencies, **kwargs):
        if (
            data is not None
            and data.get("period")
            and not (data.get("period_from") or data.get("period_to"))
        ):
            data = data.copy()
            data["period_from"] = data["period_to"] = data["period"]
        super().__init__(data, **kwargs)
        self.fields["status"].choices = [("", "Any"), *statuses]
        self.fields["sort"].choices = sorts
        self.fields["currency"].choices = [("", "All"), *((c, c) for c in currencies)]
        if len(currencies) < 2:
            self.fields["currency"].widget = forms.HiddenInput()

    def clean_period_from(self):
        return clean_period(self.cleaned_data["period_from"])

    def clean_period_to(self):
        return clean_period(self.cleaned_data["period_to"])

    def clean(self):
        data = super().clean()
        start, end = data.get("period_from"), data.get("period_to")
        if start and end and start > end:
            self.add_error("period_to", "The last month comes before the first.")
        return data


class DraftForm(forms.Form):
    period = forms.CharField(
        max_length=7, widget=forms.TextInput(attrs={"placeholder": "YYYY-MM", "type": "month"})
    )

    def __init__(self, *args, timezone_name: str = "UTC", **kwargs):
        super().__init__(*args, **kwargs)
        self.timezone_name = timezone_name

    def clean_period(self):
        value = clean_period(self.cleaned_data["period"])
        if value > period_of(timezone.now(), self.timezone_name):
            raise forms.ValidationError("That month has not started yet.")
        return value


# --- invoice actions ---------------------------------------------------------------------


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=500, widget=forms.Textarea(attrs={"rows": 2}), help_text="Kept in the history."
    )

    def clean_reason(self):
        value = self.cleaned_data["reason"].strip()
        if not value:
            raise forms.ValidationError("Give a reason.")
        return value


class PaidOnField(forms.DateField):
    """The day money moved, in the organization's calendar (YYYY-MM-DD);
    blank = today there. The services check it is not in the future and
    not before the document it pays."""

    widget = forms.DateInput(attrs={"type": "date"})

    def __init__(self, *args, label="Paid on", **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("help_text", "The day the money moved; empty: today.")
        super().__init__(*args, label=label, **kwargs)


def _today(timezone_name: str):
    return timezone.now().astimezone(org_zone(timezone_name)).date()


class PaymentForm(forms.Form):
    """A payment finance received by hand. ``amount`` blank = all that is due."""

    method = forms.ChoiceField(
        choices=[
            (PaymentMethod.BANK_TRANSFER, PaymentMethod.BANK_TRANSFER.label),
            (PaymentMethod.OTHER, PaymentMethod.OTHER.label),
        ],
        initial=PaymentMethod.BANK_TRANSFER,
    )
    reference = forms.CharField(
        max_length=128,
        help_text="The transfer's reference: each reference is recorded once in this organization.",
    )
    amount = forms.CharField(
        required=False, max_length=32, help_text="Leave empty for everything that is due."
    )
    paid_on = PaidOnField(label="Received on")

    def __init__(self, data=None, *, invoice, timezone_name: str = "UTC", **kwargs):
        super().__init__(data, **kwargs)
        self.invoice = invoice
        self.fields["amount"].label = f"Amount ({invoice.currency})"
        self.fields["paid_on"].initial = _today(timezone_name)
        self.fields["paid_on"].help_text = f"The day the money arrived ({timezone_name} calendar)."

    def clean_reference(self):
        value = self.cleaned_data["reference"].strip()
        if not value:
            raise forms.ValidationError("Give the transfer's reference.")
        return value

    def clean_amount(self):
        value = self.cleaned_data["amount"].strip()
        if not value:
            return None
        minor = parse_minor(value, self.invoice.currency)
        if minor <= 0:
            raise forms.ValidationError("Enter a positive amount.")
        due = self.invoice.amount_due_minor
        if minor > due:  # the service refuses it too; this says it in money
            cur = self.invoice.currency
            raise forms.ValidationError(
                f"That is more than what is due ({format_amount(from_minor(due, cur), cur)})."
            )
        return minor


class RefundPaidForm(forms.Form):
    """A manual refund finance has paid out: the transfer's reference and day."""

    reference = forms.CharField(
        max_length=128, help_text="The outgoing transfer's reference (unique in this organization)."
    )
    paid_on = PaidOnField()

    def __init__(self, data=None, *, timezone_name: str = "UTC", **kwargs):
        super().__init__(data, **kwargs)
        self.fields["paid_on"].initial = _today(timezone_name)
        self.fields["paid_on"].help_text = f"The day it was paid ({timezone_name} calendar)."

    def clean_reference(self):
        value = self.cleaned_data["reference"].strip()
        if not value:
            raise forms.ValidationError("Give the transfer's reference.")
        return value


class CreditNoteForm(forms.Form):
    """A credit note: the whole remainder, an amount (gross, in currency
    units), or amounts per usage line (net; the note adds the invoice's
    discount and tax on them)."""

    MODES = [
        ("full", "Everything not yet credited"),
        ("amount", "An amount (including tax)"),
        ("lines", "Chosen lines (before discount and tax)"),
    ]
    mode = forms.ChoiceField(choices=MODES, widget=forms.RadioSelect, initial="amount")
    amount = MoneyField(required=False, help_text="Used with “An amount”.")
    reason = forms.CharField(max_length=500, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, data=None, *, invoice, lines, **kwargs):
        super().__init__(data, **kwargs)
        self.invoice = invoice
        self.fields["amount"].label = f"Amount ({invoice.currency})"
        self.line_fields = []
        for line in lines:
            if line.kind not in (LineKind.USAGE, LineKind.ADJUSTMENT):
                continue
            name = f"line_{line.pk}"
            self.fields[name] = MoneyField(
                required=False,
                label=line.description,
                help_text=f"at most {format_exact(line.amount, invoice.currency)}",
            )
            self.line_fields.append(name)

    def line_bound_fields(self):
        return [self[name] for name in self.line_fields]

    def clean_reason(self):
        value = self.cleaned_data["reason"].strip()
        if not value:
            raise forms.ValidationError("Give a reason for the credit note.")
        return value

    def clean(self):
        data = super().clean()
        mode = data.get("mode")
        if mode == "amount" and data.get("amount") is None and "amount" not in self.errors:
            self.add_error("amount", "Enter the amount to credit.")
        remaining = self.invoice.total - self.invoice.credited
        if mode == "amount" and (data.get("amount") or 0) > remaining:
            # The service refuses it too; this says it in money, not micro-units.
            left = format_exact(remaining, self.invoice.currency)
            self.add_error("amount", f"That is more than the {left} left to credit.")
        if mode == "lines":
            chosen = {n: data.get(n) for n in self.line_fields if data.get(n) is not None}
            if not chosen and not any(n in self.errors for n in self.line_fields):
                raise forms.ValidationError("Enter an amount on at least one line.")
        return data

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        out = {"reason": data["reason"]}
        if data["mode"] == "full":
            out["full"] = True
        elif data["mode"] == "amount":
            out["amount"] = data["amount"]
        else:
            out["line_amounts"] = {
                int(n.removeprefix("line_")): data[n]
                for n in self.line_fields
                if data.get(n) is not None
            }
        return out


STATUS_CLASSES = {
    "5xx": ("Server errors (5xx)", 500, 599),
    "errors": ("All errors (4xx and 5xx)", 400, 599),
    "4xx": ("Client errors (4xx)", 400, 499),
    "429": ("Rate limited (429)", 429, 429),
}


class IncidentCreditForm(forms.Form):
    """Credit the calls an incident spoiled: a node (or all), a time window
    (in the organization's time zone) and a status class."""

    node = forms.ModelChoiceField(queryset=None, required=False, empty_label="All nodes")
    start = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    end = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    status_class = forms.ChoiceField(
        label="Status", choices=[(k, v[0]) for k, v in STATUS_CLASSES.items()], initial="5xx"
    )
    model = forms.CharField(required=False, max_length=128, help_text="Optional: one model only.")
    reason = forms.CharField(max_length=500, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, data=None, *, nodes, timezone_name: str, **kwargs):
        super().__init__(data, **kwargs)
        self.tz = org_zone(timezone_name)
        self.fields["node"].queryset = nodes
        for name in ("start", "end"):
            self.fields[name].help_text = f"{self.tz.key} time"

    def full_clean(self):
        with timezone.override(self.tz):
            super().full_clean()

    def clean_reason(self):
        value = self.cleaned_data["reason"].strip()
        if not value:
            raise forms.ValidationError("Give a reason for the credit note.")
        return value

    def clean(self):
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        for name, when in (("start", start), ("end", end)):
            if when is not None and not 2000 <= when.year <= 2999:
                self.add_error(name, "Give a time between the years 2000 and 2999.")
                return data
        if start and end and start >= end:
            self.add_error("end", "The window must end after it starts.")
        return data

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        _, low, high = STATUS_CLASSES[data["status_class"]]
        return {
            "reason": data["reason"],
            # In UTC: the note's description prints the window as UTC.
            "start": data["start"].astimezone(UTC),
            "end": data["end"].astimezone(UTC),
            "node_id": data["node"].pk if data["node"] else None,
            "status_min": low,
            "status_max": high,
            "model": data["model"].strip() or None,
        }


# --- balance -------------------------------------------------------------------------


class AdjustmentForm(forms.Form):
    """A manual grant or adjustment of the prepaid balance. ``token`` makes a
    double-submitted form one entry (it is the ledger reference)."""

    kind = forms.ChoiceField(
        choices=[
            (LedgerKind.GRANT, "Grant (a top-up received by hand, or a gift)"),
            (LedgerKind.ADJUSTMENT, "Adjustment (a correction, may be negative)"),
        ]
    )
    amount = MoneyField(allow_negative=True, help_text="Negative lowers the balance.")
    reason = forms.CharField(max_length=500, widget=forms.Textarea(attrs={"rows": 2}))
    token = forms.UUIDField(widget=forms.HiddenInput, initial=uuid.uuid4)

    def __init__(self, *args, currency: str = "USD", **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["amount"].label = f"Amount ({currency})"

    def clean_reason(self):
        value = self.cleaned_data["reason"].strip()
        if not value:
            raise forms.ValidationError("Give a reason for this entry.")
        return value

    def clean(self):
        data = super().clean()
        if data.get("amount") == 0:
            self.add_error("amount", "An entry cannot be zero.")
        if data.get("kind") == LedgerKind.GRANT and (data.get("amount") or 0) < 0:
            self.add_error("amount", "A grant adds to the balance; use an adjustment to lower it.")
        return data

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        return {
            "kind": data["kind"],
            "amount": data["amount"],
            "reason": data["reason"],
            "reference": f"console:{data['token']}",
        }


class BillingProfileForm(forms.Form):
    """What the organization may change itself: the buyer on its invoices,
    where billing mail goes, and the low-balance threshold. Tax rate,
    discount and payment terms are commercial terms (staff, Django admin)."""

    legal_name = forms.CharField(required=False, max_length=200)
    address = forms.CharField(
        required=False, max_length=1000, widget=forms.Textarea(attrs={"rows": 3})
    )
    tax_id = forms.CharField(required=False, max_length=64, label="Tax id")
    billing_email = forms.EmailField(
        required=False, help_text="Invoices and notices; empty: owners, admins and finance."
    )
    low_balance_threshold = MoneyField(
        required=False, help_text="Mail when the prepaid balance falls below this; empty: never."
    )
    # The PDFs are the buyer's documents: their language is the organization's choice.
    document_language = forms.ChoiceField(
        required=False,
        choices=DocumentLanguage.choices,
        label=gettext_lazy("Invoice language"),
        help_text=gettext_lazy("The language of invoice and credit-note PDFs."),
    )

    FIELDS = ("legal_name", "address", "tax_id", "billing_email", "low_balance_threshold")

    def __init__(self, *args, currency: str = "USD", **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["low_balance_threshold"].label = f"Low-balance threshold ({currency})"

    @staticmethod
    def initial_for(profile) -> dict:
        threshold = profile.low_balance_threshold
        return {
            "legal_name": profile.legal_name,
            "address": profile.address,
            "tax_id": profile.tax_id,
            "billing_email": profile.billing_email,
            "low_balance_threshold": amount_input(threshold),
            "document_language": profile.document_language,
        }

    def service_kwargs(self) -> dict:
        """What ``invoicing.services.billing_profile_update`` takes (a form
        posted without the language keeps the one set)."""
        kwargs = {k: self.cleaned_data[k] for k in self.FIELDS}
        if self.cleaned_data.get("document_language"):
            kwargs["document_language"] = self.cleaned_data["document_language"]
        return kwargs


def _max_top_up(currency: str) -> str:
    return format_amount(settings.INVOICING_MAX_TOP_UP * MICRO, currency)


class TopUpForm(forms.Form):
    amount = forms.CharField(max_length=32)

    def __init__(self, *args, currency: str = "USD", **kwargs):
        super().__init__(*args, **kwargs)
        self.currency = currency
        self.fields["amount"].label = f"Amount ({currency})"
        self.fields["amount"].help_text = f"Up to {_max_top_up(currency)} at a time."

    def clean_amount(self) -> int:
        minor = parse_minor(self.cleaned_data["amount"], self.currency)
        if minor <= 0:
            raise forms.ValidationError("Enter a positive amount.")
        if from_minor(minor, self.currency) > settings.INVOICING_MAX_TOP_UP * 1_000_000:
            raise forms.ValidationError(f"Top up at most {_max_top_up(self.currency)} at a time.")
        return minor


class CardTopUpForm(TopUpForm):
    """A top-up charged to the card on file. ``request_key`` is a one-time
    token rendered with the form, so a double submit charges once."""

    request_key = forms.CharField(max_length=64, required=False, widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            self.initial["request_key"] = secrets.token_urlsafe(24)


class ManualTopUpForm(TopUpForm):
    """A top-up paid by bank transfer, recorded by finance once the money is in."""

    reference = forms.CharField(max_length=100, help_text="The transfer's reference.")
    paid_on = PaidOnField(label="Received on")

    def __init__(self, *args, timezone_name: str = "UTC", **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["paid_on"].initial = _today(timezone_name)

    def clean_reference(self):
        value = self.cleaned_data["reference"].strip()
        if not value:
            raise forms.ValidationError("Give the transfer's reference.")
        return value

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
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, gettext_noop

from console.kernel.money import (
    MICRO,
    amount_input,
    format_amount,
    format_exact,
    minor_units,
    parse_amount,
)
from invoicing.models import (
    DocumentLanguage,
    InvoiceStatus,
    LedgerKind,
    LineKind,
    PaymentMethod,
    line_description,
)
from invoicing.money import from_minor
from invoicing.services._common import org_zone, period_of

# The CSV exports' titles (``invoicing.exports``) as the pages show them:
# marked here so the catalogue has them; the templates translate them.
EXPORT_TITLES = (
    gettext_noop("Invoices"),
    gettext_noop("Invoice lines"),
    gettext_noop("Credit notes"),
    gettext_noop("Payments"),
    gettext_noop("Ledger entries"),
    gettext_noop("status"),
    gettext_noop("kind"),
    gettext_noop("amount"),
)

PERIOD_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def clean_period(value: str) -> str:
    value = (value or "").strip()
    if value and (not PERIOD_RE.match(value) or not 2000 <= int(value[:4]) <= 2999):
        raise forms.ValidationError(_("Give the month as YYYY-MM, for example 2025-03."))
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
        raise forms.ValidationError(
            _("Enter the %(label)s as a number such as 25 or 12.50.") % {"label": _(label)}
        ) from None
    if not value.is_finite():
        raise forms.ValidationError(_("Enter a finite amount."))
    minor = value.scaleb(minor_units(currency))
    if abs(minor) > MAX_MICRO:
        raise forms.ValidationError(_("That amount is too large."))
    if minor != minor.to_integral_value():
        places = minor_units(currency)
        raise forms.ValidationError(
            _("%(currency)s amounts have at most %(places)s decimal places.")
            % {"currency": currency, "places": places}
        )
    return int(minor)


def _amount_error(text: str) -> str:
    """Why ``console.kernel.money.parse_amount`` refused ``text``, in the reader's
    language (its own ``ValueError`` texts are English)."""
    try:
        value = Decimal(text.replace(",", "").replace("_", ""))
    except InvalidOperation:
        return _("'%(text)s' is not an amount; enter a number such as 25 or 12.50.") % {
            "text": text
        }
    if not value.is_finite():
        return _("Enter a finite amount.")
    return _("Amounts have at most six decimal places.")


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
            raise forms.ValidationError(_("That is not an amount."))
        try:
            micro = parse_amount(value)
        except ValueError:
            raise forms.ValidationError(_amount_error(value)) from None
        if micro < 0 and not self.allow_negative:
            raise forms.ValidationError(_("Enter a positive amount."))
        if abs(micro) > MAX_MICRO:
            raise forms.ValidationError(_("That amount is too large."))
        return micro


# --- lists and exports ---------------------------------------------------------------


class PeriodStatusForm(forms.Form):
    """``period`` (YYYY-MM) and ``status``, both optional; ``statuses`` are
    the values ``status`` may take on this page or export."""

    period = forms.CharField(
        required=False,
        max_length=7,
        label=gettext_lazy("Period"),
        widget=forms.TextInput(attrs={"placeholder": "YYYY-MM", "type": "month"}),
    )
    status = forms.ChoiceField(required=False)

    def __init__(self, data=None, *, statuses=tuple(InvoiceStatus), label="Status", **kwargs):
        super().__init__(data, **kwargs)
        choices = [(str(s), getattr(s, "label", str(s))) for s in statuses]
        self.fields["status"].choices = [("", _("Any")), *choices]
        self.fields["status"].label = _(label)

    def clean_period(self):
        return clean_period(self.cleaned_data["period"])

    def error_fields(self) -> dict[str, list[str]]:
        return {name: list(errors) for name, errors in self.errors.items()}


class InvoiceListForm(forms.Form):
    """The invoice list's GET parameters: what it shows (a list status,
    a range of periods, a currency when there are several) and its order.
    ``period`` (one month) is read as a range of that month."""

    status = forms.ChoiceField(required=False, label=gettext_lazy("Status"))
    period_from = forms.CharField(
        required=False,
        max_length=7,
        label=gettext_lazy("From"),
        widget=forms.TextInput(attrs={"placeholder": "YYYY-MM", "type": "month"}),
    )
    period_to = forms.CharField(
        required=False,
        max_length=7,
        label=gettext_lazy("To"),
        widget=forms.TextInput(attrs={"placeholder": "YYYY-MM", "type": "month"}),
    )
    currency = forms.ChoiceField(required=False, label=gettext_lazy("Currency"))
    sort = forms.ChoiceField(required=False, label=gettext_lazy("Sort by"))

    def __init__(self, data=None, *, statuses, sorts, currencies, **kwargs):
        if (
            data is not None
            and data.get("period")
            and not (data.get("period_from") or data.get("period_to"))
        ):
            data = data.copy()
            data["period_from"] = data["period_to"] = data["period"]
        super().__init__(data, **kwargs)
        self.fields["status"].choices = [("", _("Any")), *statuses]
        self.fields["sort"].choices = sorts
        self.fields["currency"].choices = [("", _("All")), *((c, c) for c in currencies)]
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
            self.add_error("period_to", _("The last month comes before the first."))
        return data


class DraftForm(forms.Form):
    period = forms.CharField(
        max_length=7,
        label=gettext_lazy("Period"),
        widget=forms.TextInput(attrs={"placeholder": "YYYY-MM", "type": "month"}),
    )

    def __init__(self, *args, timezone_name: str = "UTC", **kwargs):
        super().__init__(*args, **kwargs)
        self.timezone_name = timezone_name

    def clean_period(self):
        value = clean_period(self.cleaned_data["period"])
        if value > period_of(timezone.now(), self.timezone_name):
            raise forms.ValidationError(_("That month has not started yet."))
        return value


# --- invoice actions ---------------------------------------------------------------------


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=500,
        label=gettext_lazy("Reason"),
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=gettext_lazy("Kept in the history."),
    )

    def clean_reason(self):
        value = self.cleaned_data["reason"].strip()
        if not value:
            raise forms.ValidationError(_("Give a reason."))
        return value


class PaidOnField(forms.DateField):
    """The day money moved, in the organization's calendar (YYYY-MM-DD);
    blank = today there. The services check it is not in the future and
    not before the document it pays."""

    widget = forms.DateInput(attrs={"type": "date"})

    def __init__(self, *args, label=None, **kwargs):
        label = label or gettext_lazy("Paid on")
        kwargs.setdefault("required", False)
        kwargs.setdefault("help_text", gettext_lazy("The day the money moved; empty: today."))
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
        label=gettext_lazy("Method"),
    )
    reference = forms.CharField(
        max_length=128,
        label=gettext_lazy("Reference"),
        help_text=gettext_lazy(
            "The transfer's reference: each reference is recorded once in this organization."
        ),
    )
    amount = forms.CharField(
        required=False,
        max_length=32,
        help_text=gettext_lazy("Leave empty for everything that is due."),
    )
    paid_on = PaidOnField(label=gettext_lazy("Received on"))

    def __init__(self, data=None, *, invoice, timezone_name: str = "UTC", **kwargs):
        super().__init__(data, **kwargs)
        self.invoice = invoice
        self.fields["amount"].label = _("Amount (%(currency)s)") % {"currency": invoice.currency}
        self.fields["paid_on"].initial = _today(timezone_name)
        self.fields["paid_on"].help_text = _("The day the money arrived (%(zone)s calendar).") % {
            "zone": timezone_name
        }

    def clean_reference(self):
        value = self.cleaned_data["reference"].strip()
        if not value:
            raise forms.ValidationError(_("Give the transfer's reference."))
        return value

    def clean_amount(self):
        value = self.cleaned_data["amount"].strip()
        if not value:
            return None
        minor = parse_minor(value, self.invoice.currency)
        if minor <= 0:
            raise forms.ValidationError(_("Enter a positive amount."))
        due = self.invoice.amount_due_minor
        if minor > due:  # the service refuses it too; this says it in money
            cur = self.invoice.currency
            raise forms.ValidationError(
                _("That is more than what is due (%(due)s).")
                % {"due": format_amount(from_minor(due, cur), cur)}
            )
        return minor


class RefundPaidForm(forms.Form):
    """A manual refund finance has paid out: the transfer's reference and day."""

    reference = forms.CharField(
        max_length=128,
        label=gettext_lazy("Reference"),
        help_text=gettext_lazy("The outgoing transfer's reference (unique in this organization)."),
    )
    paid_on = PaidOnField()

    def __init__(self, data=None, *, timezone_name: str = "UTC", **kwargs):
        super().__init__(data, **kwargs)
        self.fields["paid_on"].initial = _today(timezone_name)
        self.fields["paid_on"].help_text = _("The day it was paid (%(zone)s calendar).") % {
            "zone": timezone_name
        }

    def clean_reference(self):
        value = self.cleaned_data["reference"].strip()
        if not value:
            raise forms.ValidationError(_("Give the transfer's reference."))
        return value


class CreditNoteForm(forms.Form):
    """A credit note: the whole remainder, an amount (gross, in currency
    units), or amounts per usage line (net; the note adds the invoice's
    discount and tax on them)."""

    MODES = [
        ("full", gettext_lazy("Everything not yet credited")),
        ("amount", gettext_lazy("An amount (including tax)")),
        ("lines", gettext_lazy("Chosen lines (before discount and tax)")),
    ]
    mode = forms.ChoiceField(
        choices=MODES, widget=forms.RadioSelect, initial="amount", label=gettext_lazy("Mode")
    )
    amount = MoneyField(required=False, help_text=gettext_lazy("Used with “An amount”."))
    reason = forms.CharField(
        max_length=500, label=gettext_lazy("Reason"), widget=forms.Textarea(attrs={"rows": 2})
    )

    def __init__(self, data=None, *, invoice, lines, **kwargs):
        super().__init__(data, **kwargs)
        self.invoice = invoice
        self.fields["amount"].label = _("Amount (%(currency)s)") % {"currency": invoice.currency}
        self.line_fields = []
        for line in lines:
            if line.kind not in (LineKind.USAGE, LineKind.ADJUSTMENT):
                continue
            name = f"line_{line.pk}"
            self.fields[name] = MoneyField(
                required=False,
                label=line_description(line),
                help_text=_("at most %(amount)s")
                % {"amount": format_exact(line.amount, invoice.currency)},
            )
            self.line_fields.append(name)

    def line_bound_fields(self):
        return [self[name] for name in self.line_fields]

    def clean_reason(self):
        value = self.cleaned_data["reason"].strip()
        if not value:
            raise forms.ValidationError(_("Give a reason for the credit note."))
        return value

    def clean(self):
        data = super().clean()
        mode = data.get("mode")
        if mode == "amount" and data.get("amount") is None and "amount" not in self.errors:
            self.add_error("amount", _("Enter the amount to credit."))
        remaining = self.invoice.total - self.invoice.credited
        if mode == "amount" and (data.get("amount") or 0) > remaining:
            # The service refuses it too; this says it in money, not micro-units.
            left = format_exact(remaining, self.invoice.currency)
            self.add_error(
                "amount", _("That is more than the %(left)s left to credit.") % {"left": left}
            )
        if mode == "lines":
            chosen = {n: data.get(n) for n in self.line_fields if data.get(n) is not None}
            if not chosen and not any(n in self.errors for n in self.line_fields):
                raise forms.ValidationError(_("Enter an amount on at least one line."))
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
    "5xx": (gettext_lazy("Server errors (5xx)"), 500, 599),
    "errors": (gettext_lazy("All errors (4xx and 5xx)"), 400, 599),
    "4xx": (gettext_lazy("Client errors (4xx)"), 400, 499),
    "429": (gettext_lazy("Rate limited (429)"), 429, 429),
}


class IncidentCreditForm(forms.Form):
    """Credit the calls an incident spoiled: a node (or all), a time window
    (in the organization's time zone) and a status class."""

    node = forms.ModelChoiceField(
        queryset=None,
        required=False,
        empty_label=gettext_lazy("All nodes"),
        label=gettext_lazy("Node"),
    )
    start = forms.DateTimeField(
        label=gettext_lazy("Start"),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    end = forms.DateTimeField(
        label=gettext_lazy("End"),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    status_class = forms.ChoiceField(
        label=gettext_lazy("Status"),
        choices=[(k, v[0]) for k, v in STATUS_CLASSES.items()],
        initial="5xx",
    )
    model = forms.CharField(
        required=False,
        max_length=128,
        label=gettext_lazy("Model"),
        help_text=gettext_lazy("Optional: one model only."),
    )
    reason = forms.CharField(
        max_length=500, label=gettext_lazy("Reason"), widget=forms.Textarea(attrs={"rows": 2})
    )

    def __init__(self, data=None, *, nodes, timezone_name: str, **kwargs):
        super().__init__(data, **kwargs)
        self.tz = org_zone(timezone_name)
        self.fields["node"].queryset = nodes
        for name in ("start", "end"):
            self.fields[name].help_text = _("%(zone)s time") % {"zone": self.tz.key}

    def full_clean(self):
        with timezone.override(self.tz):
            super().full_clean()

    def clean_reason(self):
        value = self.cleaned_data["reason"].strip()
        if not value:
            raise forms.ValidationError(_("Give a reason for the credit note."))
        return value

    def clean(self):
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        for name, when in (("start", start), ("end", end)):
            if when is not None and not 2000 <= when.year <= 2999:
                self.add_error(name, _("Give a time between the years 2000 and 2999."))
                return data
        if start and end and start >= end:
            self.add_error("end", _("The window must end after it starts."))
        return data

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        _label, low, high = STATUS_CLASSES[data["status_class"]]
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
            (LedgerKind.GRANT, gettext_lazy("Grant (a top-up received by hand, or a gift)")),
            (LedgerKind.ADJUSTMENT, gettext_lazy("Adjustment (a correction, may be negative)")),
        ],
        label=gettext_lazy("Kind"),
    )
    amount = MoneyField(allow_negative=True, help_text=gettext_lazy("Negative lowers the balance."))
    reason = forms.CharField(
        max_length=500, label=gettext_lazy("Reason"), widget=forms.Textarea(attrs={"rows": 2})
    )
    token = forms.UUIDField(widget=forms.HiddenInput, initial=uuid.uuid4)

    def __init__(self, *args, currency: str = "USD", **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["amount"].label = _("Amount (%(currency)s)") % {"currency": currency}

    def clean_reason(self):
        value = self.cleaned_data["reason"].strip()
        if not value:
            raise forms.ValidationError(_("Give a reason for this entry."))
        return value

    def clean(self):
        data = super().clean()
        if data.get("amount") == 0:
            self.add_error("amount", _("An entry cannot be zero."))
        if data.get("kind") == LedgerKind.GRANT and (data.get("amount") or 0) < 0:
            self.add_error(
                "amount", _("A grant adds to the balance; use an adjustment to lower it.")
            )
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

    legal_name = forms.CharField(required=False, max_length=200, label=gettext_lazy("Legal name"))
    address = forms.CharField(
        required=False,
        max_length=1000,
        label=gettext_lazy("Address"),
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    tax_id = forms.CharField(required=False, max_length=64, label=gettext_lazy("Tax id"))
    billing_email = forms.EmailField(
        required=False,
        label=gettext_lazy("Billing email"),
        help_text=gettext_lazy("Invoices and notices; empty: owners, admins and finance."),
    )
    low_balance_threshold = MoneyField(
        required=False,
        help_text=gettext_lazy("Mail when the prepaid balance falls below this; empty: never."),
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
        self.fields["low_balance_threshold"].label = _("Low-balance threshold (%(currency)s)") % {
            "currency": currency
        }

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
        self.fields["amount"].label = _("Amount (%(currency)s)") % {"currency": currency}
        self.fields["amount"].help_text = _("Up to %(most)s at a time.") % {
            "most": _max_top_up(currency)
        }

    def clean_amount(self) -> int:
        minor = parse_minor(self.cleaned_data["amount"], self.currency)
        if minor <= 0:
            raise forms.ValidationError(_("Enter a positive amount."))
        if from_minor(minor, self.currency) > settings.INVOICING_MAX_TOP_UP * 1_000_000:
            raise forms.ValidationError(
                _("Top up at most %(most)s at a time.") % {"most": _max_top_up(self.currency)}
            )
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

    reference = forms.CharField(
        max_length=100,
        label=gettext_lazy("Reference"),
        help_text=gettext_lazy("The transfer's reference."),
    )
    paid_on = PaidOnField(label=gettext_lazy("Received on"))

    def __init__(self, *args, timezone_name: str = "UTC", **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["paid_on"].initial = _today(timezone_name)

    def clean_reference(self):
        value = self.cleaned_data["reference"].strip()
        if not value:
            raise forms.ValidationError(_("Give the transfer's reference."))
        return value

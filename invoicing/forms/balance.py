"""The prepaid balance's forms: a manual grant or adjustment, the billing
profile, top-ups by card or by bank transfer."""

from __future__ import annotations

import secrets
import uuid

from django import forms
from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console.kernel.money import MICRO, amount_input, format_amount
from invoicing.forms.fields import MoneyField, PaidOnField, parse_minor, today_in
from invoicing.models import DocumentLanguage, LedgerKind
from invoicing.money import from_minor


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
        self.fields["paid_on"].initial = today_in(timezone_name)

    def clean_reference(self):
        value = self.cleaned_data["reference"].strip()
        if not value:
            raise forms.ValidationError(_("Give the transfer's reference."))
        return value

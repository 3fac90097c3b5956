"""The forms of an invoice's actions: a reason (void, uncollectible), a
payment received by hand, a refund paid out."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console.kernel.money import format_amount
from invoicing.forms.fields import PaidOnField, parse_minor, today_in
from invoicing.models import PaymentMethod
from invoicing.money import from_minor


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
        self.fields["paid_on"].initial = today_in(timezone_name)
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
        self.fields["paid_on"].initial = today_in(timezone_name)
        self.fields["paid_on"].help_text = _("The day it was paid (%(zone)s calendar).") % {
            "zone": timezone_name
        }

    def clean_reference(self):
        value = self.cleaned_data["reference"].strip()
        if not value:
            raise forms.ValidationError(_("Give the transfer's reference."))
        return value

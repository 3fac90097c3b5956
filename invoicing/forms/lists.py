"""The forms of the invoice list and the CSV exports: a month and a status,
a range of months, a draft's period."""

from __future__ import annotations

from django import forms
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, gettext_noop

from invoicing.forms.fields import clean_period
from invoicing.models import InvoiceStatus
from invoicing.services._common import period_of

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

"""The credit-note forms: one on an invoice (all, an amount, chosen lines)
and the incident credit (the calls a node's incident spoiled)."""

from __future__ import annotations

from datetime import UTC

from django import forms
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console.kernel.money import format_amount
from invoicing.forms.fields import MoneyField
from invoicing.models import LineKind, line_description
from invoicing.services._common import org_zone


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
                % {"amount": format_amount(line.amount, invoice.currency, exact=True)},
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
            left = format_amount(remaining, self.invoice.currency, exact=True)
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

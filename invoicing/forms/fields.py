"""The fields and parsers the finance forms share: months (YYYY-MM), amounts
typed in currency units (to minor or micro-units), the day money moved."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from django import forms
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console.kernel.money import minor_units, parse_amount
from invoicing.services._common import org_zone

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


def today_in(timezone_name: str):
    return timezone.now().astimezone(org_zone(timezone_name)).date()

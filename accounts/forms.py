"""Console forms: they parse what a person typed into plain values; the
services validate and decide."""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta

from django import forms
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from accounts import validators
from accounts.models import Priority, Role, SubAccountStatus, TokenScope
from console.kernel import timezones
from console.kernel.money import parse_amount


def _amount_error(value, message: str) -> str:
    """``console.kernel.money.parse_amount``'s complaint, in the page's language."""
    if "six decimal places" in message:
        return gettext("Amounts have at most six decimal places.")
    if "finite" in message:
        return gettext("Enter a finite amount.")
    if "is not an amount" in message:
        return gettext("'%(value)s' is not an amount; enter a number such as 25 or 12.50.") % {
            "value": value
        }
    return gettext("Enter an amount such as 25 or 12.50.")


class AmountField(forms.CharField):
    """An amount in currency units (``25``, ``12.50``) → integer micro-units."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault(
            "widget", forms.TextInput(attrs={"inputmode": "decimal", "placeholder": _("no cap")})
        )
        super().__init__(**kwargs)

    def to_python(self, value):
        value = super().to_python(value)
        if value in ("", None):
            return None
        try:
            return parse_amount(value)
        except ValueError as exc:
            raise forms.ValidationError(_amount_error(value, str(exc)), code="invalid") from None


class ModelListField(forms.MultipleChoiceField):
    """Allow-list entries chosen from the model catalogue (the choices the view
    gives); ticked boxes, or names separated by commas or spaces from a
    script. A name that is not a choice is refused, saying where to find the
    valid ones."""

    widget = forms.CheckboxSelectMultiple(attrs={"class": "model-choices"})

    def to_python(self, value):
        if not value:
            return []
        if isinstance(value, str):
            value = [value]
        out: list[str] = []
        for item in value:
            for name in str(item).replace(",", " ").split():
                if name not in out:
                    out.append(name)
        return out

    def validate(self, value):
        if self.required and not value:
            raise forms.ValidationError(self.error_messages["required"], code="required")
        unknown = [name for name in value if not self.valid_value(name)]
        if unknown:
            raise forms.ValidationError(
                ngettext(
                    "Unknown model: %(names)s. Tick models from the list; the Models & "
                    "prices page shows every model in the catalogue.",
                    "Unknown models: %(names)s. Tick models from the list; the Models & "
                    "prices page shows every model in the catalogue.",
                    len(unknown),
                ),
                code="invalid_choice",
                params={"names": ", ".join(unknown)},
            )


class LimitsForm(forms.Form):
    allowed_models = ModelListField(
        required=False,
        label=_("Allowed models"),
        help_text=_("None ticked allows every model the level above allows."),
    )
    required_tag_keys = forms.CharField(
        required=False,
        label=_("Required tags"),
        help_text=_(
            "Tag keys every call must send in its x-gateway-tags header, separated by "
            "commas; empty requires none."
        ),
    )
    spend_cap_daily = AmountField(label=_("Daily spend cap"))
    spend_cap_monthly = AmountField(label=_("Monthly spend cap"))
    spend_cap_lifetime = AmountField(label=_("Lifetime spend cap"))
    rpm_limit = forms.IntegerField(
        required=False,
        label=_("Requests per minute"),
        widget=forms.NumberInput(attrs={"placeholder": _("no limit")}),
    )
    tpm_limit = forms.IntegerField(
        required=False,
        label=_("Tokens per minute"),
        widget=forms.NumberInput(attrs={"placeholder": _("no limit")}),
    )

    def __init__(self, *args, model_names=(), **kwargs):
        super().__init__(*args, **kwargs)
        # The catalogue's models this level may allow, plus what is already
        # allowed (a model disabled since stays shown, and can be unticked).
        names = list(model_names)
        current = self.initial.get("allowed_models") or []
        if isinstance(current, str):
            current = current.replace(",", " ").split()
        names += [n for n in current if n not in names]
        self.fields["allowed_models"].choices = [(n, n) for n in names]

    def clean_required_tag_keys(self) -> list[str]:
        try:
            return validators.normalize_tag_keys(self.cleaned_data.get("required_tag_keys") or "")
        except ValueError as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None


class ApiKeyForm(LimitsForm):
    name = forms.CharField(max_length=120, label=_("Name"))
    sub_account = forms.ChoiceField(required=False, label=_("Sub-account"))
    ip_allowlist = forms.CharField(
        required=False,
        label=_("IP allowlist"),
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "203.0.113.7, 10.0.0.0/8, 2001:db8::/32"}
        ),
        help_text=_("Addresses or CIDR ranges; empty allows any address."),
    )
    priority = forms.ChoiceField(
        label=_("Priority"), choices=Priority.choices, initial=Priority.NORMAL
    )
    expires_at = forms.DateTimeField(
        required=False,
        label=_("Expires"),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"],
    )
    field_order = [
        "name",
        "sub_account",
        "allowed_models",
        "ip_allowlist",
        "required_tag_keys",
        "spend_cap_daily",
        "spend_cap_monthly",
        "spend_cap_lifetime",
        "rpm_limit",
        "tpm_limit",
        "priority",
        "expires_at",
    ]

    def __init__(self, *args, sub_accounts=(), tz_name="UTC", **kwargs):
        super().__init__(*args, **kwargs)
        self.tz_name = tz_name
        self.fields["sub_account"].choices = [("", gettext("— none (organization-wide) —"))] + [
            (str(s.pk), s.name) for s in sub_accounts
        ]

    def clean_expires_at(self):
        value: datetime | None = self.cleaned_data.get("expires_at")
        if value is not None and timezone.is_naive(value):
            value = value.replace(tzinfo=zoneinfo.ZoneInfo(self.tz_name))
        return value

    def service_kwargs(self) -> dict:
        data = dict(self.cleaned_data)
        sub_account = data.pop("sub_account", None)
        data["sub_account_id"] = int(sub_account) if sub_account else None
        return data


class ApiKeyEditForm(ApiKeyForm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        del self.fields["sub_account"]

    def service_kwargs(self) -> dict:
        return dict(self.cleaned_data)


class RotateForm(forms.Form):
    grace_seconds = forms.TypedChoiceField(
        coerce=int,
        label=_("Old secret keeps working for"),
        choices=[
            (0, _("stop now")),
            (300, _("5 minutes")),
            (3600, _("1 hour")),
            (86400, _("24 hours")),
            (604800, _("7 days")),
        ],
    )


class SubAccountForm(LimitsForm):
    name = forms.CharField(max_length=120, label=_("Name"))
    status = forms.ChoiceField(
        label=_("Status"), choices=SubAccountStatus.choices, initial=SubAccountStatus.ACTIVE
    )
    field_order = ["name", "status", "allowed_models", "required_tag_keys"]


class InviteForm(forms.Form):
    email = forms.EmailField(label=_("E-mail"))
    role = forms.ChoiceField(label=_("Role"), choices=Role.choices, initial=Role.DEVELOPER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(label=_("Role"), choices=Role.choices)


class AcceptNewUserForm(forms.Form):
    full_name = forms.CharField(max_length=150, required=False, label=_("Full name"))
    password = forms.CharField(widget=forms.PasswordInput, min_length=1, label=_("Password"))


class TokenForm(forms.Form):
    EXPIRY_DAYS = {"30": 30, "90": 90, "365": 365}

    name = forms.CharField(max_length=120, label=_("Name"))
    scope = forms.ChoiceField(
        label=_("Access"),
        choices=TokenScope.choices,
        initial=TokenScope.READ_ONLY,
        widget=forms.RadioSelect,
        help_text=_("Read-only tokens are refused (403) on anything that changes data."),
    )
    expires = forms.ChoiceField(
        label=_("Expires"),
        choices=[
            ("30", _("in 30 days")),
            ("90", _("in 90 days")),
            ("365", _("in a year")),
            ("never", _("never")),
        ],
        initial="90",
    )

    def service_kwargs(self) -> dict:
        d = self.cleaned_data
        days = self.EXPIRY_DAYS.get(d["expires"])
        expires_at = timezone.now() + timedelta(days=days) if days else None
        return {"name": d["name"], "scope": d["scope"], "expires_at": expires_at}


class OrganizationForm(forms.Form):
    name = forms.CharField(max_length=120, label=_("Name"))
    timezone = forms.ChoiceField(
        label=_("Time zone"),
        help_text=_("Days and months of spend caps, charts and exports start at midnight here."),
    )
    developer_key_cap = AmountField(
        label=_("Default cap for developer keys"),
        help_text=_(
            "Monthly spend cap every key a developer issues gets, and cannot exceed; empty: none."
        ),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        groups = {"Common": gettext("Common"), "All zones": gettext("All zones")}
        choices = [(groups.get(label, label), zones) for label, zones in timezones.zone_choices()]
        current = self.initial.get("timezone")
        if current and not any(current == z for _, group in choices for z, _ in group):
            choices.insert(0, (gettext("Current"), [(current, current)]))
        self.fields["timezone"].choices = choices


class MemberRemoveForm(forms.Form):
    keys = forms.ChoiceField(
        label=_("Their API keys"),
        choices=[("revoke", _("Revoke them now")), ("hand_over", _("Hand them over to"))],
        initial="revoke",
        required=False,
        widget=forms.RadioSelect,
    )
    hand_over_to = forms.TypedChoiceField(coerce=int, required=False, label=_("Hand over to"))

    def __init__(self, *args, recipients=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["hand_over_to"].choices = [("", gettext("— choose a member —"))] + [
            (m.pk, f"{m.user.email} ({m.get_role_display()})") for m in recipients
        ]

    def clean_keys(self):
        return self.cleaned_data.get("keys") or "revoke"

    def clean_hand_over_to(self):
        value = self.cleaned_data.get("hand_over_to")
        return value if value not in ("", None) else None

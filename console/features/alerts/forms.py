"""The alert rule form: one form for every kind, the console's pages and the
REST API alike (the API validates through it, so a rule is valid the same
way wherever it is made). What each kind needs is checked in ``clean``;
every problem is a field error in the reader's language."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from accounts.facade import Actor, ApiKey, ApiKeyStatus, SubAccount
from console.features.alerts.models import DEVELOPER_KINDS, KIND_SCOPES, WINDOWED_KINDS, Kind, Scope
from console.features.alerts.services import manages_all
from console.kernel import hooks
from console.kernel.money import amount_input, parse_amount
from inference_node.facade import Node, nodes_own_and_shared

MAX_PERCENTS = 10
MIN_WINDOW, MAX_WINDOW = 5, 1440
MAX_MS = Decimal(3_600_000)
MAX_RUNWAY_DAYS = 365


class AmountField(forms.CharField):
    """An amount in currency units (``25``, ``12.50``) → integer micro-units."""

    def to_python(self, value):
        value = super().to_python(value)
        if value in ("", None):
            return None
        try:
            return parse_amount(value)
        except ValueError as exc:
            message = str(exc)
            if "six decimal places" in message:
                text = gettext("Amounts have at most six decimal places.")
            elif "finite" in message:
                text = gettext("Enter a finite amount.")
            else:
                text = gettext("Enter an amount such as 25 or 12.50.")
            raise forms.ValidationError(text, code="invalid") from None


# A spend-cap rule given no percents fires at these shares of each cap.
DEFAULT_PERCENTS = (50, 80, 100)


class PercentListField(forms.CharField):
    """Whole percents between 1 and 100, separated by commas or spaces
    (``50, 80, 100``), or a list from a script."""

    def to_python(self, value):
        if isinstance(value, list | tuple):
            parts = [str(v) for v in value]
        else:
            value = super().to_python(value)
            parts = [p for p in value.replace(",", " ").split() if p]
        out = []
        for part in parts:
            try:
                n = int(part)
            except ValueError:
                raise forms.ValidationError(
                    gettext("'%(value)s' is not a whole percent.") % {"value": part[:20]},
                    code="invalid",
                ) from None
            if not 1 <= n <= 100:
                raise forms.ValidationError(
                    gettext("Percents are between 1 and 100; %(value)s is not.") % {"value": n},
                    code="range",
                )
            out.append(n)
        out = sorted(set(out))
        if len(out) > MAX_PERCENTS:
            raise forms.ValidationError(
                ngettext("At most %(n)d percent.", "At most %(n)d percents.", MAX_PERCENTS)
                % {"n": MAX_PERCENTS},
                code="too_many",
            )
        return out


_SCOPE_FIELDS: dict[str, str] = {
    Scope.KEY: "api_key",
    Scope.SUB_ACCOUNT: "sub_account",
    Scope.MODEL: "model",
    Scope.NODE: "node",
}
_KIND_FIELDS: dict[str, tuple[str, ...]] = {
    Kind.SPEND_CAP: ("percents",),
    Kind.BALANCE_LOW: ("amount",),
    Kind.BALANCE_RUNWAY: ("threshold",),
    Kind.ERROR_RATE: ("threshold", "window_minutes", "min_calls"),
    Kind.LATENCY_P99: ("threshold", "window_minutes", "min_calls"),
    Kind.TTFT_P99: ("threshold", "window_minutes", "min_calls"),
    Kind.RATE_NEAR_LIMIT: ("threshold",),
}


def fields_for(kind: str) -> set[str]:
    """The fields a rule of ``kind`` reads (the form shows only these)."""
    if kind not in KIND_SCOPES:
        return set(AlertRuleForm.base_fields)
    subjects = {_SCOPE_FIELDS[s] for s in KIND_SCOPES[kind] if s in _SCOPE_FIELDS}
    return {"name", "kind", "scope", "enabled", *subjects, *_KIND_FIELDS.get(kind, ())}


class AlertRuleForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=120)
    kind = forms.ChoiceField(label=_("Alert when"), choices=Kind.choices)
    scope = forms.ChoiceField(label=_("Watch"), choices=Scope.choices, initial=Scope.ORG)
    api_key = forms.ModelChoiceField(
        label=_("API key"), queryset=ApiKey.objects.none(), required=False
    )
    sub_account = forms.ModelChoiceField(
        label=_("Sub-account"), queryset=SubAccount.objects.none(), required=False
    )
    model = forms.ChoiceField(label=_("Model"), choices=(), required=False)
    node = forms.ModelChoiceField(
        label=_("Node or channel"), queryset=Node.objects.none(), required=False
    )
    percents = PercentListField(
        label=_("Shares of each cap (%)"),
        required=False,
        initial=", ".join(str(p) for p in DEFAULT_PERCENTS),
        help_text=_("Spend caps: whole percents of each daily, monthly and lifetime cap."),
    )
    threshold = forms.DecimalField(
        label=_("Threshold"),
        required=False,
        max_digits=14,
        decimal_places=3,
        help_text=_(
            "Error rate in %, latency or time to first token p99 in ms, runway in days, "
            "or the share of a rate limit in %."
        ),
    )
    amount = AmountField(
        label=_("Balance below"),
        required=False,
        widget=forms.TextInput(attrs={"inputmode": "decimal"}),
    )
    window_minutes = forms.IntegerField(label=_("Window (minutes)"), initial=15, required=False)
    min_calls = forms.IntegerField(
        label=_("Minimum calls in the window"), initial=20, required=False
    )
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, *args, actor: Actor, rule=None, **kwargs):
        if rule is not None and "initial" not in kwargs:
            kwargs["initial"] = initial_for(rule)
        super().__init__(*args, **kwargs)
        self.actor = actor
        self.manages_all = manages_all(actor)
        org_id = actor.organization_id
        keys = ApiKey.objects.filter(organization_id=org_id, status=ApiKeyStatus.ACTIVE)
        if not self.manages_all:
            keys = keys.filter(owner_id=actor.user.pk)
            self.fields["kind"].choices = [c for c in Kind.choices if c[0] in DEVELOPER_KINDS]
            self.fields["scope"].choices = [c for c in Scope.choices if c[0] == Scope.KEY]
            self.fields["scope"].initial = Scope.KEY
            for name in ("sub_account", "model", "node", "amount", "window_minutes", "min_calls"):
                del self.fields[name]
        else:
            self.fields["sub_account"].queryset = SubAccount.objects.filter(organization_id=org_id)
            self.fields["node"].queryset = nodes_own_and_shared(org_id).order_by("name", "id")
            names = [e.name for e in hooks.MODEL_CATALOGUE.ask() if e.enabled]
            current = (self.initial or {}).get("model")
            if current and current not in names:
                names.append(current)
            self.fields["model"].choices = [("", "—")] + [(n, n) for n in names]
            self.fields["amount"].label = gettext("Balance below (%(currency)s)") % {
                "currency": actor.organization.currency
            }
        self.fields["api_key"].queryset = keys.order_by("name", "id")
        self.fields["api_key"].label_from_instance = lambda k: f"{k.name} ({k.prefix}…)"

    @property
    def chosen_kind(self) -> str:
        if self.is_bound:
            return str(self.data.get("kind") or "")
        return str(self.initial.get("kind") or self.fields["kind"].choices[0][0])

    @property
    def shown(self) -> set[str]:
        """The fields the chosen kind reads; the page shows these."""
        return fields_for(self.chosen_kind)

    def clean(self):
        data = super().clean()
        kind, scope = data.get("kind"), data.get("scope")
        if not kind or not scope:
            return data
        errors: dict[str, str] = {}
        if scope not in KIND_SCOPES[kind]:
            errors["scope"] = gettext("This kind of alert cannot watch that.")
        if not self.manages_all and kind not in DEVELOPER_KINDS:
            errors["kind"] = gettext("Developers set alerts on their own keys only.")
        for other_scope, field in _SCOPE_FIELDS.items():
            if field not in self.fields:
                continue
            if scope == other_scope:
                if not data.get(field):
                    errors.setdefault(field, gettext("Choose what this alert watches."))
            else:
                data[field] = None if field != "model" else ""
        if kind == Kind.SPEND_CAP:
            if not data.get("percents"):  # the documented default
                data["percents"] = list(DEFAULT_PERCENTS)
        else:
            data["percents"] = []
        if kind == Kind.BALANCE_LOW:
            amount = data.get("amount")
            if amount is None:
                errors["amount"] = gettext("Enter the balance to warn below.")
            elif amount <= 0:
                errors["amount"] = gettext("The amount must be more than zero.")
        elif "amount" in data:
            data["amount"] = None
        _clean_window(data, kind, errors)
        _clean_threshold(data, kind, errors)
        for field, message in errors.items():
            self.add_error(field if field in self.fields else None, message)
        return data


def _clean_window(data: dict[str, Any], kind: str, errors: dict[str, str]) -> None:
    """A windowed kind's window and minimum calls, in bounds; dropped for the others."""
    if kind in WINDOWED_KINDS:
        window = data.get("window_minutes")
        if window is None or not MIN_WINDOW <= window <= MAX_WINDOW:
            errors["window_minutes"] = gettext(
                "The window is between %(lo)d and %(hi)d minutes."
            ) % {"lo": MIN_WINDOW, "hi": MAX_WINDOW}
        min_calls = data.get("min_calls")
        if min_calls is None or not 1 <= min_calls <= 1_000_000:
            errors["min_calls"] = gettext("The minimum is between 1 and 1,000,000 calls.")
    else:
        data.pop("window_minutes", None)
        data.pop("min_calls", None)


# The threshold's bounds for each kind that reads one.
_THRESHOLD_LIMITS: dict[str, tuple[Decimal, Decimal]] = {
    Kind.ERROR_RATE: (Decimal("0.001"), Decimal(100)),
    Kind.LATENCY_P99: (Decimal(1), MAX_MS),
    Kind.TTFT_P99: (Decimal(1), MAX_MS),
    Kind.BALANCE_RUNWAY: (Decimal(1), Decimal(MAX_RUNWAY_DAYS)),
    Kind.RATE_NEAR_LIMIT: (Decimal(1), Decimal(100)),
}


def _clean_threshold(data: dict[str, Any], kind: str, errors: dict[str, str]) -> None:
    """The threshold of a kind that reads one, in its bounds; dropped for the others."""
    threshold = data.get("threshold")
    if kind in _THRESHOLD_LIMITS:
        lo, hi = _THRESHOLD_LIMITS[kind]
        if threshold is None:
            errors["threshold"] = gettext("Enter a threshold.")
        elif not lo <= threshold <= hi:
            errors["threshold"] = gettext("The threshold is between %(lo)s and %(hi)s.") % {
                "lo": lo.normalize(),
                "hi": f"{hi.normalize():f}",
            }
    else:
        data["threshold"] = None


def initial_for(rule) -> dict:
    return {
        "name": rule.name,
        "kind": rule.kind,
        "scope": rule.scope,
        "api_key": rule.api_key_id,
        "sub_account": rule.sub_account_id,
        "node": rule.node_id,
        "model": rule.model,
        "percents": ", ".join(str(p) for p in rule.percents or []),
        "threshold": rule.threshold,
        "amount": amount_input(rule.amount),
        "window_minutes": rule.window_minutes,
        "min_calls": rule.min_calls,
        "enabled": rule.enabled,
    }


def rule_data(rule) -> dict:
    """The rule's current values as form data (the API's partial update starts here)."""
    data = initial_for(rule)
    return {k: ("" if v is None else v) for k, v in data.items() if k != "enabled" or v}

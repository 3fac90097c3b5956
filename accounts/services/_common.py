"""Helpers shared by the account services: turning raw restriction inputs into
normalized, validated values, with every problem reported against its field."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from accounts import validators
from accounts.errors import ValidationFailed
from console.kernel import hooks

CAP_FIELDS = ("spend_cap_daily", "spend_cap_monthly", "spend_cap_lifetime")
RATE_FIELDS = ("rpm_limit", "tpm_limit")
LIMIT_FIELDS = ("allowed_models", "required_tag_keys", *CAP_FIELDS, *RATE_FIELDS)
_LABELS = {
    "spend_cap_daily": gettext_lazy("Daily spend cap"),
    "spend_cap_monthly": gettext_lazy("Monthly spend cap"),
    "spend_cap_lifetime": gettext_lazy("Lifetime spend cap"),
    "rpm_limit": gettext_lazy("Requests per minute"),
    "tpm_limit": gettext_lazy("Tokens per minute"),
}

# The objects ``clean_unique_name`` names, in the page's language.
_NOUNS = {"sub-account": gettext_lazy("sub-account"), "node": gettext_lazy("node")}


class FieldErrors:
    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}

    def add(self, field: str, message: str) -> None:
        self.errors.setdefault(field, []).append(message)

    def run(self, field: str, fn, *args):
        try:
            return fn(*args)
        except ValueError as exc:
            self.add(field, str(exc))
            return None

    def raise_if_any(self) -> None:
        if self.errors:
            raise ValidationFailed.from_fields(self.errors)


def clean_unique_name(
    errors: FieldErrors, raw, siblings, *, noun: str, instance=None, max_length: int = 120
) -> str:
    noun = _NOUNS.get(noun, noun)
    """A stripped, non-empty name unique among ``siblings`` (a queryset of the
    same organization's objects), adding a form error otherwise."""
    name = (raw or "").strip()
    if not name:
        errors.add("name", _("Enter a name."))
    elif len(name) > max_length:
        errors.add("name", _("Use at most %(n)d characters.") % {"n": max_length})
    else:
        clash = siblings.filter(name=name)
        if instance is not None:
            clash = clash.exclude(pk=instance.pk)
        if clash.exists():
            errors.add(
                "name",
                _("A %(noun)s named '%(name)s' already exists.") % {"noun": noun, "name": name},
            )
    return name


def _clean_allowed_models(
    raw, errors: FieldErrors, *, ceiling, org_models: list[str] | None
) -> list[str] | None:
    """The model allow-list normalized: names the catalogue has, within what
    the organization (``org_models``) and the ``ceiling`` allow."""
    models = errors.run("allowed_models", validators.normalize_models, raw or [])
    unknown = _not_in_catalogue(models or [])
    if unknown:
        errors.add(
            "allowed_models",
            ngettext(
                "Unknown model: %(names)s. Choose names from the list; the Models & "
                "prices page shows every model in the catalogue.",
                "Unknown models: %(names)s. Choose names from the list; the Models & "
                "prices page shows every model in the catalogue.",
                len(unknown),
            )
            % {"names": ", ".join(unknown)},
        )
    if models is not None:
        outside = []
        if org_models:
            outside += [m for m in models if m not in org_models]
        if ceiling is not None and ceiling.allowed_models:
            outside += [m for m in models if m not in ceiling.allowed_models and m not in outside]
        if outside:
            errors.add(
                "allowed_models",
                _(
                    "Not allowed here: %(names)s. A key may only narrow what its "
                    "sub-account and organization allow."
                )
                % {"names": ", ".join(outside)},
            )
    return models


def clean_limits(
    data: dict, errors: FieldErrors, *, ceiling=None, org_models: list[str] | None = None
) -> dict:
    """Validate the limit fields present in ``data``. A ``ceiling`` (the
    sub-account a key belongs to) bounds every cap, rate and model list."""
    out: dict = {}
    if "allowed_models" in data:
        models = _clean_allowed_models(
            data["allowed_models"], errors, ceiling=ceiling, org_models=org_models
        )
        if models is not None:
            out["allowed_models"] = models
    if "required_tag_keys" in data:
        keys = errors.run(
            "required_tag_keys", validators.normalize_tag_keys, data["required_tag_keys"] or []
        )
        out["required_tag_keys"] = keys or []
    for field in CAP_FIELDS:
        if field in data:
            value = errors.run(field, validators.validate_cap, data[field], _LABELS[field])
            limit = getattr(ceiling, field, None) if ceiling is not None else None
            if value is not None and limit is not None and value > limit:
                errors.add(
                    field,
                    _("%(label)s cannot exceed the sub-account's cap.") % {"label": _LABELS[field]},
                )
            out[field] = value
    for field in RATE_FIELDS:
        if field in data:
            maximum = (
                validators.MAX_TOKENS_PER_MINUTE
                if field == "tpm_limit"
                else validators.MAX_RATE_LIMIT
            )
            value = errors.run(
                field, validators.validate_rate, data[field], _LABELS[field], maximum
            )
            limit = getattr(ceiling, field, None) if ceiling is not None else None
            if value is not None and limit is not None and value > limit:
                errors.add(
                    field,
                    _("%(label)s cannot exceed the sub-account's limit.")
                    % {"label": _LABELS[field]},
                )
            out[field] = value
    return out


def _not_in_catalogue(models: list[str]) -> list[str]:
    """The names in ``models`` the model catalogue does not have (usage answers
    ``console.kernel.hooks.MODEL_CATALOGUE``); none when no app provides it."""
    if not models:
        return []
    try:
        known = {e.name for e in hooks.MODEL_CATALOGUE.ask()}
    except LookupError:
        return []
    return [m for m in models if m not in known]


def changed(instance, values: dict) -> dict:
    """Apply ``values`` to ``instance``; return ``{field: [old, new]}`` for the audit log."""
    diff = {}
    for field, new in values.items():
        old = getattr(instance, field)
        if old != new:
            diff[field] = [_jsonable(old), _jsonable(new)]
            setattr(instance, field, new)
    return diff


def _jsonable(value):
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (int, float, str, bool, list, dict)) or value is None:
        return value
    return str(value)

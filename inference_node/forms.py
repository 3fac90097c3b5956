"""Console forms of the node registry: they parse what a person typed into
plain values; the services validate and decide.

The models field takes one model per line, ``public=upstream:context`` and
then optional ``name=value`` settings: ``tier``, ``weight``, and the cost
price per million tokens as decimal money (``currency``, ``input``,
``cache_read``, ``cache_write``, ``output``), converted to integer
micro-units here with ``console.kernel.money.parse_amount`` (never a float).
Secrets (the node token, API keys) are password inputs, never rendered back.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django import forms
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from console.kernel.money import micro_to_decimal, parse_amount
from inference_node.models import HealthCheck, Node, NodeKind
from inference_node.presets import preset_choices

MODELS_HELP = gettext_lazy(
    "One model per line: public=upstream:context, then optional settings, e.g. "
    "“gpt-4o=gpt-4o-2024-08-06:128000 tier=0 weight=2 currency=USD input=2.50 "
    "cache_read=1.25 output=10”. The upstream name (the node's own), the context window "
    "and the settings are optional: tier 0 is primary, 1 backup…; costs are what the "
    "vendor charges per million tokens."
)
_CONTEXT = re.compile(r"^(?P<rest>.+):(?P<context>\d+)$")
_COST_OPTIONS = {
    "input": "cost_input_per_mtok",
    "cache_read": "cost_cache_read_per_mtok",
    "cache_write": "cost_cache_write_per_mtok",
    "output": "cost_output_per_mtok",
}
_OPTIONS = ("tier", "weight", "currency", *_COST_OPTIONS)
_SECRET = forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"})


def _parse_options(number: int, words: list[str], out: dict, errors: list[str]) -> None:
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or name not in _OPTIONS or not value:
            errors.append(
                _("Line %(number)s: “%(word)s” is not a setting; use %(options)s.")
                % {
                    "number": number,
                    "word": word[:40],
                    "options": ", ".join(o + "=…" for o in _OPTIONS),
                }
            )
            continue
        if name in ("tier", "weight"):
            out[name] = value
        elif name == "currency":
            out["cost_currency"] = value.upper()
        else:
            try:
                out[_COST_OPTIONS[name]] = parse_amount(value)
            except ValueError as exc:
                errors.append(
                    _("Line %(number)s: %(name)s: %(error)s")
                    % {"number": number, "name": name, "error": exc}
                )


def parse_models_text(text: str) -> list[dict]:
    """Model lines → model dicts; ValidationError names the line."""
    out: list[dict] = []
    errors: list[str] = []
    for number, raw in enumerate((text or "").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        mapping, *words = line.split()
        context = None
        match = _CONTEXT.match(mapping)
        if match:
            mapping, context = match["rest"].strip(), int(match["context"])
        public, sep, upstream = mapping.partition("=")
        public, upstream = public.strip(), upstream.strip()
        if not public:
            errors.append(
                _("Line %(number)s: the public model name is missing before “=”.")
                % {"number": number}
            )
            continue
        if sep and not upstream:
            errors.append(
                _("Line %(number)s: the upstream model name is missing after “=”.")
                % {"number": number}
            )
            continue
        item: dict[str, Any] = {"public_name": public, "upstream_name": upstream or public}
        item["context_window"] = context
        _parse_options(number, words, item, errors)
        out.append(item)
    if errors:
        raise forms.ValidationError(errors)
    return out


def _money(micro: int) -> str:
    value: Decimal = micro_to_decimal(micro).normalize()
    return format(value, "f")


def model_line(m) -> str:
    line = m.public_name
    if m.upstream_name != m.public_name:
        line += f"={m.upstream_name}"
    if m.context_window:
        line += f":{m.context_window}"
    words = []
    if m.tier:
        words.append(f"tier={m.tier}")
    if m.weight:
        words.append(f"weight={m.weight}")
    if m.cost_currency:
        words.append(f"currency={m.cost_currency}")
    for option, attr in _COST_OPTIONS.items():
        value = getattr(m, attr)
        if value is not None:
            words.append(f"{option}={_money(value)}")
    return " ".join([line, *words])


def models_text(node: Node) -> str:
    return "\n".join(model_line(m) for m in node.models.all())


class ModelsField(forms.CharField):
    widget = forms.Textarea(attrs={"rows": 5, "spellcheck": "false"})

    def to_python(self, value):
        return parse_models_text(super().to_python(value) or "")


class NodeForm(forms.Form):
    preset = forms.ChoiceField(
        required=False,
        label=gettext_lazy("Preset"),
        choices=[("", gettext_lazy("None: set it up by hand")), *preset_choices()],
        help_text=gettext_lazy(
            "Fills the kind, base URL, API path and health check you leave empty."
        ),
    )
    name = forms.CharField(label=gettext_lazy("Name"), max_length=120)
    kind = forms.ChoiceField(
        label=gettext_lazy("Kind"),
        required=False,
        choices=[("", gettext_lazy("From the preset (else OpenAI-compatible)")), *NodeKind.choices],
    )
    base_url = forms.CharField(
        label=gettext_lazy("Base URL"),
        required=False,
        max_length=500,
        help_text=gettext_lazy(
            "The server's root, e.g. https://llm.example.com:8000 (without /v1), at a public "
            "address unless the platform allows private ones."
        ),
        widget=forms.TextInput(attrs={"placeholder": "https://llm.example.com:8000"}),
    )
    api_path = forms.CharField(
        label=gettext_lazy("API path"),
        required=False,
        max_length=120,
        help_text=gettext_lazy(
            "Where the API starts when not at /v1 (/v1beta for Gemini), e.g. /api/paas/v4."
        ),
    )
    health_check = forms.ChoiceField(
        label=gettext_lazy("Health check"),
        required=False,
        choices=[("", gettext_lazy("From the preset (else /health)")), *HealthCheck.choices],
        help_text=gettext_lazy(
            "Vendors: their model list (a light probe with one key) or live traffic only."
        ),
    )
    credentials = forms.CharField(
        label=gettext_lazy("API key"),
        required=False,
        max_length=1000,
        strip=True,
        widget=_SECRET,
        help_text=gettext_lazy(
            "A vendor channel's first key (add more on its page). Never shown again."
        ),
    )
    token = forms.CharField(
        label=gettext_lazy("Bearer token"),
        required=False,
        max_length=500,
        strip=True,
        widget=_SECRET,
        help_text=gettext_lazy("Self-hosted nodes: sent as “Authorization: Bearer …”. Optional."),
    )
    weight = forms.IntegerField(
        label=gettext_lazy("Weight"),
        initial=1,
        min_value=1,
        help_text=gettext_lazy("Relative share of calls."),
    )
    max_concurrency = forms.IntegerField(
        label=gettext_lazy("Max concurrency"),
        initial=64,
        min_value=1,
        help_text=gettext_lazy("Calls the gateway sends at once, at most."),
    )
    region = forms.CharField(label=gettext_lazy("Region"), required=False, max_length=120)
    hardware = forms.CharField(
        label=gettext_lazy("Hardware"),
        required=False,
        max_length=120,
        widget=forms.TextInput(attrs={"placeholder": "8xH100"}),
    )
    models = ModelsField(label=gettext_lazy("Models served"), required=False, help_text=MODELS_HELP)

    def __init__(self, *args, node: Node | None = None, **kwargs):
        self.node = node
        if node is not None:
            kwargs.setdefault(
                "initial",
                {
                    "preset": node.preset,
                    "name": node.name,
                    "kind": node.kind,
                    "base_url": node.base_url,
                    "api_path": node.api_path,
                    "health_check": node.health_check,
                    "weight": node.weight,
                    "max_concurrency": node.max_concurrency,
                    "region": (node.labels or {}).get("region", ""),
                    "hardware": (node.labels or {}).get("hardware", ""),
                    "models": models_text(node),
                },
            )
        super().__init__(*args, **kwargs)
        if node is not None:
            # The key pool is managed beside the form; kind and check are required now.
            del self.fields["credentials"]
            self.fields["preset"].help_text = _("A label only: changing it changes nothing else.")
            # Left out of a post (empty): unchanged.
            for name, choices in (("kind", NodeKind), ("health_check", HealthCheck)):
                self.fields[name].choices = choices.choices
            self.fields["base_url"].required = True
            self.fields["token"].help_text = (
                _("Leave empty to keep the current token (now %(hint)s).")
                % {"hint": node.token_hint}
                if node.token
                else _("Leave empty to keep the current token.")
            )
            self.fields["clear_token"] = forms.BooleanField(
                required=False, label=_("Remove the token")
            )

    def service_kwargs(self) -> dict:
        data = dict(self.cleaned_data)
        labels = dict(self.node.labels or {}) if self.node is not None else {}
        for key in ("region", "hardware"):
            value = data.pop(key)
            if value:
                labels[key] = value
            else:
                labels.pop(key, None)
        data["labels"] = labels
        clear = data.pop("clear_token", False)
        if self.node is None:
            secret = data.pop("credentials", "")
            data["credentials"] = [{"secret": secret}] if secret else []
            for key in ("kind", "health_check"):
                data[key] = data[key] or None  # the preset's, or the service's default
            data["api_path"] = data["api_path"] or None
            return data
        # A choice left out of the post keeps its value.
        for key in ("kind", "health_check"):
            if not data.get(key):
                data.pop(key, None)
        for key in ("preset", "api_path"):
            if key not in self.data:
                data.pop(key, None)
        if not data["token"]:
            if clear:
                data["token"] = ""
            else:
                del data["token"]  # keep the current one
        return data


class CredentialForm(forms.Form):
    """A new API key of a channel's pool (``with_secret=False``: editing one)."""

    secret = forms.CharField(
        label=gettext_lazy("API key"),
        max_length=1000,
        strip=True,
        widget=_SECRET,
        help_text=gettext_lazy("Never shown again."),
    )
    label = forms.CharField(label=gettext_lazy("Label"), required=False, max_length=80)
    weight = forms.IntegerField(
        label=gettext_lazy("Weight"),
        initial=1,
        min_value=1,
        help_text=gettext_lazy("Relative share of calls."),
    )
    rpm_limit = forms.IntegerField(
        label=gettext_lazy("Requests per minute"), required=False, min_value=1
    )
    tpm_limit = forms.IntegerField(
        label=gettext_lazy("Tokens per minute"), required=False, min_value=1
    )
    max_concurrency = forms.IntegerField(
        label=gettext_lazy("Max concurrency"), required=False, min_value=1
    )

    def __init__(self, *args, with_secret: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        if not with_secret:
            del self.fields["secret"]

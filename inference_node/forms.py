"""Console forms of the node registry: they parse what a person typed into
plain values; the services validate and decide."""

from __future__ import annotations

import re

from django import forms

from inference_node.models import Node

MODELS_HELP = (
    "One model per line: public=upstream:context, e.g. "
    "“llama-3.1-8b=meta-llama/Llama-3.1-8B-Instruct:131072”. "
    "The upstream name (the node's own) and the context window are optional."
)
_CONTEXT = re.compile(r"^(?P<rest>.+):(?P<context>\d+)$")


def parse_models_text(text: str) -> list[dict]:
    """``public=upstream:context`` lines → model dicts; ValidationError names the line."""
    out: list[dict] = []
    errors: list[str] = []
    for number, raw in enumerate((text or "").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        context = None
        match = _CONTEXT.match(line)
        if match:
            line, context = match["rest"].strip(), int(match["context"])
        public, sep, upstream = line.partition("=")
        public, upstream = public.strip(), upstream.strip()
        if not public:
            errors.append(f"Line {number}: the public model name is missing before “=”.")
        elif sep and not upstream:
            errors.append(f"Line {number}: the upstream model name is missing after “=”.")
        elif " " in public or " " in upstream:
            errors.append(f"Line {number}: model names have no spaces.")
        else:
            out.append(
                {
                    "public_name": public,
                    "upstream_name": upstream or public,
                    "context_window": context,
                }
            )
    if errors:
        raise forms.ValidationError(errors)
    return out


def models_text(node: Node) -> str:
    lines = []
    for m in node.models.all():
        line = (
            m.public_name
            if m.upstream_name == m.public_name
            else f"{m.public_name}={m.upstream_name}"
        )
        if m.context_window:
            line += f":{m.context_window}"
        lines.append(line)
    return "\n".join(lines)


class ModelsField(forms.CharField):
    widget = forms.Textarea(attrs={"rows": 4, "spellcheck": "false"})

    def to_python(self, value):
        return parse_models_text(super().to_python(value) or "")


class NodeForm(forms.Form):
    name = forms.CharField(max_length=120)
    base_url = forms.CharField(
        label="Base URL",
        max_length=500,
        help_text="The server's root, e.g. http://10.0.0.5:8000 (without /v1).",
        widget=forms.TextInput(attrs={"placeholder": "http://10.0.0.5:8000"}),
    )
    token = forms.CharField(
        label="Bearer token",
        required=False,
        max_length=500,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Sent as “Authorization: Bearer …” to the node. Optional.",
    )
    weight = forms.IntegerField(initial=1, min_value=1, help_text="Relative share of calls.")
    max_concurrency = forms.IntegerField(
        initial=64, min_value=1, help_text="Calls the gateway sends at once, at most."
    )
    region = forms.CharField(required=False, max_length=120)
    hardware = forms.CharField(
        required=False, max_length=120, widget=forms.TextInput(attrs={"placeholder": "8xH100"})
    )
    models = ModelsField(label="Models served", required=False, help_text=MODELS_HELP)

    def __init__(self, *args, node: Node | None = None, **kwargs):
        self.node = node
        if node is not None:
            kwargs.setdefault(
                "initial",
                {
                    "name": node.name,
                    "base_url": node.base_url,
                    "weight": node.weight,
                    "max_concurrency": node.max_concurrency,
                    "region": (node.labels or {}).get("region", ""),
                    "hardware": (node.labels or {}).get("hardware", ""),
                    "models": models_text(node),
                },
            )
        super().__init__(*args, **kwargs)
        if node is not None:
            hint = f" (now {node.token_hint})" if node.token else ""
            self.fields["token"].help_text = f"Leave empty to keep the current token{hint}."
            self.fields["clear_token"] = forms.BooleanField(
                required=False, label="Remove the token"
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
        if self.node is not None and not data["token"]:
            if clear:
                data["token"] = ""
            else:
                del data["token"]  # keep the current one
        return data

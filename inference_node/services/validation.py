"""Validation of what the node and key-pool services take: each ``clean_*``
returns the normalized value or raises ``ValueError`` with a message a person
can act on (``FieldErrors.run`` puts it on its field).

Decisions: money (cost prices) arrives here already as integer micro-units per
million tokens (the console form converts typed decimals with
``console.kernel.money.parse_amount``; the API takes integers), and is only checked:
a whole, non-negative number. An error about a secret never repeats it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from console.kernel.money import CURRENCY_CODES
from inference_node.addresses import refuse_internal_host
from inference_node.models import HealthCheck, NodeKind

MAX_WEIGHT = 1000
MAX_CONCURRENCY = 100_000
MAX_CONTEXT_WINDOW = 100_000_000
MAX_MODELS = 200
MAX_LABELS = 20
MAX_TIER = 9
MAX_CREDENTIALS = 100
MAX_SECRET_LENGTH = 1000
MAX_RPM = 10_000_000
MAX_TPM = 10_000_000_000
# A million units of any currency per million tokens is far beyond any price.
MAX_COST_PER_MTOK = 1_000_000 * 1_000_000
COST_FIELDS = (
    "cost_input_per_mtok",
    "cost_cache_read_per_mtok",
    "cost_cache_write_per_mtok",
    "cost_output_per_mtok",
)
# The label of each cost in an error message (translated when raised).
COST_LABELS = {
    "cost_input_per_mtok": gettext_noop("The input cost of %(model)s"),
    "cost_cache_read_per_mtok": gettext_noop("The cache read cost of %(model)s"),
    "cost_cache_write_per_mtok": gettext_noop("The cache write cost of %(model)s"),
    "cost_output_per_mtok": gettext_noop("The output cost of %(model)s"),
}
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")
_MODEL_NAME = re.compile(r"^\S{1,200}$")
_API_PATH = re.compile(r"^(/[A-Za-z0-9._~-]+)+$")


@dataclass(frozen=True)
class ModelSpec:
    public_name: str
    upstream_name: str
    context_window: int | None = None
    tier: int = 0
    weight: int | None = None
    cost_currency: str = ""
    cost_input_per_mtok: int | None = None
    cost_cache_read_per_mtok: int | None = None
    cost_cache_write_per_mtok: int | None = None
    cost_output_per_mtok: int | None = None


@dataclass(frozen=True)
class CredentialSpec:
    secret: str = field(repr=False)
    label: str = ""
    weight: int = 1
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    max_concurrency: int | None = None


# --- addresses ------------------------------------------------------------------------


def clean_base_url(value, *, allow_private: bool = True) -> str:
    """A node's base URL, normalized. ``allow_private=False`` (a tenant's node
    when the operator says so) also refuses non-public addresses
    (``inference_node.addresses``)."""
    url = (value or "").strip()
    if not url:
        raise ValueError(_("Enter the node's base URL."))
    if len(url) > 500:
        raise ValueError(_("Use at most %(max)s characters.") % {"max": 500})
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ValueError(_("Enter a valid URL, e.g. https://llm.example.com:8000.")) from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(_("Use an http:// or https:// URL."))
    if not parts.hostname:
        raise ValueError(_("The URL needs a host name."))
    if parts.username or parts.password:
        raise ValueError(_("Put no credentials in the URL; use the token or API key field."))
    if parts.query or parts.fragment:
        raise ValueError(_("The base URL takes no query string or fragment."))
    path = parts.path.rstrip("/")
    if path.endswith(("/v1", "/v1beta")):
        raise ValueError(
            _(
                "Give the server's root without /v1; the gateway adds it "
                "(a vendor's other prefix goes in the API path)."
            )
        )
    if not allow_private:
        refuse_internal_host(parts.hostname)
    return f"{parts.scheme}://{parts.netloc}{path}"


def clean_api_path(value) -> str:
    """ "" (the kind's usual /v1, /v1beta for Gemini) or a plain path like /api/paas/v4."""
    path = (value or "").strip()
    if not path:
        return ""
    if len(path) > 120:
        raise ValueError(_("Use at most %(max)s characters.") % {"max": 120})
    path = path.rstrip("/")
    if not path.startswith("/"):
        raise ValueError(_("The API path starts with /, e.g. /api/paas/v4."))
    if not _API_PATH.match(path) or any(seg in (".", "..") for seg in path.split("/")):
        raise ValueError(_("Use a plain path: letters, digits and - . _ ~ between slashes."))
    return path


def clean_choice(value, choices, label: str) -> str:
    """``label``: ``gettext_noop``-marked, translated here."""
    text = str(value or "").strip()
    if text not in choices.values:
        names = ", ".join(choices.values)
        raise ValueError(_("Choose a %(label)s: %(names)s.") % {"label": _(label), "names": names})
    return text


def check_kind_and_health(kind: str, health_check: str) -> None:
    if kind != NodeKind.OPENAI_COMPATIBLE and health_check == HealthCheck.HEALTH:
        raise ValueError(
            _(
                "The %(kind)s has no /health endpoint: judge it by its model "
                "list or by live traffic."
            )
            % {"kind": NodeKind(kind).label}
        )


# --- numbers and labels -----------------------------------------------------------------


def clean_int(value, label: str, maximum: int, *, minimum: int = 1) -> int:
    """``label``: already translated (it names the field in the message)."""
    whole = _("%(label)s must be a whole number.") % {"label": label}
    if isinstance(value, bool):
        raise ValueError(whole)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(whole) from None
    if number != value and not isinstance(value, str):
        raise ValueError(whole)
    if not minimum <= number <= maximum:
        raise ValueError(
            _("%(label)s must be between %(minimum)s and %(maximum)s.")
            % {"label": label, "minimum": minimum, "maximum": maximum}
        )
    return number


def clean_optional_int(value, label: str, maximum: int, *, minimum: int = 1) -> int | None:
    if value in (None, ""):
        return None
    return clean_int(value, label, maximum, minimum=minimum)


def clean_labels(value) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        raise ValueError(_('Labels are a JSON object, e.g. {"region": "eu-west"}.'))
    if len(value) > MAX_LABELS:
        raise ValueError(_("Use at most %(max)s labels.") % {"max": MAX_LABELS})
    out = {}
    for key, val in value.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise ValueError(
                _("Label name %(key)s must be lower-case letters, digits, _ . -.")
                % {"key": repr(key)}
            )
        if not isinstance(val, (str, int, float)) or isinstance(val, bool):
            raise ValueError(_("Label %(key)s must have a text value.") % {"key": repr(key)})
        text = str(val).strip()
        if len(text) > 120:
            raise ValueError(
                _("Label %(key)s may have at most %(max)s characters.")
                % {"key": repr(key), "max": 120}
            )
        if text:
            out[key] = text
    return out


# --- models ---------------------------------------------------------------------------


def _clean_cost(value, label: str) -> int | None:
    """Micro-units per million tokens: a whole number, not negative."""
    if value in (None, ""):
        return None
    whole = _("%(label)s must be a whole number of micro-units.") % {"label": label}
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(whole)
    try:
        number = int(value)
    except ValueError:
        raise ValueError(whole) from None
    if number < 0:
        raise ValueError(_("%(label)s cannot be negative.") % {"label": label})
    if number > MAX_COST_PER_MTOK:
        raise ValueError(_("%(label)s is implausibly high.") % {"label": label})
    return number


def _clean_model(item: dict) -> ModelSpec:
    public = str(item.get("public_name") or "").strip()
    upstream = str(item.get("upstream_name") or "").strip() or public
    if not public:
        raise ValueError(_("Each model needs a public name."))
    for name in (public, upstream):
        if not _MODEL_NAME.match(name):
            raise ValueError(
                _("Model name %(name)s: no spaces, at most 200 characters.")
                % {"name": repr(name[:60])}
            )
    model = {"model": public}
    context = clean_optional_int(
        item.get("context_window"), _("Context window of %(model)s") % model, MAX_CONTEXT_WINDOW
    )
    tier = item.get("tier")
    tier = (
        0
        if tier in (None, "")
        else clean_int(tier, _("Tier of %(model)s") % model, MAX_TIER, minimum=0)
    )
    weight = clean_optional_int(item.get("weight"), _("Weight of %(model)s") % model, MAX_WEIGHT)
    costs = {
        name: _clean_cost(item.get(name), _(COST_LABELS[name]) % model) for name in COST_FIELDS
    }
    currency = str(item.get("cost_currency") or "").strip().upper()
    if currency and currency not in CURRENCY_CODES:
        raise ValueError(
            _("Cost currency of %(model)s: use one of %(codes)s.")
            % {"model": public, "codes": ", ".join(CURRENCY_CODES)}
        )
    if any(v is not None for v in costs.values()) and not currency:
        raise ValueError(_("Give the currency of %(model)s's cost price (e.g. USD).") % model)
    if currency and (costs["cost_input_per_mtok"] is None or costs["cost_output_per_mtok"] is None):
        raise ValueError(_("Give %(model)s's input and output cost per million tokens.") % model)
    return ModelSpec(public, upstream, context, tier, weight, currency, **costs)


def clean_models(value) -> list[ModelSpec]:
    """A list of ``ModelSpec`` or of dicts with public_name, upstream_name
    (defaults to the public name), context_window, tier (0 primary), weight
    (empty: the node's), cost_currency and the ``COST_FIELDS``."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ValueError(_("Models are a list."))
    if len(value) > MAX_MODELS:
        raise ValueError(_("A node may serve at most %(max)s models.") % {"max": MAX_MODELS})
    out: list[ModelSpec] = []
    seen: set[str] = set()
    for item in value:
        if isinstance(item, ModelSpec):
            item = vars(item)
        if not isinstance(item, dict):
            raise ValueError(_("Each model needs a public_name."))
        spec = _clean_model(item)
        if spec.public_name in seen:
            raise ValueError(
                _("Model %(name)s is listed twice: map each public name once per node.")
                % {"name": repr(spec.public_name)}
            )
        seen.add(spec.public_name)
        out.append(spec)
    return out


# --- credentials ------------------------------------------------------------------------


def clean_secret(value) -> str:
    secret = (value or "").strip() if isinstance(value, str) else ""
    if not secret:
        raise ValueError(_("Enter the API key."))
    if len(secret) > MAX_SECRET_LENGTH:
        raise ValueError(
            _("An API key has at most %(max)s characters.") % {"max": MAX_SECRET_LENGTH}
        )
    if any(c.isspace() for c in secret) or not secret.isprintable():
        raise ValueError(_("An API key has no spaces or control characters."))
    return secret


def clean_credential_fields(data: dict) -> dict:
    """The non-secret fields of a credential present in ``data``; ValueError names the field."""
    out: dict = {}
    if "label" in data:
        label = str(data["label"] or "").strip()
        if len(label) > 80:
            raise ValueError(_("A key's label has at most %(max)s characters.") % {"max": 80})
        out["label"] = label
    if "weight" in data:
        out["weight"] = clean_int(data["weight"], _("Weight"), MAX_WEIGHT)
    if "rpm_limit" in data:
        out["rpm_limit"] = clean_optional_int(data["rpm_limit"], _("Requests per minute"), MAX_RPM)
    if "tpm_limit" in data:
        out["tpm_limit"] = clean_optional_int(data["tpm_limit"], _("Tokens per minute"), MAX_TPM)
    if "max_concurrency" in data:
        out["max_concurrency"] = clean_optional_int(
            data["max_concurrency"], _("Max concurrency"), MAX_CONCURRENCY
        )
    return out


def clean_credentials(value) -> list[CredentialSpec]:
    """A new channel's key pool: ``CredentialSpec`` or dicts with a secret."""
    if value in (None, ""):
        return []
    if not isinstance(value, (list, tuple)):
        raise ValueError(_("API keys are a list."))
    if len(value) > MAX_CREDENTIALS:
        raise ValueError(_("A channel holds at most %(max)s API keys.") % {"max": MAX_CREDENTIALS})
    out = []
    for item in value:
        if isinstance(item, CredentialSpec):
            item = {"secret": item.secret, **{k: v for k, v in vars(item).items() if k != "secret"}}
        if not isinstance(item, dict):
            raise ValueError(_("Each API key needs a secret."))
        secret = clean_secret(item.get("secret"))
        fields = clean_credential_fields({k: v for k, v in item.items() if k != "secret"})
        out.append(CredentialSpec(secret=secret, **fields))
    if len({c.secret for c in out}) != len(out):
        raise ValueError(_("The same API key is listed twice."))
    return out

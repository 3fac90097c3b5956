"""What a delivery sends: the signed JSON envelope of ``kind=webhook``, the
chat apps' incoming-webhook bodies, and the readable text of an event in a
language (chat messages and e-mails).

Chat bodies (each app's documented "text" message):

* Slack: ``{"text": …}``; an answer other than 2xx is a failure.
* Feishu / Lark: ``{"msg_type": "text", "content": {"text": …}}``; its JSON
  answer's ``code`` (``StatusCode`` on older bots) must be 0.
* DingTalk and WeCom: ``{"msgtype": "text", "text": {"content": …}}``; the
  JSON answer's ``errcode`` must be 0.
"""

from __future__ import annotations

import json
from decimal import Decimal

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from console.features.webhooks.models import DestinationKind, EventType
from console.kernel.money import format_amount

_TITLES = {
    EventType.ALERT_FIRED: lambda: _("Alert fired"),
    EventType.ALERT_RESOLVED: lambda: _("Alert resolved"),
    EventType.INVOICE_FINALIZED: lambda: _("Invoice finalized"),
    EventType.INVOICE_PAID: lambda: _("Invoice paid"),
    EventType.INVOICE_OVERDUE: lambda: _("Invoice overdue"),
    EventType.CREDIT_NOTE_ISSUED: lambda: _("Credit note issued"),
    EventType.TOPUP_SUCCEEDED: lambda: _("Top-up succeeded"),
    "test": lambda: _("Test event"),
}

# Fields of a billing event's data a message names, with their labels, in this order.
_FIELDS = (
    ("number", lambda: _("Number")),
    ("invoice_number", lambda: _("Invoice")),
    ("period", lambda: _("Period")),
    ("due_at", lambda: _("Due")),
    ("method", lambda: _("Method")),
    ("reason", lambda: _("Reason")),
)

# What to do about an alert, one line per rule kind.
_ADVICE = {
    "spend_cap": lambda: _(
        "Check what the subject spends, or raise its cap if the spending is expected."
    ),
    "balance_low": lambda: _("Top up the prepaid balance before calls are refused."),
    "balance_runway": lambda: _("Top up the prepaid balance: at this pace it runs out soon."),
    "error_rate": lambda: _("Look at the failing calls in the usage pages and the nodes' health."),
    "latency_p99": lambda: _("Check the nodes' load and health, or route the model elsewhere."),
    "ttft_p99": lambda: _("Check the nodes' load and health, or route the model elsewhere."),
    "upstream_down": lambda: _(
        "Check the node or credential on the nodes page; calls avoid it meanwhile."
    ),
    "rate_near_limit": lambda: _("Slow the key's callers down, or raise its per-minute limit."),
    "invoice_overdue": lambda: _("Pay the invoice, or contact billing if it is wrong."),
}

# What an alert without figures reports, by its threshold key.
_STATES = {
    "health": lambda: _("the node or channel fails its health checks"),
    "credential": lambda: _("the credential is disabled"),
}

# Where a billing event's link points, under CONSOLE_BASE_URL.
_PATHS: dict[str, str] = {
    EventType.TOPUP_SUCCEEDED: "/billing/balance/",
}


def envelope(event, organization_slug: str) -> bytes:
    """The exact body of a signed webhook (what the signature covers)."""
    body = {
        "id": event.event_id,
        "type": event.type,
        "created": int(event.created_at.timestamp()),
        "organization": organization_slug,
        "data": event.data,
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True, default=str).encode()


def _amount(data: dict) -> str:
    currency = str(data.get("currency") or "USD")
    if isinstance(data.get("amount_minor"), int):
        return format_amount(data["amount_minor"], currency, unit="minor")
    if isinstance(data.get("amount_micro"), int):
        return format_amount(data["amount_micro"], currency)
    return ""


def link(path: str) -> str:
    """An absolute console link: ``path`` under ``settings.CONSOLE_BASE_URL``
    (an absolute URL is kept)."""
    if path.startswith(("http://", "https://")):
        return path
    return settings.CONSOLE_BASE_URL + "/" + path.lstrip("/")


def _plain(value: Decimal) -> str:
    text = f"{value:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def figure(unit: str, raw, currency: str, *, exact: bool = False) -> str:
    """An alert's value or threshold as a person reads it (``unit`` as
    ``alerts.services.event_data`` names it)."""
    if raw in (None, ""):
        return "—"
    value = Decimal(str(raw))
    if unit == "micro":
        return format_amount(int(value), currency, exact=exact)
    if unit == "minor":
        return format_amount(int(value), currency, unit="minor")
    if unit == "percent":
        return f"{_plain(value.quantize(Decimal('0.01')))} %"
    if unit == "ms":
        return f"{_plain(value.quantize(Decimal('1')))} ms"
    if unit == "days":
        days = value.quantize(Decimal("0.1"))
        return ngettext("%(n)s day", "%(n)s days", 1 if days == 1 else 2) % {"n": _plain(days)}
    return _plain(value)


def _alike(first: str, second: str) -> bool:
    """Two rounded amounts that read the same, or as "< 0.01 USD"."""
    return first == second or first[:1] in "<>" or second[:1] in "<>"


def figures(unit: str, value, threshold, currency: str) -> tuple[str, str]:
    """Value and threshold, with more decimals when rounding makes them read alike."""
    texts = figure(unit, value, currency), figure(unit, threshold, currency)
    if unit == "micro" and str(value) != str(threshold) and _alike(*texts):
        texts = (
            figure(unit, value, currency, exact=True),
            figure(unit, threshold, currency, exact=True),
        )
    return texts


def period_text(period: str, threshold_key: str = "") -> str:
    if period.startswith("d:"):
        text = _("the day %(day)s") % {"day": period[2:]}
    elif period.startswith("m:"):
        text = _("the month %(month)s") % {"month": period[2:]}
    elif period == "life":
        text = _("lifetime")
    else:
        text = period
    if threshold_key.isdigit() and text:
        return _("%(pct)s %% of the cap for %(period)s") % {"pct": threshold_key, "period": text}
    return text


def _alert_lines(event_type: str, data: dict) -> list[str]:
    rule: dict = data["rule"] if isinstance(data.get("rule"), dict) else {}
    kind = str(data.get("kind") or rule.get("kind") or "")
    currency = str(data.get("currency") or "USD")
    unit = str(data.get("unit") or "")
    value, threshold = figures(unit, data.get("value"), data.get("threshold"), currency)
    lines = [
        _("Rule: %(name)s") % {"name": data.get("rule_name") or rule.get("name") or "—"},
        _("Subject: %(subject)s") % {"subject": data.get("subject_label") or data.get("subject")},
    ]
    state = _STATES.get(str(data.get("threshold_key") or ""))
    if state and data.get("value") in (None, ""):
        lines.append(_("State: %(state)s") % {"state": state()})
    else:
        lines.append(_("Value: %(value)s") % {"value": value})
        lines.append(_("Threshold: %(threshold)s") % {"threshold": threshold})
    period = period_text(str(data.get("period") or ""), str(data.get("threshold_key") or ""))
    if period:
        lines.append(_("Period: %(period)s") % {"period": period})
    if data.get("fired_at"):
        lines.append(_("Since: %(when)s") % {"when": _when(str(data["fired_at"]))})
    if event_type == EventType.ALERT_RESOLVED:
        if data.get("resolved_at"):
            lines.append(_("Resolved: %(when)s") % {"when": _when(str(data["resolved_at"]))})
        if data.get("resolved_value") not in (None, ""):
            now = figure(unit, data["resolved_value"], currency)
            lines.append(_("Value now: %(value)s") % {"value": now})
    elif kind in _ADVICE:
        lines.append(_ADVICE[kind]())
    return lines


def _when(iso: str) -> str:
    """An ISO time as "2026-12-04 09:30 UTC" (the offset kept when not UTC)."""
    text = str(iso).replace("T", " ")
    if text.endswith("+00:00"):
        return text[:16] + " UTC"
    return text[:16] + (f" {text[-6:]}" if len(text) > 19 and text[-6] in "+-" else "")


def event_text(event_type: str, data: dict, organization_name: str, language: str) -> str:
    """The event as a few lines a person reads, in ``language``: never a
    Python repr of the data; the link built from ``CONSOLE_BASE_URL``."""
    with translation.override(language):
        title = _TITLES.get(event_type)
        heading = str(title()) if title else event_type
        if event_type in (EventType.ALERT_FIRED, EventType.ALERT_RESOLVED):
            rule = data["rule"] if isinstance(data.get("rule"), dict) else {}
            name = data.get("rule_name") or rule.get("name")
            heading = f"{heading}: {name}" if name else heading
        lines = [f"[{organization_name}] {heading}"]
        summary = data.get("summary") or data.get("message") or data.get("title")
        if summary:
            lines.append(str(summary))
        if event_type in (EventType.ALERT_FIRED, EventType.ALERT_RESOLVED):
            lines.extend(_alert_lines(event_type, data))
        else:
            for key, label in _FIELDS:
                value = data.get(key)
                if value in (None, "") or isinstance(value, dict | list):
                    continue
                lines.append(f"{label()}: {_when(value) if key == 'due_at' else value}")
            amount = _amount(data)
            if amount:
                lines.append(f"{_('Amount')}: {amount}")
        path = str(data.get("console_url") or data.get("url") or _PATHS.get(event_type, "/"))
        lines.append(_("Open the console: %(url)s") % {"url": link(path)})
        return "\n".join(lines)


def chat_body(kind: str, text: str) -> bytes:
    if kind == DestinationKind.SLACK:
        body: dict = {"text": text}
    elif kind == DestinationKind.FEISHU:
        body = {"msg_type": "text", "content": {"text": text}}
    elif kind in (DestinationKind.DINGTALK, DestinationKind.WECOM):
        body = {"msgtype": "text", "text": {"content": text}}
    else:  # pragma: no cover - a kind without a chat format
        raise ValueError(kind)
    return json.dumps(body, ensure_ascii=False).encode()


def chat_refusal(kind: str, answer: bytes) -> str:
    """Why a chat app's 2xx answer still reports an error ("" when it does not)."""
    if kind not in (DestinationKind.FEISHU, DestinationKind.DINGTALK, DestinationKind.WECOM):
        return ""
    try:
        parsed = json.loads(answer or b"{}")
    except ValueError:
        return ""
    if not isinstance(parsed, dict):
        return ""
    if kind == DestinationKind.FEISHU:
        code = parsed.get("code", parsed.get("StatusCode", 0))
        message = parsed.get("msg") or parsed.get("StatusMessage") or ""
    else:
        code = parsed.get("errcode", 0)
        message = parsed.get("errmsg") or ""
    if code in (0, None):
        return ""
    return f"error {code}: {message}"[:300]

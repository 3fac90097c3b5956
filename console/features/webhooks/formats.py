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

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _

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

# Fields of an event's data a message names, with their labels, in this order.
_FIELDS = (
    ("rule", lambda: _("Rule")),
    ("number", lambda: _("Number")),
    ("invoice_number", lambda: _("Invoice")),
    ("period", lambda: _("Period")),
    ("due_at", lambda: _("Due")),
    ("reason", lambda: _("Reason")),
)


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


def event_text(event_type: str, data: dict, organization_name: str, language: str) -> str:
    """The event as a few lines a person reads, in ``language``."""
    with translation.override(language):
        title = _TITLES.get(event_type)
        heading = str(title()) if title else event_type
        lines = [f"[{organization_name}] {heading}"]
        summary = data.get("summary") or data.get("message") or data.get("title")
        if summary:
            lines.append(str(summary))
        for key, label in _FIELDS:
            if data.get(key) not in (None, ""):
                lines.append(f"{label()}: {data[key]}")
        amount = _amount(data)
        if amount:
            lines.append(f"{_('Amount')}: {amount}")
        lines.append(_("Open the console: %(url)s") % {"url": settings.CONSOLE_BASE_URL})
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

"""The analytics filter form: time range (presets or custom, in the
organization's time zone), dimensions, and how to split the charts. Every
page and chart partial parses its query string with it, so a shared URL
shows the same thing and bad input is a form error, never a server error."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from django import forms
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts.facade import Actor
from usage.facade import (
    OrganizationFilterMixin,
    key_filter_field,
    node_filter_field,
    sub_account_filter_field,
)

RANGES = [
    ("1h", gettext_lazy("Last hour")),
    ("24h", gettext_lazy("Last 24 hours")),
    ("7d", gettext_lazy("Last 7 days")),
    ("30d", gettext_lazy("Last 30 days")),
    ("month", gettext_lazy("This month")),
    ("custom", gettext_lazy("Custom range")),
]
DEFAULT_RANGE = "24h"
MAX_RANGE = timedelta(days=93)
# Ranges up to this long are drawn per hour; longer ones per day.
HOURLY_UP_TO = timedelta(hours=72)
PERCENTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999}
COMPARE = [
    ("", gettext_lazy("Nothing (all calls)")),
    ("model", gettext_lazy("Model")),
    ("node", gettext_lazy("Node")),
]
CACHE_COMPARE = [*COMPARE, ("key", gettext_lazy("API key"))]
STACK = [
    ("model", gettext_lazy("Model")),
    ("sub_account", gettext_lazy("Sub-account")),
    ("key", gettext_lazy("API key")),
]
ATTRIBUTE = [
    ("", gettext_lazy("Nothing")),
    ("tag", gettext_lazy("A tag's value")),
    ("end_user", gettext_lazy("End user")),
]
# Form values to ``usage.analytics`` group-by columns.
GROUP_COLUMN = {"model": "model", "node": "node_id", "key": "api_key_id",
                "sub_account": "sub_account_id"}  # fmt: skip


class AnalyticsForm(OrganizationFilterMixin, forms.Form):
    range = forms.ChoiceField(required=False, choices=RANGES, label=gettext_lazy("Time range"))
    model = forms.CharField(
        required=False,
        max_length=128,
        label=gettext_lazy("Model"),
        widget=forms.TextInput(
            attrs={"list": "model-options", "placeholder": gettext_lazy("all models")}
        ),
    )
    node = node_filter_field()
    key = key_filter_field(gettext_lazy("API key"))
    sub_account = sub_account_filter_field()
    protocol = forms.ChoiceField(
        required=False,
        choices=[("", gettext_lazy("All protocols")), ("openai", "OpenAI"),
                 ("anthropic", "Anthropic"), ("gemini", "Gemini")],
        label=gettext_lazy("Protocol"),
    )  # fmt: skip
    stream = forms.ChoiceField(
        required=False,
        choices=[
            ("", gettext_lazy("Streamed or not")),
            ("stream", gettext_lazy("Streamed")),
            ("plain", gettext_lazy("Not streamed")),
        ],
        label=gettext_lazy("Streaming"),
    )
    compare = forms.ChoiceField(
        required=False, choices=CACHE_COMPARE, label=gettext_lazy("Compare by")
    )
    pct = forms.ChoiceField(
        required=False,
        choices=[(k, k) for k in PERCENTILES],
        label=gettext_lazy("Percentile compared"),
    )
    stack = forms.ChoiceField(required=False, choices=STACK, label=gettext_lazy("Stack spend by"))
    attribute = forms.ChoiceField(
        required=False, choices=ATTRIBUTE, label=gettext_lazy("Group spend by")
    )
    tag_key = forms.CharField(
        required=False,
        max_length=32,
        label=gettext_lazy("Tag key"),
        help_text=gettext_lazy("The tag whose values group the spend, such as team"),
        # hx-preserve: a key being typed survives the form's swap when another
        # filter (such as "Group spend by") changed a moment before (issue 38).
        widget=forms.TextInput(
            attrs={
                "list": "tag-key-options",
                "placeholder": gettext_lazy("team"),
                "hx-preserve": "true",
            }
        ),
    )
    refresh = forms.ChoiceField(
        required=False,
        choices=[("", gettext_lazy("Off")), ("1", gettext_lazy("Every 60 s"))],
        label=gettext_lazy("Auto-refresh"),
    )

    # Shown selected when the query string leaves them out (and left out of links).
    DEFAULTS = {"range": DEFAULT_RANGE, "pct": "p90"}

    def __init__(self, data=None, *, actor: Actor, now: datetime | None = None, **kwargs):
        given = data
        if data is not None:
            data = data.copy()
            for name, value in self.DEFAULTS.items():
                if not data.get(name) and not (
                    name == "range" and (data.get("from") or data.get("to"))
                ):
                    data[name] = value
        super().__init__(data, **kwargs)
        self.given = given if given is not None else {}
        self.for_organization(actor)
        self.now = now or timezone.now()
        for name in ("from", "to"):
            self.fields[name].help_text = _("%(zone)s time") % {"zone": self.tz.key}
            self.fields[name].widget = forms.DateTimeInput(
                attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"
            )

    def clean(self):
        # "Group spend by: a tag's value" without a tag key yet is no error: the
        # form swaps in as soon as the choice changes, before the key is typed
        # (issue 38); the spend-by-tag chart asks for the key instead.
        data = super().clean()
        if self.errors:
            return data
        start, end = data.get("from"), data.get("to")
        preset = data.get("range") or ("custom" if start or end else DEFAULT_RANGE)
        data["range"] = preset
        if preset == "custom":
            if start is None:
                self.add_error("from", _("Give the start of a custom range."))
                return data
            end = end or self.now
            if start >= end:
                self.add_error("to", _("The end of the time range must be after its start."))
                return data
            if end - start > MAX_RANGE:
                self.add_error("to", _("A range can be at most 93 days; narrow it."))
                return data
        else:
            start, end = self._preset(preset)
        data["start"], data["end"] = start, end
        data["bucket"] = "hour" if end - start <= HOURLY_UP_TO else "day"
        return data

    def _preset(self, preset: str) -> tuple[datetime, datetime]:
        now = self.now.astimezone(UTC)
        end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        local = now.astimezone(self.tz)
        if preset == "1h":
            return now - timedelta(hours=1), end
        if preset == "24h":
            return end - timedelta(hours=24), end
        if preset == "month":
            first = datetime.combine(local.date().replace(day=1), time.min, tzinfo=self.tz)
            return first, end
        days = 7 if preset == "7d" else 30
        day = (local - timedelta(days=days - 1)).date()
        return datetime.combine(day, time.min, tzinfo=self.tz), end

    # --- results, once valid -------------------------------------------------

    def dimension_filters(self) -> dict:
        d = self.cleaned_data
        return {
            "model": d.get("model") or None,
            "node_id": d["node"].pk if d.get("node") else None,
            "api_key_id": d["key"].pk if d.get("key") else None,
            "sub_account_id": d["sub_account"].pk if d.get("sub_account") else None,
            "protocol": d.get("protocol") or None,
            "mode": d.get("stream") or None,
        }

    def params(self) -> dict[str, str]:
        """The filters as submitted, for links and chart URLs that keep them."""
        if not self.is_bound:
            return {}
        keep = ("range", "from", "to", "model", "node", "key", "sub_account", "protocol",
                "stream", "compare", "pct", "stack", "attribute", "tag_key", "refresh")  # fmt: skip
        return {k: self.given[k] for k in keep if self.given.get(k)}


AnalyticsForm.base_fields = {
    **{k: v for k, v in AnalyticsForm.base_fields.items() if k == "range"},
    "from": forms.DateTimeField(required=False, label=gettext_lazy("From")),
    "to": forms.DateTimeField(required=False, label=gettext_lazy("To")),
    **{k: v for k, v in AnalyticsForm.base_fields.items() if k != "range"},
}

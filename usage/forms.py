"""The call-log filter form. The console page and the REST API both parse
their query string with it, so the two accept (and reject) the same input."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django import forms
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts.facade import Actor, SubAccount
from console.kernel import timezones
from inference_node.facade import nodes_own_and_shared
from usage import logs
from usage.events import MAX_END_USER, MAX_TAG_VALUE, MAX_TAGS

QUICK_RANGES = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7),
                "30d": timedelta(days=30)}  # fmt: skip
_STATUS_RE = re.compile(r"^[1-5][0-9]{2}$")
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:\-]{1,64}$")
MAX_LATENCY_MS = 24 * 3600 * 1000
_TAG_KEY_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,32}$")


class RepeatedTextInput(forms.TextInput):
    """A text box per value of a parameter that may be repeated
    (``?tag=a:1&tag=b:2``), and one more, empty, to add a value."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[str]:
        getlist = getattr(data, "getlist", None)
        values = getlist(name) if getlist else data.get(name)
        if values is None:
            return []
        if isinstance(values, str):
            values = [values]
        return [v for v in values if isinstance(v, str) and v]  # "": an empty box

    def render(
        self,
        name: str,
        value: list[str] | None,
        attrs: dict[str, Any] | None = None,
        renderer: Any = None,
    ) -> str:
        values = [v for v in (value or []) if v]
        boxes: list[str] = []
        for i, v in enumerate([*values, ""]):
            box_attrs = dict(attrs or {})
            if i:
                box_attrs.pop("id", None)
            boxes.append(super().render(name, v, box_attrs, renderer))
        html: str = mark_safe("".join(boxes))  # noqa: S308 - each box is rendered (escaped) by Django
        return html

    def format_value(self, value: Any) -> str | None:
        return value if isinstance(value, str) else None


class TagFilterField(forms.Field):
    """``key:value`` tag filters, each a tag the calls must carry."""

    widget = RepeatedTextInput

    def to_python(self, value: Any) -> list[tuple[str, str]]:
        if not value:
            return []
        if isinstance(value, str):
            value = [value]
        if len(value) > MAX_TAGS:
            raise forms.ValidationError(
                _("Filter on at most %(n)s tags.") % {"n": MAX_TAGS}, code="too_many"
            )
        out = []
        for text in value:
            key, sep, tag_value = text.partition(":")
            bad_value = not 0 < len(tag_value) <= MAX_TAG_VALUE or "\x00" in tag_value
            if not sep or not _TAG_KEY_RE.match(key) or bad_value:
                raise forms.ValidationError(
                    _(
                        "Give a tag as key:value; the key is 1 to 32 letters, digits or "
                        "_ . - and the value 1 to 128 characters."
                    ),
                    code="invalid",
                )
            out.append((key, tag_value))
        return out


class KeyChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.prefix} {obj.name}"


def key_filter_field(label: str) -> KeyChoiceField:
    """The key filter (its options: the keys the actor may see, set by
    ``OrganizationFilterMixin.for_organization``)."""
    return KeyChoiceField(
        queryset=None, required=False, empty_label=gettext_lazy("All keys"), label=label
    )


def sub_account_filter_field() -> forms.ModelChoiceField:
    """The sub-account filter (its options: the organization's sub-accounts)."""
    return forms.ModelChoiceField(
        queryset=None,
        required=False,
        label=gettext_lazy("Sub-account"),
        empty_label=gettext_lazy("All sub-accounts"),
    )


def node_filter_field() -> forms.ModelChoiceField:
    """The node filter (its options: the organization's own and the shared nodes)."""
    return forms.ModelChoiceField(
        queryset=None, required=False, empty_label=gettext_lazy("All nodes"),
        label=gettext_lazy("Node"),
    )  # fmt: skip


class OrganizationFilterMixin(forms.Form):
    """What the call-log and analytics filter forms share: the key, sub-account
    and node options of the actor's organization (the fields made by
    ``key_filter_field``, ``sub_account_filter_field`` and
    ``node_filter_field``), read once; times typed without an offset read in
    the organization's time zone (``self.tz``); the model and tag key filters
    cleaned alike."""

    actor: Actor
    tz: ZoneInfo

    def for_organization(self, actor: Actor) -> None:
        """Filter for ``actor``: its organization's time zone, and the options
        of whichever of the key, sub-account and node fields the form has."""
        self.actor = actor
        self.tz = timezones.org_zone(actor.organization)
        if "key" in self.fields:
            self.fields["key"].queryset = logs.visible_keys(actor=actor).order_by("name", "pk")
        if "sub_account" in self.fields:
            self.fields["sub_account"].queryset = SubAccount.objects.filter(
                organization_id=actor.organization_id
            ).order_by("name")
        if "node" in self.fields:
            self.fields["node"].queryset = nodes_own_and_shared(actor.organization_id).order_by(
                "name", "pk"
            )

    def prepare_choices(self) -> None:
        """Read the key, sub-account and node options once, with plain
        queries (a ModelChoiceField re-reads them through a server-side
        cursor for every rendering). Only pages that show the form need it."""
        for name in ("key", "sub_account", "node"):
            field = self.fields[name]
            field.widget.choices = [("", field.empty_label)] + [
                (obj.pk, field.label_from_instance(obj)) for obj in field.queryset
            ]

    def full_clean(self) -> None:
        with timezone.override(self.tz):
            super().full_clean()

    def clean_model(self) -> str:
        model: str = self.cleaned_data["model"].strip()
        return model

    def clean_tag_key(self) -> str:
        value: str = self.cleaned_data["tag_key"].strip()
        if value and not _TAG_KEY_RE.match(value):
            raise forms.ValidationError(
                _("A tag key is 1 to 32 letters, digits or _ . - characters.")
            )
        return value


class CallFilterForm(OrganizationFilterMixin, forms.Form):
    """Query parameters of the call logs. ``from``/``to`` are declared below
    the class because ``from`` is a Python keyword."""

    range = forms.ChoiceField(
        required=False,
        label=gettext_lazy("Quick range"),
        choices=[
            ("", gettext_lazy("Any time")),
            ("1h", gettext_lazy("Last hour")),
            ("24h", gettext_lazy("Last 24 hours")),
            ("7d", gettext_lazy("Last 7 days")),
            ("30d", gettext_lazy("Last 30 days")),
        ],
    )
    key = key_filter_field(gettext_lazy("Key"))
    sub_account = sub_account_filter_field()
    # A choice on the page (``prepare_choices``: the models the organization
    # has called and the catalogue's); any exact name is still accepted, so a
    # link or an API query for a model no longer offered still works.
    model = forms.CharField(
        required=False, max_length=128, widget=forms.Select, label=gettext_lazy("Model")
    )
    node = node_filter_field()
    status = forms.CharField(
        required=False,
        max_length=6,
        label=gettext_lazy("Status"),
        help_text=gettext_lazy("ok, errors, 4xx, 429, 5xx or an exact code such as 404"),
        widget=forms.TextInput(
            attrs={"list": "status-options", "placeholder": gettext_lazy("any")}
        ),
    )
    min_latency_ms = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_LATENCY_MS,
        label=gettext_lazy("Min latency (ms)"),
        widget=forms.NumberInput(attrs={"placeholder": "0"}),
    )
    request_id = forms.CharField(required=False, max_length=64, label=gettext_lazy("Request id"))
    tag = TagFilterField(
        required=False,
        label=gettext_lazy("Tag"),
        help_text=gettext_lazy("key:value, such as team:search; every tag given must match"),
        widget=RepeatedTextInput(attrs={"placeholder": gettext_lazy("key:value")}),
    )
    end_user = forms.CharField(
        required=False, max_length=MAX_END_USER, strip=False, label=gettext_lazy("End user")
    )
    limit = forms.IntegerField(
        required=False, min_value=1, max_value=logs.MAX_LIMIT, widget=forms.HiddenInput
    )
    sort = forms.ChoiceField(
        required=False, choices=list(logs.SORTS.items()), widget=forms.HiddenInput
    )
    before = forms.CharField(required=False, max_length=400, widget=forms.HiddenInput)
    after = forms.CharField(required=False, max_length=400, widget=forms.HiddenInput)

    def __init__(self, data: Any = None, *, actor: Actor, **kwargs: Any) -> None:
        super().__init__(data, **kwargs)
        self.for_organization(actor)
        for name in ("from", "to"):
            self.fields[name].help_text = _("ISO 8601; without an offset, %(zone)s time") % {
                "zone": self.tz.key
            }

    def clean_status(self) -> str:
        value: str = self.cleaned_data["status"].strip().lower()
        if value and value not in logs.STATUS_CLASSES and not _STATUS_RE.match(value):
            raise forms.ValidationError(
                _("Use ok, errors, 4xx, 429, 5xx or a status code from 100 to 599.")
            )
        return value

    def clean_request_id(self) -> str:
        value: str = self.cleaned_data["request_id"].strip()
        if value and not _REQUEST_ID_RE.match(value):
            raise forms.ValidationError(_("A request id has letters, digits and . _ : - only."))
        return value

    def prepare_choices(self) -> None:
        super().prepare_choices()
        names = logs.model_names(actor=self.actor)
        current = (self.data.get("model") or "").strip() if self.is_bound else ""
        if current and current not in names:
            names = sorted([*names, current])
        self.fields["model"].widget.choices = [("", _("All models"))] + [(n, n) for n in names]

    @property
    def sort_order(self) -> str:
        return (self.cleaned_data.get("sort") if self.is_valid() else "") or logs.NEWEST_FIRST

    def _cursor(self, name: str) -> logs.Cursor | None:
        token = self.cleaned_data.get(name)
        if not token:
            return None
        try:
            return logs.Cursor.decode(token)
        except ValueError as exc:
            self.add_error(name, str(exc))
            return None

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean()
        start, end = data.get("from"), data.get("to")
        quick = data.get("range")
        if quick and start is None and "from" not in self.errors:
            start = timezone.now() - QUICK_RANGES[quick]
        if start is not None and end is not None and start >= end:
            self.add_error("to", _("The end of the time range must be after its start."))
        data["start"], data["end"] = start, end
        if data.get("before") and data.get("after"):
            self.add_error("after", _("Give either before or after, not both."))
        data["before_cursor"] = self._cursor("before")
        data["after_cursor"] = self._cursor("after")
        return data

    # --- results, once valid -------------------------------------------------

    def filters(self) -> logs.CallFilters:
        d = self.cleaned_data
        return logs.CallFilters(
            start=d.get("start"),
            end=d.get("end"),
            api_key_id=d["key"].pk if d.get("key") else None,
            sub_account_id=d["sub_account"].pk if d.get("sub_account") else None,
            model=d.get("model") or None,
            node_id=d["node"].pk if d.get("node") else None,
            status=d.get("status") or None,
            min_latency_ms=d.get("min_latency_ms"),
            request_id=d.get("request_id") or None,
            tags=tuple(d.get("tag") or ()),
            end_user=d.get("end_user") or None,
        )

    @property
    def page_size(self) -> int:
        return self.cleaned_data.get("limit") or logs.DEFAULT_LIMIT

    def error_fields(self) -> dict[str, list[str]]:
        return {name: [str(e) for e in errors] for name, errors in self.errors.items()}

    def filter_params(self) -> dict[str, str | list[str]]:
        """The filters as submitted (no cursor), for links that keep them
        (``tag``, which may repeat, as a list: ``urlencode(..., doseq=True)``)."""
        if not self.is_bound:
            return {}
        keep = ("from", "to", "range", "key", "sub_account", "model", "node", "status",
                "min_latency_ms", "request_id", "end_user", "limit", "sort")  # fmt: skip
        params: dict[str, str | list[str]] = {k: self.data[k] for k in keep if self.data.get(k)}
        tags = self.fields["tag"].widget.value_from_datadict(self.data, None, "tag")
        if tags:
            params["tag"] = tags
        return params


CallFilterForm.base_fields = {
    "from": forms.DateTimeField(required=False, label=gettext_lazy("From")),
    "to": forms.DateTimeField(required=False, label=gettext_lazy("To")),
    **CallFilterForm.base_fields,
}


MAX_ATTRIBUTION_RANGE = timedelta(days=366)
DEFAULT_ATTRIBUTION_RANGE = timedelta(days=30)


class AttributionQueryForm(OrganizationFilterMixin, forms.Form):
    """Query parameters of the spend attribution API: a range (by default
    the last 30 days), what to group by (``by=tag`` with ``tag_key``, or
    ``by=end_user``, the default), and optionally one key."""

    by = forms.ChoiceField(
        required=False,
        choices=[("tag", "tag"), ("end_user", "end_user")],
        label=gettext_lazy("Group by"),
    )
    tag_key = forms.CharField(required=False, max_length=32, label=gettext_lazy("Tag key"))
    key = KeyChoiceField(queryset=None, required=False, label=gettext_lazy("Key"))

    def __init__(self, data: Any = None, *, actor: Actor, **kwargs: Any) -> None:
        super().__init__(data, **kwargs)
        self.for_organization(actor)

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean()
        data["by"] = data.get("by") or "end_user"
        if data["by"] == "tag" and not data.get("tag_key") and "tag_key" not in self.errors:
            self.add_error("tag_key", _("Give the tag key whose values group the spend."))
        start, end = data.get("from"), data.get("to")
        if "from" not in self.errors and "to" not in self.errors:
            end = data["to"] = end or timezone.now()
            if start is None:
                try:
                    start = end - DEFAULT_ATTRIBUTION_RANGE
                except OverflowError:  # an end in year 1 has no 30 days before it
                    self.add_error("to", _("The end of the time range is too early."))
                    return data
            data["from"] = start
        if start is not None and end is not None:
            if start >= end:
                self.add_error("to", _("The end of the time range must be after its start."))
            elif end - start > MAX_ATTRIBUTION_RANGE:
                self.add_error("to", _("A range can be at most 366 days; narrow it."))
        return data

    def error_fields(self) -> dict[str, list[str]]:
        return {name: [str(e) for e in errors] for name, errors in self.errors.items()}


AttributionQueryForm.base_fields = {
    "from": forms.DateTimeField(required=False, label=gettext_lazy("From")),
    "to": forms.DateTimeField(required=False, label=gettext_lazy("To")),
    **AttributionQueryForm.base_fields,
}

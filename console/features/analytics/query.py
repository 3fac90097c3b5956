"""What a chart is asked for, once the form is valid: the organization, the
range and bucket, the dimension filters narrowed to what the actor may see,
and display names and colours for the groups."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlencode

from django.db.models import Q
from django.urls import reverse
from django.utils.translation import gettext as _

from accounts.facade import Actor, ApiKey, Perm, SubAccount
from console.features.analytics.forms import GROUP_COLUMN, PERCENTILES, AnalyticsForm
from inference_node.facade import Node
from usage.facade import Series, model_names, unserved_models, visible_keys

# Qualitative palette (Okabe-Ito, then Tableau) for series; one colour per
# model everywhere (see ``Names.colour``).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#8C6D1F",
           "#4E79A7", "#F28E2B", "#59A14F", "#B07AA1", "#76B7B2", "#FF9DA7", "#9C755F",
           "#EDC948", "#BAB0AC")  # fmt: skip
STATUS_COLOURS = {"2xx": "#117a48", "4xx": "#E69F00", "429": "#7b4fd0", "5xx": "#c0362c"}
QUANTILE_COLOURS = {0.5: "#0072B2", 0.9: "#009E73", 0.99: "#E69F00", 0.999: "#c0362c"}
TOKEN_COLOURS = {
    "input_tokens": "#4E79A7",
    "cache_read_tokens": "#59A14F",
    "cache_write_tokens": "#EDC948",
    "output_tokens": "#F28E2B",
}


def can_see_all(actor: Actor) -> bool:
    return actor.can(Perm.USAGE_VIEW_ALL)


def scoped_filters(actor: Actor, filters: dict) -> dict:
    """The dimension filters, narrowed to the keys a developer owns."""
    filters = {k: v for k, v in filters.items() if v is not None}
    if can_see_all(actor):
        return filters
    own = list(visible_keys(actor=actor).values_list("pk", flat=True))
    wanted = filters.get("api_key_id")
    filters["api_key_id"] = [wanted] if wanted in own else own if wanted is None else []
    return filters


@dataclass
class Names:
    """Display names for group values, resolved lazily with one query per kind."""

    organization_id: int
    _cache: dict = field(default_factory=dict)

    def _load(self, column: str) -> dict:
        if column not in self._cache:
            if column == "api_key_id":
                rows = ApiKey.objects.filter(organization_id=self.organization_id).values_list(
                    "pk", "name", "public_id"
                )
                names = {pk: f"{name} ({public_id[:10]})" for pk, name, public_id in rows}
            elif column == "sub_account_id":
                names = dict(
                    SubAccount.objects.filter(organization_id=self.organization_id).values_list(
                        "pk", "name"
                    )
                )
            elif column == "node_id":
                # Only nodes this organization may see: its own and shared ones.
                names = dict(
                    Node.objects.filter(
                        Q(organization_id__isnull=True) | Q(organization_id=self.organization_id)
                    ).values_list("pk", "name")
                )
            else:
                names = {}
            self._cache[column] = names
        return self._cache[column]

    def known(self, column: str, value) -> bool:
        """Whether the value names a row this organization can filter on."""
        return bool(value) and value in self._load(column)

    def label(self, column: str | None, value) -> str:
        if column is None:
            return _("All calls")
        if column == "model":
            return value or _("(no model)")
        if not value:
            return {"sub_account_id": _("(no sub-account)"), "node_id": _("(no node)")}.get(
                column, _("(none)")
            )
        name = self._load(column).get(value)
        if name:
            return name
        unnamed = {
            "api_key_id": _("key #%(id)s"),
            "sub_account_id": _("sub-account #%(id)s"),
            "node_id": _("node #%(id)s"),
        }[column]
        return unnamed % {"id": value}

    def colour(self, column: str | None, value, _position: int = 0) -> str:
        """A model's colour follows its place in the model catalogue, so a
        model is the same colour on every chart and page; other groups are
        coloured by id."""
        if column == "model":
            if "model_colours" not in self._cache:
                names = model_names()
                self._cache["model_colours"] = {n: i for i, n in enumerate(names)}
            i = self._cache["model_colours"].get(value)
            if i is None:
                i = zlib.crc32(str(value).encode())
            return PALETTE[i % len(PALETTE)]
        if column is None:
            return PALETTE[0]
        return PALETTE[int(value or 0) * 7 % len(PALETTE)]


@dataclass
class Query:
    actor: Actor
    form: AnalyticsForm
    start: datetime
    end: datetime
    bucket: str
    filters: dict
    names: Names
    _not_models: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, actor: Actor, form: AnalyticsForm) -> Query:
        d = form.cleaned_data
        return cls(
            actor=actor,
            form=form,
            start=d["start"],
            end=d["end"],
            bucket=d["bucket"],
            filters=scoped_filters(actor, form.dimension_filters()),
            names=Names(actor.organization_id),
        )

    def not_models(
        self, names, start: datetime | None = None, end: datetime | None = None
    ) -> frozenset:
        """Those of ``names`` called in the range (this query's, or
        ``start``..``end``) that are no model: calls to a model that does not
        exist (``usage.unserved_models``). Their calls are errors: counted on
        the Errors page and in every total, never a model of their own."""
        key = (frozenset(names), start or self.start, end or self.end)
        if key not in self._not_models:
            self._not_models[key] = unserved_models(
                self.organization_id, key[1], key[2], among=key[0]
            )
        return self._not_models[key]

    def models_only(
        self,
        s: Series,
        column: str | None,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> Series:
        """The series split by ``column``, less the groups of names that are no
        model when it is split by model: the one place every chart, legend,
        comparison and breakdown by model leaves them out."""
        if column == "model" and s.groups:
            for name in self.not_models(s.groups, start, end):
                del s.groups[name]
        return s

    @property
    def org(self):
        return self.actor.organization

    @property
    def organization_id(self) -> int:
        return self.actor.organization_id

    @property
    def tz(self):
        return self.form.tz

    @property
    def currency(self) -> str:
        return self.org.currency

    def option(self, name: str, default: str = "") -> str:
        return self.form.cleaned_data.get(name) or default

    def group_column(self, name: str, default: str | None = None) -> str | None:
        value = self.option(name) or default
        return GROUP_COLUMN.get(value) if value else None

    @property
    def compared_quantile(self) -> float:
        return PERCENTILES[self.option("pct", "p90")]

    def calls_url(self, start: datetime | None = None, end: datetime | None = None, **dims) -> str:
        """The call logs filtered to this range (or ``start``..``end``) and
        these dimensions."""
        fmt = "%Y-%m-%dT%H:%M:%S"
        params = {
            "from": (start or self.start).astimezone(self.tz).strftime(fmt),
            "to": (end or self.end).astimezone(self.tz).strftime(fmt),
        }
        merged = {
            "model": self.filters.get("model"),
            "node": self.filters.get("node_id"),
            "sub_account": self.filters.get("sub_account_id"),
            "key": self.filters.get("api_key_id")
            if not isinstance(self.filters.get("api_key_id"), list)
            else None,
        }
        merged.update(dims)
        params.update({k: v for k, v in merged.items() if v not in (None, "", 0)})
        return f"{reverse('usage:calls')}?{urlencode(params)}"

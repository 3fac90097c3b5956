"""Reads of per-call logs: role scoping, filters, keyset pagination and the
CSV row stream. The console page, its htmx partials, the REST API and the
CSV export all go through here, so they always agree on who sees what.

Pages are keyset-paginated on ``(started_at, request_id)``, newest first:
no OFFSET, and never a COUNT over the table. A cursor is an opaque token
naming the row a page stops at."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q, QuerySet, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.lookups import Exact
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from accounts.facade import Actor, ApiKey, NotFound, Perm, PermissionDenied, SubAccount
from inference_node.facade import nodes_own_and_shared
from usage.models import CallRecord, CatalogModel, Grain, Rollup

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
TAIL_LIMIT = 200
STATUS_CLASSES = {
    "ok": "successful (below 400)",
    "errors": "errors (400 and up)",
    "4xx": "client errors (4xx)",
    "429": "rate limited (429)",
    "5xx": "server errors (5xx)",
}


def status_class_labels() -> dict[str, str]:
    """``STATUS_CLASSES`` as shown on a page, in the active language (the API
    keeps the English ones)."""
    return {
        "ok": _("successful (below 400)"),
        "errors": _("errors (400 and up)"),
        "4xx": _("client errors (4xx)"),
        "429": _("rate limited (429)"),
        "5xx": _("server errors (5xx)"),
    }


@dataclass(frozen=True)
class CallFilters:
    """What a log view is narrowed to. ``None`` means not filtered."""

    start: datetime | None = None
    end: datetime | None = None
    api_key_id: int | None = None
    sub_account_id: int | None = None
    model: str | None = None
    node_id: int | None = None
    status: str | None = None  # a STATUS_CLASSES key or a three-digit code
    min_latency_ms: int | None = None
    request_id: str | None = None
    # Calls carrying every one of these (key, value) tags, and for this end user.
    tags: tuple[tuple[str, str], ...] = ()
    end_user: str | None = None


@dataclass(frozen=True)
class Cursor:
    started_at: datetime
    request_id: str

    def encode(self) -> str:
        raw = json.dumps([self.started_at.isoformat(), self.request_id], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """Raise ``ValueError`` on anything that is not a token we issued."""
        try:
            padded = token + "=" * (-len(token) % 4)
            started, request_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
            when = parse_datetime(started)
        except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
            raise ValueError(
                _("This page link is malformed; start again from the first page.")
            ) from None
        if when is None or when.tzinfo is None or not isinstance(request_id, str):
            raise ValueError(_("This page link is malformed; start again from the first page."))
        return cls(when, request_id)

    @classmethod
    def of(cls, call: CallRecord) -> Cursor:
        return cls(call.started_at, call.request_id)


@dataclass
class CallPage:
    """One page, newest first. ``newer``/``older`` are cursors for the
    neighbouring pages, ``None`` where there is none."""

    calls: list[CallRecord]
    newer: str | None
    older: str | None
    newest: str | None = None  # cursor of the first row, for the live tail
    names: Names = field(default_factory=lambda: Names())


@dataclass
class Names:
    """Display names for the ids on a page, resolved with one query per kind."""

    keys: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (prefix, name)
    sub_accounts: dict[int, str] = field(default_factory=dict)
    nodes: dict[int, str] = field(default_factory=dict)


# --- scope -------------------------------------------------------------------


def can_view_calls(actor: Actor) -> bool:
    return actor.can(Perm.USAGE_VIEW_ALL) or actor.can(Perm.USAGE_VIEW_OWN)


def visible_keys(*, actor: Actor) -> QuerySet[ApiKey]:
    """Keys whose calls the actor may see: the org's, or a developer's own."""
    qs = ApiKey.objects.filter(organization_id=actor.organization_id)
    if not actor.can(Perm.USAGE_VIEW_ALL):
        qs = qs.filter(owner_id=actor.user.pk)
    return qs


def call_scope(*, actor: Actor) -> QuerySet[CallRecord]:
    """Every call the actor may see. Always one organization."""
    if not can_view_calls(actor):
        raise PermissionDenied("Your role cannot see usage.", code="permission_denied")
    qs = CallRecord.objects.filter(organization_id=actor.organization_id)
    if not actor.can(Perm.USAGE_VIEW_ALL):
        qs = qs.filter(api_key_id__in=list(visible_keys(actor=actor).values_list("pk", flat=True)))
    return qs


def status_q(status: str) -> Q:
    ranges = {"ok": (0, 399), "errors": (400, 999), "4xx": (400, 499), "5xx": (500, 599)}
    if status in ranges:
        low, high = ranges[status]
        return Q(status_code__gte=low, status_code__lte=high)
    return Q(status_code=int(status))


def apply_filters(qs: QuerySet[CallRecord], filters: CallFilters) -> QuerySet[CallRecord]:
    if filters.start is not None:
        qs = qs.filter(started_at__gte=filters.start)
    if filters.end is not None:
        qs = qs.filter(started_at__lt=filters.end)
    if filters.api_key_id is not None:
        qs = qs.filter(api_key_id=filters.api_key_id)
    if filters.sub_account_id is not None:
        qs = qs.filter(sub_account_id=filters.sub_account_id)
    if filters.model:
        qs = qs.filter(model=filters.model)
    if filters.node_id is not None:
        qs = qs.filter(node_id=filters.node_id)
    if filters.status:
        qs = qs.filter(status_q(filters.status))
    if filters.min_latency_ms is not None:
        qs = qs.filter(latency_us__gte=filters.min_latency_ms * 1000)
    if filters.request_id:
        qs = qs.filter(request_id=filters.request_id)
    if filters.end_user:
        qs = qs.filter(end_user=filters.end_user)
    for key, value in filters.tags:
        # An explicit transform and a plain text comparison: a tag key may
        # hold "__", which a lookup path would split.
        qs = qs.filter(Exact(KeyTextTransform(key, "tags"), Value(value)))
    return qs


def call_list(*, actor: Actor, filters: CallFilters) -> QuerySet[CallRecord]:
    """The filtered calls the actor may see, newest first (not yet paginated)."""
    return apply_filters(call_scope(actor=actor), filters).order_by("-started_at", "-request_id")


def call_get(*, actor: Actor, request_id: str) -> CallRecord:
    """One call by request id; another org's (or colleague's, for a developer) is not found."""
    call: CallRecord | None = call_scope(actor=actor).filter(request_id=request_id).first()
    if call is None:
        raise NotFound("No such call in this organization.")
    return call


# --- keyset pagination -------------------------------------------------------


def older_than(qs: QuerySet[CallRecord], cursor: Cursor) -> QuerySet[CallRecord]:
    # The redundant ``started_at <= t`` bounds the index range; the OR then
    # only breaks ties between calls that started in the same microsecond.
    return qs.filter(
        Q(started_at__lt=cursor.started_at)
        | Q(started_at=cursor.started_at, request_id__lt=cursor.request_id),
        started_at__lte=cursor.started_at,
    )


def newer_than(qs: QuerySet[CallRecord], cursor: Cursor) -> QuerySet[CallRecord]:
    return qs.filter(
        Q(started_at__gt=cursor.started_at)
        | Q(started_at=cursor.started_at, request_id__gt=cursor.request_id),
        started_at__gte=cursor.started_at,
    )


NEWEST_FIRST, OLDEST_FIRST = "-time", "time"
# The orders a log page may take: only those an index serves (every call
# index is organization, [key or model,] started_at), so a sorted page is an
# index range scan, never a sort of the partitioned table. Cost and latency
# have no index and are not offered (``min_latency_ms`` filters instead).
SORTS = {NEWEST_FIRST: "newest first", OLDEST_FIRST: "oldest first"}


def page_query(
    *,
    actor: Actor,
    filters: CallFilters,
    limit: int = DEFAULT_LIMIT,
    before: Cursor | None = None,
    after: Cursor | None = None,
    sort: str = NEWEST_FIRST,
) -> QuerySet[CallRecord]:
    """The one query behind a page: ``limit + 1`` rows (the extra one says
    whether there is more), in the order the rows are walked: away from the
    cursor (``before``: older rows, newest of them first; ``after``: newer
    rows, oldest first), else in the page's ``sort`` order."""
    limit = max(1, min(limit, MAX_LIMIT))
    qs = call_list(actor=actor, filters=filters)
    if after is not None:
        return newer_than(qs, after).order_by("started_at", "request_id")[: limit + 1]
    if before is not None:
        return older_than(qs, before)[: limit + 1]
    if sort == OLDEST_FIRST:
        return qs.order_by("started_at", "request_id")[: limit + 1]
    return qs[: limit + 1]


def call_page(
    *,
    actor: Actor,
    filters: CallFilters,
    limit: int = DEFAULT_LIMIT,
    before: Cursor | None = None,
    after: Cursor | None = None,
    sort: str = NEWEST_FIRST,
) -> CallPage:
    """A page of ``limit`` calls older than ``before``, or newer than
    ``after`` (the nearest ones), or the first ones in ``sort`` order; shown
    newest first, or oldest first when ``sort`` is ``OLDEST_FIRST``.
    ``newer`` / ``older`` are the cursors of the neighbouring pages (for
    ``after`` / ``before``), whichever order the page is shown in."""
    limit = max(1, min(limit, MAX_LIMIT))
    rows = list(
        page_query(actor=actor, filters=filters, limit=limit, before=before, after=after, sort=sort)
    )
    walked_up = after is not None or (before is None and sort == OLDEST_FIRST)
    calls = rows[:limit]  # in walking order: nearest the cursor (or the start) first
    if walked_up:
        more_newer = len(rows) > limit
        more_older = after is not None  # the cursor's own row is older
    else:
        more_older = len(rows) > limit
        more_newer = before is not None
    # Shown newest first, or oldest first when sorted so.
    ascending = sort == OLDEST_FIRST
    if walked_up != ascending:
        calls = calls[::-1]
    for call in calls:
        call.cursor = Cursor.of(call).encode()
    by_time: list[CallRecord] = sorted(calls, key=lambda c: (c.started_at, c.request_id))
    newest = Cursor.of(by_time[-1]).encode() if by_time else None
    oldest = Cursor.of(by_time[0]).encode() if by_time else None
    page = CallPage(
        calls=calls,
        newer=newest if calls and more_newer else None,
        older=oldest if calls and more_older else None,
        newest=newest if calls else (after.encode() if after else None),
        names=resolve_names(calls),
    )
    if not calls and after is not None and before is None:
        # Ran past the newest: offer the way back to older calls.
        page.older = after.encode()
    return page


def call_tail(
    *, actor: Actor, filters: CallFilters, after: Cursor | None, limit: int = TAIL_LIMIT
) -> CallPage:
    """Calls newer than ``after`` for the live tail (the newest when ``None``)."""
    if after is None:
        return call_page(actor=actor, filters=filters, limit=min(limit, DEFAULT_LIMIT))
    return call_page(actor=actor, filters=filters, limit=limit, after=after)


# --- names -------------------------------------------------------------------


def model_names(*, actor: Actor) -> list[str]:
    """The model names a log filter offers: those the organization has
    called (from its model rollups, an indexed read, not a scan of the
    calls) and the catalogue's, sorted."""
    called = (
        Rollup.objects.filter(organization_id=actor.organization_id, grain=Grain.MODEL)
        .order_by()
        .values_list("model", flat=True)
        .distinct()
    )
    listed = CatalogModel.objects.values_list("name", flat=True)
    return sorted({*called, *listed} - {""})


def resolve_names(calls: Iterable[CallRecord], known: Names | None = None) -> Names:
    """Key, sub-account and node names for ``calls``: at most one query per
    kind, and none for ids already in ``known``."""
    names = known or Names()
    calls = list(calls)
    # Defence in depth: names only ever come from the calls' own organization
    # (and shared nodes), whatever ids a record holds.
    org_ids = {c.organization_id for c in calls}
    key_ids = {c.api_key_id for c in calls} - names.keys.keys()
    sub_ids = {c.sub_account_id for c in calls if c.sub_account_id} - names.sub_accounts.keys()
    node_ids = {c.node_id for c in calls if c.node_id} - names.nodes.keys()
    if key_ids:
        keys = ApiKey.objects.filter(pk__in=key_ids, organization_id__in=org_ids)
        for pk, public_id, name in keys.values_list("pk", "public_id", "name"):
            names.keys[pk] = (f"sk-{public_id}", name)
    if sub_ids:
        subs = SubAccount.objects.filter(pk__in=sub_ids, organization_id__in=org_ids)
        names.sub_accounts.update(subs.values_list("pk", "name"))
    if node_ids:
        nodes = nodes_own_and_shared(*org_ids).filter(pk__in=node_ids)
        names.nodes.update(nodes.values_list("pk", "name"))
    for call in calls:
        call.key_prefix, call.key_name = names.keys.get(call.api_key_id, ("", ""))
        call.sub_account_name = names.sub_accounts.get(call.sub_account_id, "")
        call.node_name = names.nodes.get(call.node_id, "")
    return names


# --- export ------------------------------------------------------------------


def iter_calls(
    *, actor: Actor, filters: CallFilters, chunk_size: int = 5000
) -> Iterator[CallRecord]:
    """Every matching call, newest first, fetched ``chunk_size`` rows per
    query by keyset, so memory stays flat however many there are. Names are
    resolved per chunk and remembered across chunks."""
    qs = call_list(actor=actor, filters=filters)
    names = Names()
    cursor: Cursor | None = None
    while True:
        chunk = list((older_than(qs, cursor) if cursor else qs)[:chunk_size])
        if not chunk:
            return
        resolve_names(chunk, names)
        yield from chunk
        if len(chunk) < chunk_size:
            return
        cursor = Cursor.of(chunk[-1])

"""Re-rating: recompute call costs from the price book after a price fix.

Calls outside closed (invoiced) periods get their new cost, and the rollups
they count in are corrected by the difference in the same transaction.
Calls inside a closed period are never edited; each gets an ``Adjustment``
for the difference between its new cost and what was billed so far (its
cost plus earlier adjustments), so running the same re-rate twice adds
nothing the second time. Load-test calls marked "not billed" (``is_test``)
are in no rollup and on no invoice: outside a closed period their record
gets its new cost and no rollup changes; inside one they get no adjustment.
Work goes in chunks of calls, one transaction each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet, Sum
from django.utils import timezone as tz

from accounts.facade import Organization, audit_record
from usage.ingest.aggregate import END_USER, TAG, grain_cells, mode_of
from usage.ingest.rollup_sql import KEY_COLUMNS
from usage.models import (
    Adjustment,
    AttributionRollup,
    CallRecord,
    Grain,
    PeriodClose,
    RerateRun,
    Rollup,
)
from usage.prices import PriceBook
from usage.rating import discount_for, discount_ppm_for, rate

CHUNK = 2000


@dataclass
class RerateSummary:
    run_id: int | None
    dry_run: bool
    calls_examined: int = 0
    calls_rerated: int = 0
    adjustments: int = 0
    cost_delta: int = 0
    adjustment_delta: int = 0
    organizations: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _closed_periods(org_ids: set[int] | None) -> dict[int, list[tuple[datetime, datetime]]]:
    qs = PeriodClose.objects.all()
    if org_ids is not None:
        qs = qs.filter(organization_id__in=org_ids)
    out: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    for org_id, a, b in qs.values_list("organization_id", "period_start", "period_end"):
        out[org_id].append((a, b))
    return out


def _is_closed(periods: Iterable[tuple[datetime, datetime]], when: datetime) -> bool:
    return any(a <= when < b for a, b in periods)


def _hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _cells(call: CallRecord) -> tuple[tuple[Any, ...], ...]:
    return grain_cells(
        call.organization_id,
        call.sub_account_id or 0,
        call.api_key_id,
        call.model,
        call.node_id or 0,
        call.protocol,
        mode_of(call.stream),
        _hour(call.started_at),  # type: ignore[arg-type]  # carried through as the cell's hour
    )


def _correct_rollups(deltas: dict[tuple[Any, ...], list[int]]) -> None:
    """Add (cost, unpriced) differences to rollup rows, in key order."""
    for cell, (cost, unpriced) in sorted(deltas.items()):
        if not (cost or unpriced):
            continue
        where = dict(zip((*KEY_COLUMNS, "hour"), cell, strict=True))
        change = {"cost": F("cost") + cost, "unpriced_calls": F("unpriced_calls") + unpriced}
        if not Rollup.objects.filter(**where).update(**change) and where["grain"] == Grain.FULL:
            # An hour ingested before rollups kept protocol and streaming
            # (migration usage.0005): its full-grain row has neither.
            Rollup.objects.filter(**{**where, "protocol": "", "mode": ""}).update(**change)


def _attribution_cells(call: CallRecord) -> list[tuple[Any, ...]]:
    """The attribution rollup cells a call counts in (``sum_attribution``)."""
    hour = _hour(call.started_at)
    cells: list[tuple[Any, ...]] = [
        (call.organization_id, TAG, k, hour, v) for k, v in (call.tags or {}).items()
    ]
    if call.end_user:
        cells.append((call.organization_id, END_USER, "", hour, call.end_user))
    return cells


def _correct_attribution(deltas: dict[tuple[Any, ...], int]) -> None:
    """Add cost differences to attribution rollup rows, in key order."""
    for (org, kind, key, hour, value), cost in sorted(deltas.items()):
        if cost:
            AttributionRollup.objects.filter(
                organization_id=org, kind=kind, tag_key=key, hour=hour, value=value
            ).update(cost=F("cost") + cost)


@dataclass
class _Run:
    """What re-rating the chunks of one run shares: the prices, each
    organization's currency and discount, the closed periods, the run (None
    on a dry run), the summary and per organization [calls re-rated,
    adjustments, cost delta, adjustment delta]."""

    book: PriceBook
    terms: dict[int, tuple[str, int]]
    periods: dict[int, list[tuple[datetime, datetime]]]
    run: RerateRun | None
    summary: RerateSummary
    per_org: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0, 0]))

    @property
    def dry_run(self) -> bool:
        return self.summary.dry_run


@dataclass
class _Changes:
    """What one chunk changes: the re-rated records, the adjustments, and the
    rollup and attribution rollup differences per cell."""

    changed: list[CallRecord] = field(default_factory=list)
    adjustments: list[Adjustment] = field(default_factory=list)
    deltas: dict[tuple[Any, ...], list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0])
    )
    attributed: dict[tuple[Any, ...], int] = field(default_factory=lambda: defaultdict(int))


def _calls_in_chunks(calls: QuerySet[CallRecord]) -> Iterator[list[CallRecord]]:
    """The calls in (start, request id) order, ``CHUNK`` at a time by keyset."""
    calls = calls.order_by("started_at", "request_id")
    cursor = None
    while True:
        page = calls
        if cursor is not None:
            page = page.filter(started_at__gte=cursor[0]).exclude(
                started_at=cursor[0], request_id__lte=cursor[1]
            )
        chunk = list(page[:CHUNK])
        if not chunk:
            return
        cursor = (chunk[-1].started_at, chunk[-1].request_id)
        yield chunk
        if len(chunk) < CHUNK:
            return


def _finish(work: _Run, affected: set[int], started_by: Any, params: dict[str, str]) -> None:
    """Record the run's figures, and one audit record per organization it changed."""
    run, summary = work.run, work.summary
    if run is None:
        return
    RerateRun.objects.filter(pk=run.pk).update(
        calls_examined=summary.calls_examined,
        calls_rerated=summary.calls_rerated,
        adjustments=summary.adjustments,
        cost_delta=summary.cost_delta,
        adjustment_delta=summary.adjustment_delta,
        finished_at=tz.now(),
    )
    actor = SimpleNamespace(user=started_by, ip=None, organization=None)
    for org in Organization.objects.filter(pk__in=affected):
        rerated, adjusted, cost_delta, adj_delta = work.per_org[org.pk]
        audit_record(
            actor=actor,
            action="usage.rerate",
            target=run,
            organization=org,
            label=f"re-rate #{run.pk}",
            params={
                **params,
                "calls_rerated": rerated,
                "adjustments": adjusted,
                "cost_delta": cost_delta,
                "adjustment_delta": adj_delta,
            },
        )


def rerate(
    *,
    start: datetime,
    end: datetime,
    reason: str,
    organization_id: int | None = None,
    model: str | None = None,
    dry_run: bool = False,
    started_by: Any = None,
) -> RerateSummary:
    """Re-rate calls that started in ``[start, end)``; see the module docstring."""
    if not reason.strip():
        raise ValueError("a re-rate needs a reason")
    if end <= start:
        raise ValueError("the period's end must be after its start")
    book = PriceBook.load()
    orgs = Organization.objects.all()
    if organization_id is not None:
        orgs = orgs.filter(pk=organization_id)
    terms = {o.pk: (o.currency, discount_ppm_for(o.discount_rate)) for o in orgs}
    periods = _closed_periods(set(terms) if organization_id is not None else None)
    run = None
    if not dry_run:
        run = RerateRun.objects.create(
            started_by=started_by,
            organization_id=organization_id,
            model=model or "",
            period_start=start,
            period_end=end,
            reason=reason,
        )
    summary = RerateSummary(run_id=run.pk if run else None, dry_run=dry_run)
    work = _Run(book, terms, periods, run, summary)
    calls = CallRecord.objects.filter(started_at__gte=start, started_at__lt=end)
    if organization_id is not None:
        calls = calls.filter(organization_id=organization_id)
    if model:
        calls = calls.filter(model=model)
    for chunk in _calls_in_chunks(calls):
        with transaction.atomic():
            _rerate_chunk(chunk, work)
    affected = {org for org, (rerated, adjusted, *_) in work.per_org.items() if rerated or adjusted}
    summary.organizations = sorted(affected)
    params = {
        "period_start": start.isoformat(),
        "period_end": end.isoformat(),
        "model": model or "",
        "reason": reason,
    }
    _finish(work, affected, started_by, params)
    return summary


def _new_rating(call: CallRecord, work: _Run) -> tuple[int, int | None, bool] | None:
    """The call's (cost, price row, priced) from the price book now; None when
    its organization is not re-rated."""
    org_terms = work.terms.get(call.organization_id)
    if org_terms is None:
        return None
    currency, org_ppm = org_terms
    price = work.book.price_for(call.model, currency, call.organization_id, call.started_at)
    if price is None:
        return 0, None, False
    ppm = discount_for(price, org_ppm)
    tokens = (
        call.input_tokens,
        call.cache_read_tokens,
        call.cache_write_tokens,
        call.output_tokens,
    )
    return rate(tokens, price, ppm), price.id, True


def _adjust(
    call: CallRecord, new_cost: int, prior: dict[str, int], work: _Run
) -> Adjustment | None:
    """A call of a closed period: the adjustment from what it was billed so far
    to its new cost (None when there is nothing to adjust)."""
    if call.is_test:
        return None  # a load-test call marked "not billed" was on no invoice
    billed = call.cost + prior.get(call.request_id, 0)
    delta = new_cost - billed
    if not delta:
        return None
    work.summary.adjustments += 1
    work.summary.adjustment_delta += delta
    stats = work.per_org[call.organization_id]
    stats[1] += 1
    stats[3] += delta
    return Adjustment(
        run=work.run,
        organization_id=call.organization_id,
        request_id=call.request_id,
        currency=call.currency,
        original_cost=billed,
        new_cost=new_cost,
        delta=delta,
    )


def _rerated(
    call: CallRecord, rating: tuple[int, int | None, bool], work: _Run, out: _Changes
) -> None:
    """A call of an open period: its record gets the new rating, its rollup
    cells the difference."""
    new_cost, new_price_id, priced = rating
    delta = new_cost - call.cost
    unpriced = int(not priced) - int(not call.priced)
    work.summary.calls_rerated += 1
    work.summary.cost_delta += delta
    stats = work.per_org[call.organization_id]
    stats[0] += 1
    stats[2] += delta
    # A load-test call marked "not billed" is in no rollup (``usage.ingest``):
    # its record is re-rated (the test's cost), no rollup cell changes.
    if not call.is_test:
        for cell in _cells(call):
            d = out.deltas[cell]
            d[0] += delta
            d[1] += unpriced
        for cell in _attribution_cells(call):
            out.attributed[cell] += delta
    call.cost, call.price_id, call.priced = new_cost, new_price_id, priced
    out.changed.append(call)


def _prior_adjustments(request_ids: set[str]) -> dict[str, int]:
    """What earlier runs already adjusted each of these calls by."""
    if not request_ids:
        return {}
    return dict(
        Adjustment.objects.filter(request_id__in=request_ids)
        .values("request_id")
        .annotate(s=Sum("delta"))
        .values_list("request_id", "s")
    )


def _rerate_chunk(chunk: list[CallRecord], work: _Run) -> None:
    work.summary.calls_examined += len(chunk)
    closed_ids = {
        c.request_id
        for c in chunk
        if _is_closed(work.periods.get(c.organization_id, ()), c.started_at)
    }
    prior = _prior_adjustments(closed_ids)
    out = _Changes()
    for call in chunk:
        rating = _new_rating(call, work)
        if rating is None:
            continue
        if call.request_id in closed_ids:
            adjustment = _adjust(call, rating[0], prior, work)
            if adjustment is not None:
                out.adjustments.append(adjustment)
        elif rating != (call.cost, call.price_id, call.priced):
            _rerated(call, rating, work, out)
    if work.dry_run:
        return
    if out.changed:
        CallRecord.objects.bulk_update(out.changed, ["cost", "price_id", "priced"], batch_size=500)
        _correct_rollups(out.deltas)
        _correct_attribution(out.attributed)
    if out.adjustments:
        Adjustment.objects.bulk_create(out.adjustments)

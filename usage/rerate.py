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
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace

from django.db import transaction
from django.db.models import F, Sum
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

    def as_dict(self) -> dict:
        return asdict(self)


def _closed_periods(org_ids: set[int] | None) -> dict[int, list[tuple[datetime, datetime]]]:
    qs = PeriodClose.objects.all()
    if org_ids is not None:
        qs = qs.filter(organization_id__in=org_ids)
    out: dict[int, list] = defaultdict(list)
    for org_id, a, b in qs.values_list("organization_id", "period_start", "period_end"):
        out[org_id].append((a, b))
    return out


def _is_closed(periods, when: datetime) -> bool:
    return any(a <= when < b for a, b in periods)


def _hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _cells(call: CallRecord) -> tuple[tuple, ...]:
    return grain_cells(
        call.organization_id,
        call.sub_account_id or 0,
        call.api_key_id,
        call.model,
        call.node_id or 0,
        call.protocol,
        mode_of(call.stream),
        _hour(call.started_at),
    )


def _correct_rollups(deltas: dict[tuple, list[int]]) -> None:
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


def _attribution_cells(call: CallRecord) -> list[tuple]:
    """The attribution rollup cells a call counts in (``sum_attribution``)."""
    hour = _hour(call.started_at)
    cells = [(call.organization_id, TAG, k, hour, v) for k, v in (call.tags or {}).items()]
    if call.end_user:
        cells.append((call.organization_id, END_USER, "", hour, call.end_user))
    return cells


def _correct_attribution(deltas: dict[tuple, int]) -> None:
    """Add cost differences to attribution rollup rows, in key order."""
    for (org, kind, key, hour, value), cost in sorted(deltas.items()):
        if cost:
            AttributionRollup.objects.filter(
                organization_id=org, kind=kind, tag_key=key, hour=hour, value=value
            ).update(cost=F("cost") + cost)


def rerate(
    *,
    start: datetime,
    end: datetime,
    reason: str,
    organization_id: int | None = None,
    model: str | None = None,
    dry_run: bool = False,
    started_by=None,
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
    per_org: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])

    calls = CallRecord.objects.filter(started_at__gte=start, started_at__lt=end)
    if organization_id is not None:
        calls = calls.filter(organization_id=organization_id)
    if model:
        calls = calls.filter(model=model)
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
            break
        cursor = (chunk[-1].started_at, chunk[-1].request_id)
        with transaction.atomic():
            _rerate_chunk(chunk, book, terms, periods, run, summary, per_org, dry_run)
        if len(chunk) < CHUNK:
            break

    affected = {org for org, (rerated, adjusted, *_) in per_org.items() if rerated or adjusted}
    summary.organizations = sorted(affected)
    if run is not None:
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
            rerated, adjusted, cost_delta, adj_delta = per_org[org.pk]
            audit_record(
                actor=actor,
                action="usage.rerate",
                target=run,
                organization=org,
                label=f"re-rate #{run.pk}",
                params={
                    "period_start": start.isoformat(),
                    "period_end": end.isoformat(),
                    "model": model or "",
                    "reason": reason,
                    "calls_rerated": rerated,
                    "adjustments": adjusted,
                    "cost_delta": cost_delta,
                    "adjustment_delta": adj_delta,
                },
            )
    return summary


def _rerate_chunk(chunk, book, terms, periods, run, summary, per_org, dry_run) -> None:
    summary.calls_examined += len(chunk)
    closed_ids = {
        c.request_id for c in chunk if _is_closed(periods.get(c.organization_id, ()), c.started_at)
    }
    prior: dict[str, int] = {}
    if closed_ids:
        prior = dict(
            Adjustment.objects.filter(request_id__in=closed_ids)
            .values("request_id")
            .annotate(s=Sum("delta"))
            .values_list("request_id", "s")
        )
    changed: list[CallRecord] = []
    adjustments: list[Adjustment] = []
    deltas: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    attributed: dict[tuple, int] = defaultdict(int)
    for call in chunk:
        org_terms = terms.get(call.organization_id)
        if org_terms is None:
            continue
        currency, org_ppm = org_terms
        price = book.price_for(call.model, currency, call.organization_id, call.started_at)
        if price is None:
            new_cost, new_price_id, priced = 0, None, False
        else:
            ppm = discount_for(price, org_ppm)
            tokens = (
                call.input_tokens,
                call.cache_read_tokens,
                call.cache_write_tokens,
                call.output_tokens,
            )
            new_cost, new_price_id, priced = rate(tokens, price, ppm), price.id, True
        stats = per_org[call.organization_id]
        if call.request_id in closed_ids:
            if call.is_test:
                continue  # a load-test call marked "not billed" was on no invoice
            billed = call.cost + prior.get(call.request_id, 0)
            delta = new_cost - billed
            if delta:
                summary.adjustments += 1
                summary.adjustment_delta += delta
                stats[1] += 1
                stats[3] += delta
                adjustments.append(
                    Adjustment(
                        run=run,
                        organization_id=call.organization_id,
                        request_id=call.request_id,
                        currency=call.currency,
                        original_cost=billed,
                        new_cost=new_cost,
                        delta=delta,
                    )
                )
            continue
        if (new_cost, new_price_id, priced) == (call.cost, call.price_id, call.priced):
            continue
        delta = new_cost - call.cost
        unpriced = int(not priced) - int(not call.priced)
        summary.calls_rerated += 1
        summary.cost_delta += delta
        stats[0] += 1
        stats[2] += delta
        # A load-test call marked "not billed" is in no rollup (``usage.ingest``):
        # its record is re-rated (the test's cost), no rollup cell changes.
        if not call.is_test:
            for cell in _cells(call):
                d = deltas[cell]
                d[0] += delta
                d[1] += unpriced
            for cell in _attribution_cells(call):
                attributed[cell] += delta
        call.cost, call.price_id, call.priced = new_cost, new_price_id, priced
        changed.append(call)
    if dry_run:
        return
    if changed:
        CallRecord.objects.bulk_update(changed, ["cost", "price_id", "priced"], batch_size=500)
        _correct_rollups(deltas)
        _correct_attribution(attributed)
    if adjustments:
        Adjustment.objects.bulk_create(adjustments)

"""What billing reads and marks of usage, as plain data: the billed calls of a
period grouped by the price row they were rated with, the price rows
themselves, the re-rating adjustments not yet on an invoice (and marking
them billed or releasing them), the closing of a period for re-rating, and
the billed calls' costs that reconciliation and incident credits sum.

"Billed" is ``CallRecord.objects.billed()``: every call but the load-test
calls marked "not billed"."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple, TypedDict

from django.db.models import Count, Sum

from usage.models import Adjustment, CallRecord, PeriodClose, Price, RerateRun
from usage.rating import PriceRow


class UsageGroup(TypedDict):
    """A period's billed calls of one model rated with one price row (sums may be None)."""

    price_id: int | None
    model: str
    n: int
    input_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    cost: int | None


class AdjustmentRow(NamedTuple):
    id: int
    run_id: int
    delta: int


def billed_usage_groups(
    organization_id: int, start: datetime, end: datetime, currency: str
) -> list[UsageGroup]:
    """The organization's billed calls in ``[start, end)`` rated in ``currency``,
    grouped by model and price row, ordered by model then price row."""
    rows = (
        CallRecord.objects.billed()
        .filter(
            organization_id=organization_id,
            started_at__gte=start,
            started_at__lt=end,
            currency=currency,
        )
        .values("price_id", "model")
        .annotate(
            n=Count("request_id"),
            input_tokens=Sum("input_tokens"),
            cache_read_tokens=Sum("cache_read_tokens"),
            cache_write_tokens=Sum("cache_write_tokens"),
            output_tokens=Sum("output_tokens"),
            cost=Sum("cost"),
        )
        .order_by("model", "price_id")
    )
    groups: list[UsageGroup] = list(rows)
    return groups


def price_rows(ids: Iterable[int]) -> dict[int, PriceRow]:
    """The price rows of these ids (a deleted one is absent), by id."""
    return {
        p.pk: PriceRow(
            id=p.pk,
            model=p.model.name,
            currency=p.currency,
            organization_id=p.organization_id,
            input_per_mtok=p.input_per_mtok,
            cache_read_per_mtok=p.cache_read_per_mtok,
            cache_write_per_mtok=p.cache_write_per_mtok,
            output_per_mtok=p.output_per_mtok,
            effective_from=p.effective_from,
        )
        for p in Price.objects.filter(pk__in=list(ids)).select_related("model")
    }


def unbilled_adjustments(
    organization_id: int, currency: str, before: datetime
) -> list[AdjustmentRow]:
    """Adjustments in ``currency`` created before ``before`` and on no invoice yet,
    by run then id."""
    rows = (
        Adjustment.objects.filter(
            organization_id=organization_id,
            currency=currency,
            billed_reference="",
            created_at__lt=before,
        )
        .order_by("run_id", "id")
        .values_list("id", "run_id", "delta")
    )
    return [AdjustmentRow(*row) for row in rows]


def has_unbilled_adjustments(organization_id: int, before: datetime) -> bool:
    """Whether any adjustment (any currency) created before ``before`` is on no invoice."""
    found: bool = Adjustment.objects.filter(
        organization_id=organization_id, billed_reference="", created_at__lt=before
    ).exists()
    return found


def rerate_reasons(run_ids: Iterable[int]) -> dict[int, str]:
    """The reason each of these re-rating runs was started for, by run id."""
    return dict(RerateRun.objects.filter(pk__in=list(run_ids)).values_list("pk", "reason"))


def lock_unbilled_adjustments(ids: Iterable[int]) -> list[int]:
    """Lock these adjustments' rows (``SELECT ... FOR UPDATE``: call inside a
    transaction) and return the ids of those still on no invoice, in id order."""
    return list(
        Adjustment.objects.select_for_update()
        .filter(pk__in=list(ids), billed_reference="")
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def mark_adjustments_billed(ids: Iterable[int], reference: str) -> int:
    """Put these adjustments on the invoice numbered ``reference``; how many."""
    updated: int = Adjustment.objects.filter(pk__in=list(ids)).update(billed_reference=reference)
    return updated


def release_adjustments(reference: str) -> int:
    """Take the adjustments off the invoice numbered ``reference`` (voided); how many."""
    updated: int = Adjustment.objects.filter(billed_reference=reference).update(billed_reference="")
    return updated


def close_period(
    organization_id: int, period_start: datetime, period_end: datetime, reference: str
) -> None:
    """Record that the organization's period is invoiced (``reference``): re-rating
    leaves its calls alone from now on and adjusts them in the next open period."""
    PeriodClose.objects.create(
        organization_id=organization_id,
        period_start=period_start,
        period_end=period_end,
        reference=reference,
    )


def has_billed_calls(organization_id: int, start: datetime, end: datetime) -> bool:
    """Whether the organization made any billed call in ``[start, end)``."""
    found: bool = (
        CallRecord.objects.billed()
        .filter(organization_id=organization_id, started_at__gte=start, started_at__lt=end)
        .exists()
    )
    return found


class BilledCost(NamedTuple):
    """The billed calls of a period: the sum of their costs in the organization's
    currency, and how many were rated in another currency."""

    in_currency: int
    other_currency_calls: int


def billed_cost(organization_id: int, start: datetime, end: datetime, currency: str) -> BilledCost:
    calls = CallRecord.objects.billed().filter(
        organization_id=organization_id, started_at__gte=start, started_at__lt=end
    )
    in_currency = calls.filter(currency=currency).aggregate(s=Sum("cost"))["s"] or 0
    return BilledCost(in_currency, calls.exclude(currency=currency).count())


def costly_billed_calls(
    organization_id: int,
    currency: str,
    start: datetime,
    end: datetime,
    *,
    status_min: int,
    status_max: int,
    node_id: int | None = None,
    model: str | None = None,
) -> list[tuple[str, int]]:
    """``(request_id, cost)`` of the billed calls with a cost in ``[start, end)``
    answered with a status in ``[status_min, status_max]`` (of one node and
    one model when given): an incident's calls."""
    calls = CallRecord.objects.billed().filter(
        organization_id=organization_id,
        currency=currency,
        started_at__gte=start,
        started_at__lt=end,
        status_code__gte=status_min,
        status_code__lte=status_max,
        cost__gt=0,
    )
    if node_id is not None:
        calls = calls.filter(node_id=node_id)
    if model:
        calls = calls.filter(model=model)
    return list(calls.values_list("request_id", "cost"))

"""Read side of the models & prices page: the catalogue with the prices in
effect for one organization, and which models need a price."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db.models import Q
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from accounts.facade import Actor, Perm
from usage.analytics import unserved_models
from usage.models import CatalogModel, Grain, Price, Rollup
from usage.rating import PriceRow, TokenCounts, discount_for, discount_ppm_for, rate

UNPRICED_WINDOW = timedelta(days=30)
_MTOK = 1_000_000


@dataclass(frozen=True)
class PerMtok:
    """Micro-units per million tokens of each class."""

    input: int
    cache_read: int
    cache_write: int
    output: int


@dataclass(frozen=True)
class CatalogModelRow:
    """One catalogue model, everything the gateway routes and lists by."""

    name: str
    display_name: str
    family: str
    provider: str
    kind: str
    context_window: int
    fallbacks: tuple[str, ...]
    enabled: bool
    created_at: datetime
    modality: str


@dataclass(frozen=True)
class ModelPrices:
    model: CatalogModelRow
    currency: str
    list_price: PerMtok | None
    override: PerMtok | None
    # What the organization pays now: its override, else list price times its discount.
    effective: PerMtok | None
    effective_from: datetime | None
    unpriced_calls: bool
    needs_price: bool


def _row(p: Price) -> PriceRow:
    return PriceRow(
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


def _figures(row: PriceRow) -> PerMtok:
    return PerMtok(
        row.input_per_mtok, row.cache_read_per_mtok, row.cache_write_per_mtok, row.output_per_mtok
    )


def effective_per_mtok(row: PriceRow, org_discount_ppm: int) -> PerMtok:
    """The price of a million tokens of each class, rated by ``usage.rating``
    exactly as a call would be."""
    ppm = discount_for(row, org_discount_ppm)
    return PerMtok(
        rate(TokenCounts(_MTOK, 0, 0, 0), row, ppm),
        rate(TokenCounts(0, _MTOK, 0, 0), row, ppm),
        rate(TokenCounts(0, 0, _MTOK, 0), row, ppm),
        rate(TokenCounts(0, 0, 0, _MTOK), row, ppm),
    )


def unpriced_model_names(*, organization_id: int, since: datetime) -> set[str]:
    """Models with calls that had no price since ``since``. Read from the
    model-grain rollups (written with the calls, so they count exactly the
    ``priced=False`` records) instead of scanning a month of call records."""
    return set(
        Rollup.objects.filter(
            organization_id=organization_id,
            grain=Grain.MODEL,
            hour__gte=since.replace(minute=0, second=0, microsecond=0),
            unpriced_calls__gt=0,
        )
        .values_list("model", flat=True)
        .distinct()
    )


def model_price_list(*, actor: Actor, at: datetime | None = None) -> list[ModelPrices]:
    """Every catalogue model with its list, negotiated and effective price in
    the organization's currency at ``at`` (now). ``needs_price`` is only
    worked out for roles that manage the organization."""
    at = at or timezone.now()
    org = actor.organization
    currency = org.currency
    org_ppm = discount_ppm_for(org.discount_rate)
    latest: dict[tuple[int, bool], Price] = {}
    prices = (
        Price.objects.filter(currency=currency, effective_from__lte=at)
        .filter(Q(organization__isnull=True) | Q(organization_id=org.pk))
        .select_related("model")
        .order_by("model_id", "-effective_from")
    )
    for p in prices:
        latest.setdefault((p.model_id, p.organization_id is not None), p)
    check = actor.can(Perm.ORG_MANAGE)
    unpriced = (
        unpriced_model_names(organization_id=org.pk, since=at - UNPRICED_WINDOW) if check else set()
    )
    out = []
    for model in CatalogModel.objects.order_by("name"):
        listed, negotiated = latest.get((model.pk, False)), latest.get((model.pk, True))
        row = _catalog_row(model)
        in_effect = negotiated or listed
        effective = effective_per_mtok(_row(in_effect), org_ppm) if in_effect else None
        out.append(
            ModelPrices(
                model=row,
                currency=currency,
                list_price=_figures(_row(listed)) if listed else None,
                override=_figures(_row(negotiated)) if negotiated else None,
                effective=effective,
                effective_from=in_effect.effective_from if in_effect else None,
                unpriced_calls=model.name in unpriced,
                needs_price=check
                and (model.name in unpriced or (model.enabled and effective is None)),
            )
        )
    return out


def unpriced_unknown_models(*, actor: Actor, at: datetime | None = None) -> list[str]:
    """Called model names with unpriced calls that are not in the catalogue,
    less those no call was answered by (a model that does not exist: its
    calls are errors, and an error needs no price)."""
    if not actor.can(Perm.ORG_MANAGE):
        return []
    at = at or timezone.now()
    since = at - UNPRICED_WINDOW
    names = unpriced_model_names(organization_id=actor.organization_id, since=since)
    known = set(CatalogModel.objects.filter(name__in=names).values_list("name", flat=True))
    unknown = names - known
    errors = unserved_models(actor.organization_id, since, at + timedelta(hours=1), among=unknown)
    return sorted(unknown - errors)


class CatalogueEntry(NamedTuple):
    """One catalogue model, as ``console.kernel.hooks.MODEL_CATALOGUE`` answers it."""

    name: str
    display_name: str
    enabled: bool


def catalogue_entries() -> list[CatalogueEntry]:
    """Every catalogue model by name (the ``MODEL_CATALOGUE`` provider)."""
    return [
        CatalogueEntry(*row)
        for row in CatalogModel.objects.order_by("name").values_list(
            "name", "display_name", "enabled"
        )
    ]


def model_names(*, enabled: bool | None = None, kind: str | None = None) -> list[str]:
    """The catalogue's model names in order (only the enabled ones, or one
    kind's, when asked)."""
    models = CatalogModel.objects.all()
    if enabled is not None:
        models = models.filter(enabled=enabled)
    if kind is not None:
        models = models.filter(kind=kind)
    return list(models.order_by("name").values_list("name", flat=True))


def catalog_models(*, enabled: bool | None = None) -> list[CatalogModelRow]:
    """Every catalogue model by name (only the enabled ones, or the disabled
    ones, when asked): the gateway's catalogue snapshot, the marketplace."""
    models = CatalogModel.objects.all()
    if enabled is not None:
        models = models.filter(enabled=enabled)
    return [_catalog_row(m) for m in models.order_by("name")]


def _catalog_row(m: CatalogModel) -> CatalogModelRow:
    return CatalogModelRow(
        name=m.name,
        display_name=m.display_name,
        family=m.family,
        provider=m.provider,
        kind=m.kind,
        context_window=m.context_window,
        fallbacks=tuple(str(f) for f in (m.fallbacks or ())),
        enabled=m.enabled,
        created_at=m.created_at,
        modality=m.modality,
    )


def connect_catalog_changes(handler: Callable[..., None], dispatch_uid: str) -> None:
    """Call ``handler`` (a signal receiver) whenever a catalogue model or a price
    row is saved or deleted; ``dispatch_uid`` keeps each connection single."""
    for model in (Price, CatalogModel):
        uid = f"{dispatch_uid}-{model._meta.label_lower}"
        post_save.connect(handler, sender=model, dispatch_uid=uid + "-save", weak=False)
        post_delete.connect(handler, sender=model, dispatch_uid=uid + "-delete", weak=False)


def list_prices(at: datetime | None = None) -> dict[str, dict[str, PerMtok]]:
    """The list price in effect at ``at`` (now) of every model, per currency:
    ``{model name: {currency: PerMtok}}``. No negotiated price is read: this
    is what the public marketplace may show."""
    at = at or timezone.now()
    out: dict[str, dict[str, PerMtok]] = {}
    rows = (
        Price.objects.filter(organization__isnull=True, effective_from__lte=at)
        .select_related("model")
        .order_by("model_id", "currency", "-effective_from")
    )
    for p in rows:
        out.setdefault(p.model.name, {}).setdefault(p.currency, _figures(_row(p)))
    return out

"""The two optional public pages (no sign-in, no organization's data): the public
marketplace (``CONSOLE_PUBLIC_MARKETPLACE``: models, list prices and the platform-wide
figures) and the status page (``CONSOLE_PUBLIC_STATUS``: each model up, degraded or
down now and on each of the last 90 days). Both answer 404 while their setting is
off; what they show is kept as the marketplace's platform-wide figures are
(``marketplace.cached_figures``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET

from console.features.analytics.marketplace import (
    COLUMNS,
    DEFAULT_WINDOW,
    MODALITY_LABELS,
    WINDOW_CHOICES,
    cached_figures,
    display,
    enabled_models,
    platform_figures,
)
from console.kernel.money import format_amount
from usage.facade import (
    DEGRADED_BELOW,
    DOWN_BELOW,
    PERFORMANCE_WINDOWS,
    STATUS_DAYS,
    daily_status,
    list_prices,
)


def public_rows(window: str) -> list[dict]:
    """Enabled models, their list prices per currency and the platform-wide
    figures: nothing of any organization's."""

    def compute():
        performance = platform_figures(window)
        listed = list_prices()
        return [
            {
                "name": m.name,
                "display_name": m.display_name,
                "provider": m.provider,
                "modality": m.modality,
                "context_window": m.context_window,
                "list_prices_per_mtok": {
                    cur: vars(p).copy() for cur, p in sorted(listed.get(m.name, {}).items())
                },
                "figures": (f.as_dict() if (f := performance.get(m.name)) else None),
            }
            for m in enabled_models()
        ]

    return cached_figures(f"public:{window}", compute)


@require_GET
def public_marketplace(request):
    if not settings.CONSOLE_PUBLIC_MARKETPLACE:
        raise Http404
    window = request.GET.get("window") or DEFAULT_WINDOW
    if window not in PERFORMANCE_WINDOWS:
        window = DEFAULT_WINDOW
    rows = public_rows(window)
    if request.GET.get("format") == "json":
        return JsonResponse({"window": window, "models": rows})
    for r in rows:
        r["modality_label"] = MODALITY_LABELS.get(r["modality"], r["modality"])
        r["prices"] = [
            (cur, {k: format_amount(v, cur, exact=True) for k, v in p.items()})
            for cur, p in r["list_prices_per_mtok"].items()
        ]
        fig = r["figures"]
        r["cells"] = [
            (c, display(c.key, fig[c.value_key] if fig else None)) for c in PUBLIC_COLUMNS
        ]
    return render(
        request,
        "console/analytics/public_marketplace.html",
        {"rows": rows, "window": window, "windows": WINDOW_CHOICES, "columns": PUBLIC_COLUMNS},
    )


@dataclass(frozen=True)
class PublicColumn:
    label: str
    value_key: str
    key: str


PUBLIC_COLUMNS = tuple(
    PublicColumn(c.label, k, c.key)
    for c, k in zip(
        COLUMNS,
        (
            "ttft_p50_ms",
            "ttft_p99_ms",
            "latency_p50_ms",
            "latency_p99_ms",
            "latency_p999_ms",
            "tokens_per_s_p50",
            "cache_hit_share",
            "availability",
            "calls",
        ),
        strict=True,
    )
)


def status_rows() -> list[dict]:
    def compute():
        now = timezone.now()
        models = [m.name for m in enabled_models()]
        return [
            {
                "model": s.model,
                "current": s.current,
                "days": [
                    {
                        "day": d.day.isoformat(),
                        "state": d.state,
                        "calls": d.calls,
                        "failed_calls": d.failed_calls,
                    }
                    for d in s.days
                ],
            }
            for s in daily_status(models, now=now)
        ]

    return cached_figures("status", compute)


STATE_LABELS = {
    "up": gettext_lazy("Up"),
    "degraded": gettext_lazy("Degraded"),
    "down": gettext_lazy("Down"),
    "no_data": gettext_lazy("No calls"),
}


@require_GET
def public_status(request):
    if not settings.CONSOLE_PUBLIC_STATUS:
        raise Http404
    rows = status_rows()
    if request.GET.get("format") == "json":
        return JsonResponse(
            {
                "days": STATUS_DAYS,
                "thresholds": {"down_below": DOWN_BELOW, "degraded_below": DEGRADED_BELOW},
                "models": rows,
            }
        )
    for r in rows:
        r["current_label"] = STATE_LABELS[r["current"]]
        for d in r["days"]:
            d["label"] = STATE_LABELS[d["state"]]
    return render(
        request,
        "console/analytics/public_status.html",
        {
            "rows": rows,
            "days": STATUS_DAYS,
            "down_pct": f"{DOWN_BELOW * 100:g}",
            "degraded_pct": f"{DEGRADED_BELOW * 100:g}",
        },
    )

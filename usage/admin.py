"""Django admin for the platform's staff: catalogue and prices, dead letters,
closed periods and the re-rating trail. Call records and rollups are
read-only here; they are written by ingest alone."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone as tz

from usage.models import (
    Adjustment,
    CallRecord,
    CatalogModel,
    DeadLetter,
    PeriodClose,
    Price,
    RerateRun,
    Rollup,
)


class PriceInline(admin.TabularInline):
    model = Price
    extra = 0
    fields = (
        "organization",
        "currency",
        "input_per_mtok",
        "cache_read_per_mtok",
        "cache_write_per_mtok",
        "output_per_mtok",
        "effective_from",
    )
    raw_id_fields = ("organization",)


@admin.register(CatalogModel)
class CatalogModelAdmin(admin.ModelAdmin):
    list_display = ("name", "display_name", "kind", "provider", "context_window", "enabled")
    list_filter = ("kind", "enabled", "provider")
    search_fields = ("name", "display_name")
    inlines = [PriceInline]


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = (
        "model",
        "organization",
        "currency",
        "input_per_mtok",
        "output_per_mtok",
        "effective_from",
    )
    list_filter = ("currency",)
    search_fields = ("model__name", "organization__slug")
    raw_id_fields = ("organization", "created_by")

    def save_model(self, request: HttpRequest, obj: Price, form: Any, change: bool) -> None:
        if not change and obj.created_by_id is None:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(CallRecord)
class CallRecordAdmin(ReadOnlyAdmin):
    list_display = ("request_id", "organization_id", "model", "status_code", "cost", "started_at")
    search_fields = ("request_id",)
    show_full_result_count = False


@admin.register(Rollup)
class RollupAdmin(ReadOnlyAdmin):
    list_display = ("organization_id", "grain", "hour", "calls", "cost", "unpriced_calls")
    list_filter = ("grain",)
    show_full_result_count = False


@admin.register(DeadLetter)
class DeadLetterAdmin(admin.ModelAdmin):
    list_display = ("received_at", "request_id", "organization_id", "reason", "resolved_at")
    list_filter = ("resolved_at",)
    search_fields = ("request_id", "reason")
    readonly_fields = ("received_at", "request_id", "organization_id", "reason", "payload")
    actions = ["mark_resolved"]

    @admin.action(description="Mark as resolved")  # type: ignore[untyped-decorator]  # Django's
    def mark_resolved(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        queryset.filter(resolved_at__isnull=True).update(resolved_at=tz.now())


@admin.register(PeriodClose)
class PeriodCloseAdmin(admin.ModelAdmin):
    list_display = ("organization", "period_start", "period_end", "reference", "closed_at")
    raw_id_fields = ("organization",)


@admin.register(RerateRun)
class RerateRunAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "organization",
        "model",
        "period_start",
        "period_end",
        "calls_rerated",
        "adjustments",
        "cost_delta",
        "adjustment_delta",
    )


@admin.register(Adjustment)
class AdjustmentAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "organization_id", "request_id", "delta", "billed_reference")
    search_fields = ("request_id",)

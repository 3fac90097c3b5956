"""Django admin: where the platform's staff manage shared nodes (no
organization), and can see every organization's. The token is write-only here
too: an empty field keeps the stored one."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db import transaction

from inference_node.models import Node, NodeModel, NodeStatus
from inference_node.selectors import invalidate_routing_snapshot
from inference_node.services import clean_base_url


class NodeAdminForm(forms.ModelForm):
    token = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to keep the current token.",
    )
    clear_token = forms.BooleanField(required=False, label="Remove the token")

    class Meta:
        model = Node
        fields = (
            "organization",
            "name",
            "base_url",
            "token",
            "status",
            "weight",
            "max_concurrency",
            "labels",
        )

    def clean_base_url(self):
        try:
            return clean_base_url(self.cleaned_data.get("base_url"))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self):
        data = super().clean()
        if self.cleaned_data.get("clear_token"):
            data["token"] = ""
        elif not data.get("token") and self.instance.pk:
            data["token"] = self.instance.token
        return data


class NodeModelInline(admin.TabularInline):
    model = NodeModel
    fields = ("public_name", "upstream_name", "context_window")
    extra = 1


def _set_status(status):
    def act(modeladmin, request, queryset):
        queryset.update(status=status)
        transaction.on_commit(invalidate_routing_snapshot)

    act.short_description = f"Set status: {status}"
    act.__name__ = f"set_{status}"
    return act


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    form = NodeAdminForm
    inlines = (NodeModelInline,)
    list_display = (
        "name",
        "organization",
        "status",
        "health",
        "last_seen_at",
        "running",
        "waiting",
        "weight",
    )
    list_filter = ("status", "health", ("organization", admin.EmptyFieldListFilter))
    search_fields = ("name", "base_url", "organization__name")
    readonly_fields = (
        "health",
        "consecutive_failures",
        "consecutive_successes",
        "last_probe_at",
        "last_seen_at",
        "last_latency_ms",
        "last_error",
        "discovered_models",
        "running",
        "waiting",
        "kv_cache_usage",
        "prefix_cache_hit_rate",
    )
    actions = [_set_status(s) for s in NodeStatus.values]

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        transaction.on_commit(invalidate_routing_snapshot)

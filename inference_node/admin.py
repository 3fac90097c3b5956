"""Django admin: where the platform's staff manage shared nodes and vendor
channels (no organization), and can see every organization's.

Secrets are write-only here too: the node token and each API key of a pool
are password inputs that never render the stored value; an empty field keeps
it (a new key must be given). Lists show a key's hint only. Cost prices are
typed as decimal money per million tokens and stored as integer micro-units
(``console.kernel.money.parse_amount``)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db import transaction

from console.kernel.crypto import hint
from console.kernel.money import micro_to_decimal, parse_amount
from inference_node.models import Credential, Node, NodeModel, NodeStatus
from inference_node.selectors import invalidate_routing_snapshot
from inference_node.services import clean_api_path, clean_base_url
from inference_node.services.validation import check_kind_and_health

_SECRET = forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"})


def _field_error(fn, value):
    try:
        return fn(value)
    except ValueError as exc:
        raise forms.ValidationError(str(exc)) from None


class NodeAdminForm(forms.ModelForm):
    token = forms.CharField(
        required=False, widget=_SECRET, help_text="Leave empty to keep the current token."
    )
    clear_token = forms.BooleanField(required=False, label="Remove the token")

    class Meta:
        model = Node
        fields = (
            "organization",
            "name",
            "kind",
            "preset",
            "base_url",
            "api_path",
            "health_check",
            "token",
            "status",
            "weight",
            "max_concurrency",
            "labels",
        )

    def clean_base_url(self):
        return _field_error(clean_base_url, self.cleaned_data.get("base_url"))

    def clean_api_path(self):
        return _field_error(clean_api_path, self.cleaned_data.get("api_path"))

    def clean(self):
        data = super().clean()
        if self.cleaned_data.get("clear_token"):
            data["token"] = ""
        elif not data.get("token") and self.instance.pk:
            data["token"] = self.instance.token
        kind, check = data.get("kind"), data.get("health_check")
        if kind and check:
            try:
                check_kind_and_health(kind, check)
            except ValueError as exc:
                self.add_error("health_check", str(exc))
        return data


class CredentialAdminForm(forms.ModelForm):
    secret = forms.CharField(
        label="API key",
        required=False,
        max_length=1000,
        widget=_SECRET,
        help_text="Write-only. Empty keeps the current key.",
    )

    class Meta:
        model = Credential
        fields = (
            "label",
            "secret",
            "weight",
            "rpm_limit",
            "tpm_limit",
            "max_concurrency",
            "status",
            "disabled_reason",
        )

    def clean_secret(self):
        secret = (self.cleaned_data.get("secret") or "").strip()
        if secret and any(c.isspace() for c in secret):
            raise forms.ValidationError("An API key has no spaces.")
        if not secret:
            if not self.instance.pk:
                raise forms.ValidationError("Enter the API key.")
            return self.instance.secret
        return secret

    def save(self, commit=True):
        credential = super().save(commit=False)
        credential.secret_hint = hint(credential.secret)
        if commit:
            credential.save()
        return credential


class CredentialInline(admin.TabularInline):
    model = Credential
    form = CredentialAdminForm
    fields = (
        "label",
        "secret",
        "secret_hint",
        "weight",
        "rpm_limit",
        "tpm_limit",
        "max_concurrency",
        "status",
        "disabled_reason",
        "disabled_at",
    )
    readonly_fields = ("secret_hint", "disabled_at")
    extra = 1


class MicroPerMillionField(forms.CharField):
    """Decimal money per million tokens in the form, integer micro-units stored."""

    def prepare_value(self, value):
        if isinstance(value, int):
            return format(micro_to_decimal(value).normalize(), "f")
        return value

    def to_python(self, value):
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        try:
            micro = parse_amount(text)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        if micro < 0:
            raise forms.ValidationError("A cost cannot be negative.")
        return micro


class NodeModelAdminForm(forms.ModelForm):
    cost_input_per_mtok = MicroPerMillionField(required=False, label="Input / 1M")
    cost_cache_read_per_mtok = MicroPerMillionField(required=False, label="Cache read / 1M")
    cost_cache_write_per_mtok = MicroPerMillionField(required=False, label="Cache write / 1M")
    cost_output_per_mtok = MicroPerMillionField(required=False, label="Output / 1M")

    class Meta:
        model = NodeModel
        fields = (
            "public_name",
            "upstream_name",
            "context_window",
            "tier",
            "weight",
            "cost_currency",
            "cost_input_per_mtok",
            "cost_cache_read_per_mtok",
            "cost_cache_write_per_mtok",
            "cost_output_per_mtok",
        )

    def clean_cost_currency(self):
        return (self.cleaned_data.get("cost_currency") or "").strip().upper()

    def clean(self):
        data = super().clean()
        priced = any(
            data.get(f) is not None
            for f in ("cost_input_per_mtok", "cost_cache_read_per_mtok", "cost_output_per_mtok")
        )
        if priced and not data.get("cost_currency"):
            self.add_error("cost_currency", "Give the currency of the cost price.")
        return data


class NodeModelInline(admin.TabularInline):
    model = NodeModel
    form = NodeModelAdminForm
    fields = NodeModelAdminForm.Meta.fields
    extra = 1


def _set_status(status):
    @admin.action(description=f"Set status: {status}")
    def act(modeladmin, request, queryset):
        queryset.update(status=status)
        transaction.on_commit(invalidate_routing_snapshot)

    act.__name__ = f"set_{status}"
    return act


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    form = NodeAdminForm
    inlines = (CredentialInline, NodeModelInline)
    list_display = (
        "name",
        "organization",
        "kind",
        "health_check",
        "status",
        "health",
        "last_seen_at",
        "running",
        "waiting",
        "weight",
    )
    list_filter = ("kind", "status", "health", ("organization", admin.EmptyFieldListFilter))
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

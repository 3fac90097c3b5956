"""Shapes of the nodes REST API. Serializers parse and present; services
validate. Secrets are write-only: the node token shows at most its last 4
characters (``token_hint``) and each API key of a pool its ``hint``; a shared
node's address, token, keys and cost prices are not shown at all. Money is
integer micro-units of ``cost_currency`` per million tokens."""

from __future__ import annotations

from drf_spectacular.drainage import set_override
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference_node.models import Credential, HealthCheck, Node, NodeKind, NodeModel
from inference_node.presets import PRESETS
from inference_node.selectors import key_pool, missing_models
from inference_node.services.validation import MAX_CONCURRENCY, MAX_RPM, MAX_TPM, MAX_WEIGHT

KIND_HELP = "One of: " + ", ".join(NodeKind.values) + "."
COST_OUTPUT = (
    "cost_currency",
    "cost_input_per_mtok",
    "cost_cache_read_per_mtok",
    "cost_cache_write_per_mtok",
    "cost_output_per_mtok",
)


class NodeModelSerializer(serializers.ModelSerializer):
    # On a shared node every cost field is null (``NodeSerializer.get_models``):
    # the platform's cost price is not the tenants' business.
    cost_currency = serializers.CharField(
        read_only=True, allow_null=True, help_text="Null on a shared node."
    )

    class Meta:
        model = NodeModel
        fields = (
            "public_name",
            "upstream_name",
            "context_window",
            "tier",
            "weight",
            *COST_OUTPUT,
        )
        read_only_fields = fields


class CredentialSerializer(serializers.ModelSerializer):
    hint = serializers.CharField(source="secret_hint", read_only=True)

    class Meta:
        model = Credential
        fields = (
            "id",
            "label",
            "hint",
            "weight",
            "rpm_limit",
            "tpm_limit",
            "max_concurrency",
            "status",
            "disabled_reason",
            "disabled_at",
            "created_at",
        )
        read_only_fields = fields


class KeyPoolSummary(serializers.Serializer):
    active = serializers.IntegerField()
    total = serializers.IntegerField()
    down = serializers.BooleanField(help_text="A vendor channel with no active key.")
    down_reason = serializers.CharField(allow_blank=True)


class NodeSerializer(serializers.ModelSerializer):
    shared = serializers.BooleanField(source="is_shared", read_only=True)
    kind = serializers.CharField(read_only=True, help_text=KIND_HELP)
    base_url = serializers.SerializerMethodField()
    token_hint = serializers.SerializerMethodField()
    models = serializers.SerializerMethodField()
    credentials = serializers.SerializerMethodField()
    key_pool = serializers.SerializerMethodField()
    missing_models = serializers.SerializerMethodField()
    health = serializers.SerializerMethodField()
    load = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = (
            "id",
            "name",
            "shared",
            "kind",
            "preset",
            "base_url",
            "api_path",
            "health_check",
            "token_hint",
            "status",
            "weight",
            "max_concurrency",
            "labels",
            "models",
            "credentials",
            "key_pool",
            "discovered_models",
            "missing_models",
            "health",
            "load",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    def get_base_url(self, node: Node) -> str | None:
        return None if node.is_shared else node.base_url

    def get_token_hint(self, node: Node) -> str | None:
        return None if node.is_shared else (node.token_hint or None)

    @extend_schema_field(NodeModelSerializer(many=True))
    def get_models(self, node: Node) -> list[dict]:
        rows = NodeModelSerializer(node.models.all(), many=True).data
        if node.is_shared:  # the platform's cost price is not the tenants' business
            for row in rows:
                row.update(dict.fromkeys(COST_OUTPUT))
        return rows

    @extend_schema_field(CredentialSerializer(many=True, allow_null=True))
    def get_credentials(self, node: Node) -> list[dict] | None:
        if node.is_shared:
            return None
        return CredentialSerializer(key_pool(node).credentials, many=True).data

    @extend_schema_field(KeyPoolSummary)
    def get_key_pool(self, node: Node) -> dict:
        pool = key_pool(node)
        return {
            "active": pool.active,
            "total": pool.total,
            "down": pool.down,
            "down_reason": pool.down_reason,
        }

    def get_missing_models(self, node: Node) -> list[str]:
        return missing_models(node)

    def get_health(self, node: Node) -> dict:
        return {
            "state": node.health,
            "last_probe_at": _iso(node.last_probe_at),
            "last_seen_at": _iso(node.last_seen_at),
            "latency_ms": node.last_latency_ms,
            "consecutive_failures": node.consecutive_failures,
            "consecutive_successes": node.consecutive_successes,
            "last_error": node.last_error or None,
        }

    def get_load(self, node: Node) -> dict:
        return {
            "metrics_available": node.metrics_available,
            "running": node.running,
            "waiting": node.waiting,
            "kv_cache_usage": node.kv_cache_usage,
            "prefix_cache_hit_rate": node.prefix_cache_hit_rate,
        }


def _iso(value):
    return value.isoformat() if value is not None else None


class ModelInput(serializers.Serializer):
    public_name = serializers.CharField(max_length=200)
    upstream_name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    context_window = serializers.IntegerField(required=False, allow_null=True)
    tier = serializers.IntegerField(required=False, help_text="0 primary, 1 backup, …")
    weight = serializers.IntegerField(
        required=False, allow_null=True, help_text="Inside the tier; empty: the node's weight."
    )
    cost_currency = serializers.CharField(max_length=3, required=False, allow_blank=True)
    cost_input_per_mtok = serializers.IntegerField(
        required=False, allow_null=True, help_text="Micro-units of cost_currency per 1M tokens."
    )
    cost_cache_read_per_mtok = serializers.IntegerField(required=False, allow_null=True)
    cost_cache_write_per_mtok = serializers.IntegerField(required=False, allow_null=True)
    cost_output_per_mtok = serializers.IntegerField(required=False, allow_null=True)


class _Bounded(serializers.IntegerField):
    """An integer from 1 to ``maximum`` as the schema says; the services check
    the bounds (with every other field's error in the same answer)."""

    def __init__(self, maximum: int, **kwargs):
        super().__init__(**kwargs)
        schema = {"type": "integer", "minimum": 1, "maximum": maximum}
        if kwargs.get("allow_null"):
            schema["nullable"] = True
        set_override(self, "field", schema)


def _bounded(maximum: int, **kwargs) -> serializers.IntegerField:
    return _Bounded(maximum, required=False, **kwargs)


class CredentialInput(serializers.Serializer):
    secret = serializers.RegexField(
        r"^[!-~]+$",
        max_length=1000,
        write_only=True,
        trim_whitespace=True,
        help_text="The vendor's API key (printable ASCII, no spaces); never returned "
        "(only its hint).",
    )
    label = serializers.CharField(max_length=80, required=False, allow_blank=True)
    weight = _bounded(MAX_WEIGHT)
    rpm_limit = _bounded(MAX_RPM, allow_null=True)
    tpm_limit = _bounded(MAX_TPM, allow_null=True)
    max_concurrency = _bounded(MAX_CONCURRENCY, allow_null=True)


class CredentialUpdate(CredentialInput):
    secret = None  # never changed: add a new key and remove the old one


class NodeInput(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    preset = serializers.CharField(
        max_length=32,
        required=False,
        allow_blank=True,
        help_text=f"{', '.join(PRESETS)}: fills kind, base_url, api_path and health_check "
        "when not given.",
    )
    # Text, not an enum: "kind" names other choice sets in this API's schema.
    kind = serializers.CharField(max_length=24, required=False, help_text=KIND_HELP)
    base_url = serializers.CharField(max_length=500, required=False, allow_blank=True)
    api_path = serializers.CharField(max_length=120, required=False, allow_blank=True)
    health_check = serializers.ChoiceField(choices=HealthCheck.choices, required=False)
    token = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        write_only=True,
        trim_whitespace=True,
        help_text="Bearer token sent to a self-hosted node; never returned.",
    )
    weight = _bounded(MAX_WEIGHT)
    max_concurrency = _bounded(MAX_CONCURRENCY)
    labels = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    models = ModelInput(many=True, required=False)
    credentials = CredentialInput(
        many=True, required=False, help_text="A vendor channel's first API keys (at least one)."
    )


class NodeUpdate(NodeInput):
    name = serializers.CharField(max_length=120, required=False)
    # DRF drops a parent's field set to None: the key pool has its own endpoints
    credentials = None  # type: ignore[assignment]


class ProbeResultSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    probed_at = serializers.DateTimeField()
    latency_ms = serializers.FloatField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    models = serializers.ListField(child=serializers.DictField(), allow_null=True)
    metrics = serializers.CharField()


class NodeTestSerializer(serializers.Serializer):
    result = ProbeResultSerializer()
    node = NodeSerializer()
    recorded = serializers.BooleanField(
        help_text="False for a channel judged by traffic: its health was left as it was."
    )

"""Shapes of the nodes REST API. Serializers parse and present; services
validate. The token is write-only: output shows at most its last 4 characters,
and a shared node's address is not shown at all."""

from __future__ import annotations

from rest_framework import serializers

from inference_node.models import Node, NodeModel
from inference_node.selectors import missing_models


class NodeModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = NodeModel
        fields = ("public_name", "upstream_name", "context_window")
        read_only_fields = fields


class NodeSerializer(serializers.ModelSerializer):
    shared = serializers.BooleanField(source="is_shared", read_only=True)
    base_url = serializers.SerializerMethodField()
    token_hint = serializers.SerializerMethodField()
    models = NodeModelSerializer(many=True, read_only=True)
    missing_models = serializers.SerializerMethodField()
    health = serializers.SerializerMethodField()
    load = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = (
            "id",
            "name",
            "shared",
            "base_url",
            "token_hint",
            "status",
            "weight",
            "max_concurrency",
            "labels",
            "models",
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


class NodeInput(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    base_url = serializers.CharField(max_length=500)
    token = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        write_only=True,
        trim_whitespace=True,
        help_text="Bearer token sent to the node; never returned.",
    )
    weight = serializers.IntegerField(required=False)
    max_concurrency = serializers.IntegerField(required=False)
    labels = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    models = ModelInput(many=True, required=False)


class NodeUpdate(NodeInput):
    name = serializers.CharField(max_length=120, required=False)
    base_url = serializers.CharField(max_length=500, required=False)


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

"""Shapes of the call-log API. Money is integer micro-units of ``currency``;
durations are integer microseconds, as stored."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from usage.models import CallRecord

PLAIN_FIELDS = (
    "request_id", "started_at", "finished_at", "model", "protocol", "endpoint", "stream",
    "status_code", "error_type", "input_tokens", "cache_read_tokens", "cache_write_tokens",
    "output_tokens", "reasoning_tokens", "cost", "currency", "priced", "ttft_us", "latency_us",
    "upstream_us", "overhead_us", "queue_us", "client_ip", "priority", "cache_status",
    "end_user", "tags", "is_test",
)  # fmt: skip


class KeyRef(serializers.Serializer):
    id = serializers.IntegerField()
    prefix = serializers.CharField(help_text="sk-<public id>")
    name = serializers.CharField()


class NamedRef(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()


class CallRecordSerializer(serializers.ModelSerializer):
    """One call. ``key``, ``sub_account`` and ``node`` carry the id and the
    name as it is now (names are resolved for a whole page at once)."""

    key = serializers.SerializerMethodField()
    sub_account = serializers.SerializerMethodField()
    node = serializers.SerializerMethodField()
    cost = serializers.IntegerField(help_text="micro-units of currency")

    class Meta:
        model = CallRecord
        fields = (*PLAIN_FIELDS, "key", "sub_account", "node")
        read_only_fields = fields

    @extend_schema_field(KeyRef)
    def get_key(self, call: CallRecord) -> dict[str, Any]:
        return {"id": call.api_key_id, "prefix": call.key_prefix, "name": call.key_name}

    @extend_schema_field(NamedRef(allow_null=True))
    def get_sub_account(self, call: CallRecord) -> dict[str, Any] | None:
        if call.sub_account_id is None:
            return None
        return {"id": call.sub_account_id, "name": call.sub_account_name}

    @extend_schema_field(NamedRef(allow_null=True))
    def get_node(self, call: CallRecord) -> dict[str, Any] | None:
        if call.node_id is None:
            return None
        return {"id": call.node_id, "name": call.node_name}


class CallPageSerializer(serializers.Serializer):
    """A page, newest first; ``next`` is older calls, ``previous`` newer ones."""

    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = CallRecordSerializer(many=True)


class AttributionGroupSerializer(serializers.Serializer):
    value = serializers.CharField(
        allow_null=True, help_text="The tag's value or end user; null: the calls without"
    )
    calls = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    cache_read_tokens = serializers.IntegerField()
    cache_write_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost = serializers.IntegerField(help_text="micro-units of currency")


class AttributionTotalSerializer(AttributionGroupSerializer):
    value = None


class AttributionSerializer(serializers.Serializer):
    """Spend grouped by a tag's value or by end user; ``groups`` sum to ``total``."""

    by = serializers.CharField()
    tag_key = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    currency = serializers.CharField()
    total = AttributionTotalSerializer()
    groups = AttributionGroupSerializer(many=True)

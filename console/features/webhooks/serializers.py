"""Shapes of the webhooks REST API. The URL is write-only and shown back as
``url_display`` (scheme and host); the signing secret appears only in the
answers of create and rotate-secret (``secret``), never in a list or read."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from console.features.webhooks.models import (
    ALL_EVENTS,
    Delivery,
    DeliveryAttempt,
    Destination,
    DestinationKind,
    EventType,
    OutboundEvent,
)
from console.features.webhooks.services import url_display

EVENT_CHOICES = [*EventType.values, ALL_EVENTS]


class DestinationSerializer(serializers.ModelSerializer):
    url_display = serializers.SerializerMethodField()

    class Meta:
        model = Destination
        fields: tuple[str, ...] = (
            "id",
            "name",
            "kind",
            "url_display",
            "recipients",
            "events",
            "language",
            "enabled",
            "state",
            "state_reason",
            "created_at",
        )
        read_only_fields: tuple[str, ...] = fields

    def get_url_display(self, obj) -> str:
        return url_display(obj.url)


class DestinationCreated(DestinationSerializer):
    secret = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="kind=webhook: the signing secret, shown in this answer only.",
    )

    class Meta(DestinationSerializer.Meta):
        fields = (*DestinationSerializer.Meta.fields, "secret")
        read_only_fields = fields


class DestinationInput(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    kind = serializers.ChoiceField(choices=DestinationKind.values)
    url = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    recipients = serializers.ListField(
        child=serializers.CharField(max_length=254), required=False, max_length=20
    )
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_CHOICES),
        min_length=1,
        max_length=len(EVENT_CHOICES),
    )
    language = serializers.ChoiceField(
        choices=[code for code, _name in settings.LANGUAGES], required=False
    )
    enabled = serializers.BooleanField(required=False)


class DestinationUpdate(DestinationInput):
    kind = None


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = ("at", "status_code", "error", "duration_ms", "succeeded")
        read_only_fields = fields


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = OutboundEvent
        fields = ("id", "event_id", "type", "data", "created_at")
        read_only_fields = fields


class DeliverySerializer(serializers.ModelSerializer):
    event = EventSerializer(read_only=True)
    attempt_log = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Delivery
        fields = (
            "id",
            "destination",
            "event",
            "status",
            "attempts",
            "next_attempt_at",
            "last_status_code",
            "last_error",
            "created_at",
            "attempt_log",
        )
        read_only_fields = fields

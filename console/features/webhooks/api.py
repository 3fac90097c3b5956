"""REST API for destinations, events and deliveries (``/api/v1/webhooks/…``).
Owners and admins manage destinations; whoever sees billing reads the log."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from accounts.facade import OrgViewSet
from console.features.webhooks import selectors, services
from console.features.webhooks.models import Delivery, DeliveryStatus, Destination, OutboundEvent
from console.features.webhooks.serializers import (
    DeliverySerializer,
    DestinationCreated,
    DestinationInput,
    DestinationSerializer,
    DestinationUpdate,
    EventSerializer,
)
from console.kernel.crypto import no_store


def _created(destination, secret: str) -> dict:
    return {**DestinationSerializer(destination).data, "secret": secret or None}


class DestinationViewSet(OrgViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = Destination.objects.none()  # for the schema; get_queryset scopes
    serializer_class = DestinationSerializer

    def get_queryset(self):
        return selectors.destination_list(actor=self.actor)

    @extend_schema(request=DestinationInput, responses={201: DestinationCreated})
    def create(self, request):
        data = self._input(DestinationInput, request.data)
        destination, secret = services.destination_create(actor=self.actor, **data)
        return no_store(Response(_created(destination, secret), status=status.HTTP_201_CREATED))

    @extend_schema(request=DestinationUpdate, responses=DestinationSerializer)
    def partial_update(self, request, pk=None):
        destination = self.get_object()
        data = self._input(DestinationUpdate, request.data, partial=True)
        destination = services.destination_update(
            actor=self.actor, destination_id=destination.pk, **data
        )
        return Response(DestinationSerializer(destination).data)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, pk=None):
        services.destination_delete(actor=self.actor, destination_id=self.get_object().pk)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses=DestinationCreated)
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request, pk=None):
        destination, secret = services.destination_rotate_secret(
            actor=self.actor, destination_id=self.get_object().pk
        )
        return no_store(Response(_created(destination, secret)))

    @extend_schema(request=None, responses=DeliverySerializer)
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        """Send a ``test`` event now; the delivery with the receiver's answer."""
        delivery = services.destination_test(actor=self.actor, destination_id=self.get_object().pk)
        return Response(DeliverySerializer(delivery).data)


class EventViewSet(OrgViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = OutboundEvent.objects.none()
    serializer_class = EventSerializer

    def get_queryset(self):
        return selectors.event_list(actor=self.actor)


class DeliveryViewSet(OrgViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = Delivery.objects.none()
    serializer_class = DeliverySerializer

    def get_queryset(self):
        destination, state = None, ""
        if self.action == "list":
            params = self.request.query_params
            raw = params.get("destination", "")
            state = params.get("status", "")
            if raw:
                try:
                    destination = int(raw)
                except ValueError:
                    raise ValidationError({"destination": ["Give a destination id."]}) from None
                if not 0 < destination < 2**63:
                    destination = 0  # no such id: an empty list
            if state and state not in DeliveryStatus.values:
                raise ValidationError({"status": [f"One of: {', '.join(DeliveryStatus.values)}."]})
        return selectors.delivery_list(
            actor=self.actor, destination_id=destination, status=state
        ).prefetch_related("attempt_log")

    @extend_schema(
        parameters=[
            OpenApiParameter("destination", int, required=False),
            OpenApiParameter("status", str, required=False, enum=DeliveryStatus.values),
        ]
    )
    def list(self, request, *args, **kwargs):
        """The delivery log, newest first, by destination and status."""
        return super().list(request, *args, **kwargs)

    @extend_schema(request=None, responses=DeliverySerializer)
    @action(detail=True, methods=["post"])
    def replay(self, request, pk=None):
        """A new attempt of this delivery now."""
        delivery = services.delivery_replay(actor=self.actor, delivery_id=self.get_object().pk)
        return Response(DeliverySerializer(delivery).data)

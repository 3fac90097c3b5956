"""REST API for inference nodes (``/api/v1/nodes/``): list, create, retrieve,
partial update, and the drain / enable / disable / test actions. Same
permissions as the console (a viewer reads, owners and admins manage; another
organization's node is 404), errors in the ``{"error": {...}}`` shape."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from accounts.facade import OrgViewSet
from inference_node import selectors, services
from inference_node.models import Node, NodeStatus
from inference_node.serializers import NodeInput, NodeSerializer, NodeTestSerializer, NodeUpdate


class NodeViewSet(OrgViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = Node.objects.none()  # for the schema; get_queryset scopes
    serializer_class = NodeSerializer

    def get_queryset(self):
        return selectors.node_list(actor=self.actor).order_by("-created_at", "-id")

    @extend_schema(request=NodeInput, responses={201: NodeSerializer})
    def create(self, request):
        node = services.node_create(actor=self.actor, **self._input(NodeInput, request.data))
        return Response(NodeSerializer(node).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=NodeUpdate, responses=NodeSerializer)
    def partial_update(self, request, pk=None):
        node = self.get_object()
        data = self._input(NodeUpdate, request.data, partial=True)
        node = services.node_update(actor=self.actor, node_id=node.pk, **data)
        return Response(NodeSerializer(node).data)

    def _set_status(self, new_status: str):
        node = services.node_set_status(
            actor=self.actor, node_id=self.get_object().pk, status=new_status
        )
        return Response(NodeSerializer(node).data)

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def drain(self, request, pk=None):
        return self._set_status(NodeStatus.DRAINING)

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def enable(self, request, pk=None):
        return self._set_status(NodeStatus.ACTIVE)

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def disable(self, request, pk=None):
        return self._set_status(NodeStatus.DISABLED)

    @extend_schema(request=None, responses=NodeTestSerializer)
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        outcome = services.node_test(actor=self.actor, node_id=self.get_object().pk)
        result = outcome.result
        return Response(
            {
                "result": {
                    "ok": result.ok,
                    "probed_at": result.probed_at.isoformat(),
                    "latency_ms": result.latency_ms,
                    "error": result.error,
                    "models": list(result.models) if result.models is not None else None,
                    "metrics": result.metrics,
                },
                "node": NodeSerializer(outcome.node).data,
            }
        )

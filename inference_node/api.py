"""REST API for inference nodes and vendor channels (``/api/v1/nodes/``):
list, create, retrieve, partial update, the drain / enable / disable / test
actions, and the key pool (``/api/v1/nodes/{id}/credentials/``: list and add;
``…/credentials/{credential_id}/``: patch and delete; ``…/disable/`` and
``…/enable/``). Same permissions as the console (a viewer reads, owners and
admins manage; another organization's node or key is 404; a shared node's
keys are the platform staff's), errors in the ``{"error": {...}}`` shape. A
key's secret is accepted on creation and never returned."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from accounts.facade import NotFound, OrgViewSet, PermissionDenied
from inference_node import selectors, services
from inference_node.models import CredentialStatus, Node, NodeStatus
from inference_node.serializers import (
    CredentialInput,
    CredentialSerializer,
    CredentialUpdate,
    NodeInput,
    NodeSerializer,
    NodeTestSerializer,
    NodeUpdate,
)


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
                "recorded": outcome.recorded,
            }
        )

    # --- the key pool -------------------------------------------------------------------

    def _own_credential(self, credential_id):
        node = self.get_object()
        try:
            return selectors.get_credential(self.actor, node.pk, credential_id, for_change=True)
        except NotFound:
            raise NotFound("Not found in this organization.") from None

    @extend_schema(methods=["GET"], request=None, responses=CredentialSerializer(many=True))
    @extend_schema(methods=["POST"], request=CredentialInput, responses={201: CredentialSerializer})
    @action(detail=True, methods=["get", "post"], pagination_class=None)
    def credentials(self, request, pk=None):
        node = self.get_object()
        if request.method == "GET":
            if node.is_shared:
                raise PermissionDenied(
                    "Shared platform nodes' keys are the platform staff's.", code="shared_node"
                )
            pool = selectors.key_pool(node).credentials
            return Response(CredentialSerializer(pool, many=True).data)
        data = self._input(CredentialInput, request.data)
        key = services.credential_add(actor=self.actor, node_id=node.pk, **data)
        return Response(CredentialSerializer(key).data, status=status.HTTP_201_CREATED)

    @extend_schema(methods=["PATCH"], request=CredentialUpdate, responses=CredentialSerializer)
    @extend_schema(methods=["DELETE"], request=None, responses={204: None})
    @action(
        detail=True,
        methods=["patch", "delete"],
        url_path=r"credentials/(?P<credential_id>[0-9]+)",
        url_name="credential",
    )
    def credential(self, request, pk=None, credential_id=None):
        key = self._own_credential(credential_id)
        if request.method == "DELETE":
            services.credential_remove(actor=self.actor, credential_id=key.pk)
            return Response(status=status.HTTP_204_NO_CONTENT)
        data = self._input(CredentialUpdate, request.data, partial=True)
        if "secret" in request.data:
            data["secret"] = None  # refused by the service, with its message
        key = services.credential_update(actor=self.actor, credential_id=key.pk, **data)
        return Response(CredentialSerializer(key).data)

    def _key_status(self, credential_id, new_status: str):
        key = self._own_credential(credential_id)
        key = services.credential_set_status(
            actor=self.actor, credential_id=key.pk, status=new_status
        )
        return Response(CredentialSerializer(key).data)

    @extend_schema(request=None, responses=CredentialSerializer)
    @action(
        detail=True,
        methods=["post"],
        url_path=r"credentials/(?P<credential_id>[0-9]+)/disable",
        url_name="credential-disable",
    )
    def credential_disable(self, request, pk=None, credential_id=None):
        return self._key_status(credential_id, CredentialStatus.DISABLED)

    @extend_schema(request=None, responses=CredentialSerializer)
    @action(
        detail=True,
        methods=["post"],
        url_path=r"credentials/(?P<credential_id>[0-9]+)/enable",
        url_name="credential-enable",
    )
    def credential_enable(self, request, pk=None, credential_id=None):
        return self._key_status(credential_id, CredentialStatus.ACTIVE)

"""REST API for keys, sub-accounts, members and invitations (``/api/v1/``).

Session auth for the console, personal access tokens for automation. Every
queryset comes from a selector scoped to the caller's organization; every
write goes through a service, so permissions are the console's."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from accounts import selectors, services
from accounts.models import ApiKey, Invitation, Membership, SubAccount
from accounts.serializers import (
    ApiKeyCreated,
    ApiKeyInput,
    ApiKeySerializer,
    ApiKeyUpdate,
    InvitationInput,
    InvitationSerializer,
    MemberRemoveInput,
    MemberSerializer,
    RoleInput,
    RotateInput,
    SubAccountInput,
    SubAccountSerializer,
    SubAccountUpdate,
)
from console.kernel.crypto import no_store


class IsOrgMember(permissions.BasePermission):
    message = "You are not a member of any organization."

    def has_permission(self, request, view):
        return getattr(request._request, "actor", None) is not None


class OrgViewSet(viewsets.GenericViewSet):
    permission_classes = (permissions.IsAuthenticated, IsOrgMember)
    lookup_value_regex = r"[0-9]+"

    @property
    def actor(self):
        return self.request._request.actor

    def get_object(self):
        obj = (
            self.get_queryset().filter(pk=self.kwargs["pk"]).first()
            if str(self.kwargs["pk"]).isdigit()
            else None
        )
        if obj is None:
            raise NotFound("Not found in this organization.")
        return obj

    @staticmethod
    def _input(serializer_class, data, partial=False):
        s = serializer_class(data=data, partial=partial)
        s.is_valid(raise_exception=True)
        return dict(s.validated_data)


class ApiKeyViewSet(OrgViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = ApiKey.objects.none()  # for the schema; get_queryset scopes
    serializer_class = ApiKeySerializer

    def get_queryset(self):
        return selectors.api_key_list(actor=self.actor)

    @extend_schema(request=ApiKeyInput, responses={201: ApiKeyCreated})
    def create(self, request):
        data = self._input(ApiKeyInput, request.data)
        data["sub_account_id"] = data.pop("sub_account", None)
        key, raw = services.api_key_issue(actor=self.actor, **data)
        key.key = raw
        return no_store(Response(ApiKeyCreated(key).data, status=status.HTTP_201_CREATED))

    @extend_schema(request=ApiKeyUpdate, responses=ApiKeySerializer)
    def partial_update(self, request, pk=None):
        key = self.get_object()
        data = self._input(ApiKeyUpdate, request.data, partial=True)
        key = services.api_key_update(actor=self.actor, key_id=key.pk, **data)
        return Response(ApiKeySerializer(key).data)

    @extend_schema(request=RotateInput, responses=ApiKeyCreated)
    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        key = self.get_object()
        data = self._input(RotateInput, request.data)
        key, raw = services.api_key_rotate(actor=self.actor, key_id=key.pk, **data)
        key.key = raw or None  # None: kept for the key's owner (the permission matrix)
        return no_store(Response(ApiKeyCreated(key).data))

    @extend_schema(request=None, responses=ApiKeyCreated)
    @action(detail=True, methods=["post"], url_path="secret")
    def collect_secret(self, request, pk=None):
        """The key's owner collects, once, the secret someone else's rotation made
        (``key`` is null when none is waiting)."""
        key = self.get_object()
        raw = services.api_key_collect_secret(actor=self.actor, key_id=key.pk)
        key.refresh_from_db()
        key.key = raw or None
        return no_store(Response(ApiKeyCreated(key).data))

    @extend_schema(request=None, responses=ApiKeySerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        key = services.api_key_revoke(actor=self.actor, key_id=self.get_object().pk)
        return Response(ApiKeySerializer(key).data)


class SubAccountViewSet(OrgViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = SubAccount.objects.none()  # for the schema; get_queryset scopes
    serializer_class = SubAccountSerializer

    def get_queryset(self):
        return selectors.sub_account_list(actor=self.actor).order_by("-created_at", "-id")

    @extend_schema(request=SubAccountInput, responses={201: SubAccountSerializer})
    def create(self, request):
        sub = services.sub_account_create(
            actor=self.actor, **self._input(SubAccountInput, request.data)
        )
        return Response(SubAccountSerializer(sub).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=SubAccountUpdate, responses=SubAccountSerializer)
    def partial_update(self, request, pk=None):
        sub = self.get_object()
        data = self._input(SubAccountUpdate, request.data, partial=True)
        members = data.pop("members", None)
        if data:
            sub = services.sub_account_update(actor=self.actor, sub_account_id=sub.pk, **data)
        if members is not None:
            sub = services.sub_account_set_members(
                actor=self.actor, sub_account_id=sub.pk, membership_ids=members
            )
        return Response(SubAccountSerializer(sub).data)


class MemberViewSet(OrgViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = Membership.objects.none()  # for the schema; get_queryset scopes
    serializer_class = MemberSerializer

    def get_queryset(self):
        return selectors.member_list(actor=self.actor).order_by("-created_at", "-id")

    @extend_schema(request=RoleInput, responses=MemberSerializer)
    def partial_update(self, request, pk=None):
        target = self.get_object()
        data = self._input(RoleInput, request.data, partial=True)
        if not data:  # a PATCH that changes nothing
            return Response(MemberSerializer(target).data)
        m = services.membership_change_role(actor=self.actor, membership_id=target.pk, **data)
        return Response(MemberSerializer(m).data)

    @extend_schema(parameters=[MemberRemoveInput])
    def destroy(self, request, pk=None):
        """Remove a member. Their API keys are revoked unless ``?keys=hand_over&
        hand_over_to=<member id>`` hands them to another member."""
        target = self.get_object()
        data = self._input(MemberRemoveInput, request.query_params)
        services.membership_remove(actor=self.actor, membership_id=target.pk, **data)
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationViewSet(OrgViewSet, mixins.ListModelMixin):
    queryset = Invitation.objects.none()  # for the schema; get_queryset scopes
    serializer_class = InvitationSerializer

    def get_queryset(self):
        return selectors.invitation_list(actor=self.actor)

    @extend_schema(request=InvitationInput, responses={201: InvitationSerializer})
    def create(self, request):
        invitation, _raw = services.invitation_create(
            actor=self.actor, **self._input(InvitationInput, request.data)
        )
        return Response(InvitationSerializer(invitation).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=InvitationSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        invitation = services.invitation_revoke(
            actor=self.actor, invitation_id=self.get_object().pk
        )
        return Response(InvitationSerializer(invitation).data)


class PersonalAccessTokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.api_auth.PersonalAccessTokenAuthentication"
    name = "personalAccessToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal access token (pat_…)",
        }

"""Shapes of the REST API. Serializers parse and present; services validate."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from rest_framework import serializers

from accounts import validators
from accounts.models import (
    ApiKey,
    Invitation,
    Membership,
    Priority,
    Role,
    SubAccount,
    SubAccountStatus,
)
from accounts.services.api_keys import MAX_GRACE

if TYPE_CHECKING:
    _FieldBase: TypeAlias = serializers.Field  # what _TextOnly is mixed into
else:
    _FieldBase = object


class _TextOnly(_FieldBase):
    """Text as the schema says (``type: string``): DRF's own CharField turns a
    number into text, so ``{"name": 5}`` would pass as the name "5"."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class TextField(_TextOnly, serializers.CharField):
    pass


class PatternField(_TextOnly, serializers.RegexField):
    pass


MAX_GRACE_SECONDS = int(MAX_GRACE.total_seconds())

LIMIT_FIELDS = (
    "allowed_models",
    "required_tag_keys",
    "spend_cap_daily",
    "spend_cap_monthly",
    "spend_cap_lifetime",
    "rpm_limit",
    "tpm_limit",
)


class ApiKeySerializer(serializers.ModelSerializer):
    prefix = serializers.CharField(read_only=True)
    status = serializers.CharField(source="effective_status", read_only=True)
    sub_account = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    owner = serializers.EmailField(source="owner.email", read_only=True, default=None)

    class Meta:
        model = ApiKey
        fields: tuple[str, ...] = (
            "id",
            "name",
            "prefix",
            "sub_account",
            "owner",
            *LIMIT_FIELDS,
            "ip_allowlist",
            "priority",
            "expires_at",
            "status",
            "last_used_at",
            "created_at",
            "revoked_at",
            "rotated_at",
            "test_traffic",  # a load test's key not billed; set only at issue, by the load test
        )
        read_only_fields = fields


def _cap():
    return serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=validators.MAX_SPEND_CAP,
        help_text="micro-units",
    )


def _rate(maximum: int):
    return serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=maximum)


class _LimitsInput(serializers.Serializer):
    # The bounds are the services' (accounts.validators), stated here so that
    # the schema says them too; the services still check.
    allowed_models = serializers.ListField(
        child=PatternField(validators.MODEL_NAME_RE.pattern, max_length=128),
        required=False,
    )
    required_tag_keys = serializers.ListField(
        child=PatternField(validators.TAG_KEY_RE.pattern),
        required=False,
        max_length=validators.MAX_TAGS,
        help_text="tag keys every call must carry in the x-gateway-tags header",
    )
    spend_cap_daily = _cap()
    spend_cap_monthly = _cap()
    spend_cap_lifetime = _cap()
    rpm_limit = _rate(validators.MAX_RATE_LIMIT)
    tpm_limit = _rate(validators.MAX_TOKENS_PER_MINUTE)


class ApiKeyInput(_LimitsInput):
    name = TextField(max_length=120)
    sub_account = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    ip_allowlist = serializers.ListField(
        child=TextField(max_length=64),
        required=False,
        max_length=validators.MAX_ALLOWLIST_ENTRIES,
        help_text="IPv4/IPv6 addresses and CIDR ranges",
    )
    priority = serializers.ChoiceField(choices=Priority.choices, required=False)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class ApiKeyUpdate(ApiKeyInput):
    name = TextField(max_length=120, required=False)
    sub_account = None


class ApiKeyCreated(ApiKeySerializer):
    key = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The secret; shown only in this response. Null after a rotation by "
        "someone who may not see the owner's secret: the owner collects it once "
        "(POST .../keys/{id}/secret/).",
    )

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key")
        read_only_fields = fields


class RotateInput(serializers.Serializer):
    # The service's bound (at most 30 days), stated here so the schema says it.
    grace_seconds = serializers.IntegerField(
        required=False, default=0, min_value=0, max_value=MAX_GRACE_SECONDS
    )


class SubAccountSerializer(serializers.ModelSerializer):
    members = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = SubAccount
        fields = ("id", "name", "status", *LIMIT_FIELDS, "members", "created_at")
        read_only_fields = fields


class SubAccountInput(_LimitsInput):
    name = TextField(max_length=120)


class SubAccountUpdate(_LimitsInput):
    name = TextField(max_length=120, required=False)
    status = serializers.ChoiceField(choices=SubAccountStatus.choices, required=False)
    members = serializers.ListField(child=serializers.IntegerField(), required=False)


class MemberSerializer(serializers.ModelSerializer):
    email = serializers.EmailField(source="user.email", read_only=True)
    full_name = serializers.CharField(source="user.full_name", read_only=True)

    class Meta:
        model = Membership
        fields = ("id", "email", "full_name", "role", "created_at")
        read_only_fields = fields


class MemberRemoveInput(serializers.Serializer):
    keys = serializers.ChoiceField(
        choices=[("revoke", "revoke"), ("hand_over", "hand_over")],
        default="revoke",
        help_text="What becomes of the member's API keys here: revoked, or handed over.",
    )
    hand_over_to = serializers.IntegerField(
        required=False, allow_null=True, help_text="The member id that takes the keys."
    )


class RoleInput(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


class InvitationSerializer(serializers.ModelSerializer):
    status = serializers.CharField(read_only=True)

    class Meta:
        model = Invitation
        fields = ("id", "email", "role", "status", "created_at", "expires_at")
        read_only_fields = fields


class InvitationInput(serializers.Serializer):
    email = serializers.EmailField(max_length=254)
    role = serializers.ChoiceField(choices=Role.choices)

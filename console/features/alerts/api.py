"""REST API for alert rules (``/api/v1/alert-rules/``: list, create,
retrieve, partial update, delete) and the alert history
(``/api/v1/alert-incidents/``: list, retrieve; ``?state=open|resolved``,
``?rule=<id>``). The same permissions as the console: owners, admins and
finance manage every rule, developers the rules on their own keys; another
organization's rule is 404. Input is validated by the console's form, so a
rule is valid the same way on either side; errors are in the
``{"error": {...}}`` shape with one entry per field."""

from __future__ import annotations

from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.response import Response

from accounts.facade import OrgViewSet, ValidationFailed
from console.features.alerts import services
from console.features.alerts.forms import AlertRuleForm, rule_data
from console.features.alerts.models import AlertRule, Incident, Kind, Scope
from console.kernel.pagination import CreatedCursorPagination


class AlertRuleSerializer(serializers.ModelSerializer):
    class Meta:
        model = AlertRule
        fields = (
            "id",
            "name",
            "kind",
            "scope",
            "api_key",
            "sub_account",
            "node",
            "model",
            "percents",
            "threshold",
            "amount",
            "window_minutes",
            "min_calls",
            "enabled",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields


class AlertRuleInput(serializers.Serializer):
    """What a rule takes (the console's form validates it): ``amount`` is in
    currency units (``"25.50"``), ``percents`` a list of whole percents."""

    name = serializers.CharField(max_length=120)
    kind = serializers.ChoiceField(choices=Kind.choices)
    scope = serializers.ChoiceField(choices=Scope.choices)
    api_key = serializers.IntegerField(required=False, allow_null=True)
    sub_account = serializers.IntegerField(required=False, allow_null=True)
    node = serializers.IntegerField(required=False, allow_null=True)
    model = serializers.CharField(required=False, allow_blank=True)
    percents = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=100),
        required=False,
        max_length=10,
        help_text="Spend caps: whole percents of each cap; 50, 80 and 100 when left out.",
    )
    threshold = serializers.DecimalField(
        max_digits=14, decimal_places=3, required=False, allow_null=True, min_value=0
    )
    amount = serializers.CharField(required=False, allow_blank=True, allow_null=True)
    window_minutes = serializers.IntegerField(required=False, min_value=5, max_value=1440)
    min_calls = serializers.IntegerField(required=False, min_value=1, max_value=1_000_000)
    enabled = serializers.BooleanField(required=False)


class IncidentSerializer(serializers.ModelSerializer):
    rule_name = serializers.CharField(source="rule.name", read_only=True)
    kind = serializers.CharField(source="rule.kind", read_only=True)

    class Meta:
        model = Incident
        fields = (
            "id",
            "rule",
            "rule_name",
            "kind",
            "subject",
            "subject_label",
            "threshold_key",
            "period",
            "value",
            "threshold",
            "resolved_value",
            "fired_at",
            "resolved_at",
        )
        read_only_fields = fields


class FiredCursorPagination(CreatedCursorPagination):
    """The history newest first, by when each alert fired."""

    ordering = ("-fired_at", "-id")


def _form_data(data) -> dict:
    if not isinstance(data, dict):
        raise ValidationFailed.from_fields({"__all__": "Send a JSON object."})
    out = {}
    for key, value in data.items():
        if key in AlertRuleForm.base_fields:
            out[key] = "" if value is None else value
    if "enabled" in data and not data["enabled"]:
        out.pop("enabled", None)
    elif "enabled" not in data:
        out["enabled"] = True
    return out


def _validated(actor, data: dict, rule=None) -> dict:
    form = AlertRuleForm(data=data, actor=actor, rule=rule)
    if not form.is_valid():
        raise ValidationFailed.from_fields({k: [str(m) for m in v] for k, v in form.errors.items()})
    return form.cleaned_data


class AlertRuleViewSet(
    OrgViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin
):
    queryset = AlertRule.objects.none()  # for the schema; get_queryset scopes
    serializer_class = AlertRuleSerializer

    def get_queryset(self):
        return services.rule_list(actor=self.actor).order_by("id")

    @extend_schema(request=AlertRuleInput, responses={201: AlertRuleSerializer})
    def create(self, request):
        services.require(self.actor)
        self._input(AlertRuleInput, request.data)
        data = _validated(self.actor, _form_data(request.data))
        rule = services.rule_create(actor=self.actor, data=data)
        return Response(AlertRuleSerializer(rule).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=AlertRuleInput, responses=AlertRuleSerializer)
    def partial_update(self, request, pk=None):
        rule = self.get_object()
        self._input(AlertRuleInput, request.data, partial=True)
        incoming = _form_data(request.data)
        if "enabled" not in request.data:
            incoming.pop("enabled", None)
        data = {**rule_data(rule), **incoming}
        if "enabled" in request.data and not request.data["enabled"]:
            data.pop("enabled", None)
        rule = services.rule_update(
            actor=self.actor, rule=rule, data=_validated(self.actor, data, rule)
        )
        return Response(AlertRuleSerializer(rule).data)

    def perform_destroy(self, instance):
        services.rule_delete(actor=self.actor, rule=instance)


_MAX_ID = 2**63 - 1


def _incident_filters(query) -> dict:
    """``?state=`` and ``?rule=`` as the schema states them: a state other
    than open or resolved, or a rule that is not a whole number, is a 400
    naming the parameter (not silently no filter); an empty value is none."""
    errors: dict[str, list[str]] = {}
    state = query.get("state") or None  # an empty value is no filter
    if state is not None and state not in ("open", "resolved"):
        errors["state"] = [_('Use "open" or "resolved".')]
    rule = query.get("rule") or None
    if rule is not None and not (rule.isascii() and rule.isdigit() and 1 <= int(rule) <= _MAX_ID):
        errors["rule"] = [_("An alert rule id: a whole number from 1.")]
    if errors:
        raise ValidationFailed.from_fields(errors)
    return {"state": state, "rule": int(rule) if rule is not None else None}


@extend_schema(
    parameters=[
        OpenApiParameter("state", str, enum=["open", "resolved"], required=False),
        OpenApiParameter(
            "rule", {"type": "integer", "minimum": 1, "maximum": _MAX_ID}, required=False
        ),
    ]
)
class IncidentViewSet(OrgViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = Incident.objects.none()  # for the schema; get_queryset scopes
    serializer_class = IncidentSerializer
    pagination_class = FiredCursorPagination

    def get_queryset(self):
        filters = _incident_filters(self.request.query_params)
        qs = services.incident_list(
            actor=self.actor, open_only={"open": True, "resolved": False}.get(filters["state"])
        )
        if filters["rule"] is not None:
            qs = qs.filter(rule_id=filters["rule"])
        return qs

"""REST API of load tests (``/api/v1/load-tests/``): start, status and
results, cancel. The console's services decide who may do what (read: all
usage; start and cancel: owners and admins), scoped to the caller's
organization."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from accounts.facade import OrgViewSet
from console.features.capacity import services
from console.features.capacity.models import Billing, LoadTest, LoadTestStep


class LoadTestStepSerializer(serializers.ModelSerializer):
    error_rate = serializers.FloatField(read_only=True)
    number = serializers.IntegerField(
        read_only=True, help_text="the step as the pages count it (1-based)"
    )
    calls = serializers.IntegerField(
        read_only=True, help_text="every call of the step: requests + cut_off"
    )

    class Meta:
        model = LoadTestStep
        fields = (
            "index", "number", "concurrency", "seconds", "requests", "cut_off", "calls", "ok",
            "errors", "error_rate", "requests_per_second", "output_tokens_per_second",
            "ttft_p50_ms", "ttft_p99_ms", "ttft_p999_ms", "latency_p50_ms", "latency_p99_ms",
            "latency_p999_ms", "cut_short",
        )  # fmt: skip


class LoadTestSerializer(serializers.ModelSerializer):
    progress = serializers.SerializerMethodField()
    knee_step = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="index (0-based) of the knee in steps and results; see knee_step_number",
    )
    knee_step_number = serializers.IntegerField(
        source="knee_number",
        read_only=True,
        allow_null=True,
        help_text="the knee as the pages name it: step N, 1-based",
    )
    knee_concurrency = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="the knee step's concurrent clients"
    )
    results = LoadTestStepSerializer(many=True, read_only=True)
    node = serializers.IntegerField(source="pinned_node_id", read_only=True, allow_null=True)
    node_name = serializers.CharField(source="pinned_node_name", read_only=True)

    class Meta:
        model = LoadTest
        fields = (
            "id", "model", "input_tokens", "output_tokens", "prefix_share", "steps",
            "step_seconds", "budget", "billing", "node", "node_name", "status", "cancel_requested",
            "progress", "current_step", "key_prefix", "knee_step", "knee_step_number",
            "knee_concurrency", "error", "created_at", "started_at", "finished_at", "results",
        )  # fmt: skip

    def get_progress(self, obj) -> int:
        return obj.progress()


class LoadTestInput(serializers.Serializer):
    model = serializers.CharField(max_length=128)
    input_tokens = serializers.IntegerField(min_value=1, max_value=32768)
    output_tokens = serializers.IntegerField(min_value=1, max_value=8192)
    prefix_share = serializers.IntegerField(min_value=0, max_value=100, default=0)
    steps = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=settings.CAPACITY_MAX_CLIENTS),
        min_length=1,
        max_length=services.MAX_STEPS,
        default=list(services.DEFAULT_STEPS),
    )
    step_seconds = serializers.IntegerField(
        min_value=services.MIN_STEP_SECONDS, max_value=services.MAX_STEP_SECONDS
    )
    budget = serializers.IntegerField(min_value=1, help_text="micro-units")
    billing = serializers.ChoiceField(
        choices=Billing.choices,
        default=Billing.BILLED,
        help_text="billed: the calls are billed; test: recorded, not billed",
    )
    node = serializers.IntegerField(
        min_value=1,
        allow_null=True,
        default=None,
        help_text="platform staff only: drive this node alone (the run's key is pinned to it)",
    )


class LoadTestViewSet(OrgViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = LoadTest.objects.none()  # for the schema; get_queryset scopes
    serializer_class = LoadTestSerializer

    def get_queryset(self):
        return services.load_tests(self.actor).prefetch_related("results")

    @extend_schema(request=LoadTestInput, responses={201: LoadTestSerializer})
    def create(self, request):
        test = services.load_test_start(
            actor=self.actor, **self._input(LoadTestInput, request.data)
        )
        return Response(LoadTestSerializer(test).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=LoadTestSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        test = services.load_test_cancel(actor=self.actor, load_test_id=self.get_object().pk)
        return Response(LoadTestSerializer(test).data)

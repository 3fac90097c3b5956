"""A stepped load test and its measured steps."""

from __future__ import annotations

from django.db import models
from django.utils import timezone as tz
from django.utils.translation import pgettext_lazy

from console.kernel.choices import TextChoices


class Status(TextChoices):
    QUEUED = "queued", pgettext_lazy("load test status", "Queued")
    RUNNING = "running", pgettext_lazy("load test status", "Running")
    DONE = "done", pgettext_lazy("load test status", "Finished")
    CANCELLED = "cancelled", pgettext_lazy("load test status", "Cancelled")
    FAILED = "failed", pgettext_lazy("load test status", "Failed")


ACTIVE = (Status.QUEUED, Status.RUNNING)


class Billing(TextChoices):
    """Whether the run's calls are billed like any other, or marked as a test:
    recorded and rated (the run reports its cost) but on no invoice and
    debited from no prepaid balance (the run's key is issued with
    ``test_traffic``). The budget holds either way."""

    BILLED = "billed", pgettext_lazy("load test billing", "Billed")
    TEST = "test", pgettext_lazy("load test billing", "Test, not billed")


class LoadTest(models.Model):
    """One run: what it drives (model, prompt profile, steps) and where it is."""

    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.CASCADE, related_name="load_tests"
    )
    started_by = models.ForeignKey(
        "accounts.Membership", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    model = models.CharField(max_length=128)
    input_tokens = models.PositiveIntegerField()
    output_tokens = models.PositiveIntegerField()
    prefix_share = models.PositiveSmallIntegerField()  # percent of the prompt shared by all calls
    steps = models.JSONField()  # concurrent clients per step, in order
    step_seconds = models.PositiveIntegerField()
    budget = models.BigIntegerField()  # micro-units of the organization's currency
    billing = models.CharField(max_length=8, choices=Billing.choices, default=Billing.BILLED)
    # Platform staff may drive one node (a channel) only: the run's key is
    # pinned to it (``ApiKey.pinned_node_id``); its name as it was at the start.
    pinned_node_id = models.PositiveIntegerField(null=True, blank=True)
    pinned_node_name = models.CharField(max_length=120, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    api_key_id = models.BigIntegerField(null=True, blank=True)
    key_prefix = models.CharField(max_length=32, blank=True)
    current_step = models.PositiveSmallIntegerField(default=0)
    step_started_at = models.DateTimeField(null=True, blank=True)
    knee_step = models.PositiveSmallIntegerField(null=True, blank=True)  # index into steps
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=tz.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = [models.Index(fields=["organization", "status"])]

    def __str__(self) -> str:
        return f"load test {self.pk} ({self.model})"

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def total_seconds(self) -> int:
        return len(self.steps) * self.step_seconds

    def progress(self, now=None) -> int:
        """Percent done: finished steps plus the running step's elapsed share."""
        if not self.active:
            return 100 if self.status == Status.DONE else self._done_share()
        return self._done_share(now)

    def _done_share(self, now=None) -> int:
        steps = len(self.steps) or 1
        done = float(self.current_step)
        if self.status == Status.RUNNING and self.step_started_at:
            elapsed = ((now or tz.now()) - self.step_started_at).total_seconds()
            done += max(0.0, min(1.0, elapsed / max(1, self.step_seconds)))
        return int(min(100, done * 100 / steps))


class LoadTestStep(models.Model):
    """What one step measured (milliseconds; ``None`` where no call succeeded)."""

    load_test = models.ForeignKey(LoadTest, on_delete=models.CASCADE, related_name="results")
    index = models.PositiveSmallIntegerField()
    concurrency = models.PositiveIntegerField()
    seconds = models.FloatField()
    requests = models.PositiveIntegerField()  # answers received (any status)
    ok = models.PositiveIntegerField()
    errors = models.PositiveIntegerField()  # non-2xx answers and transport failures
    requests_per_second = models.FloatField()  # successful (2xx) answers per second
    output_tokens_per_second = models.FloatField()
    ttft_p50_ms = models.FloatField(null=True)
    ttft_p99_ms = models.FloatField(null=True)
    ttft_p999_ms = models.FloatField(null=True)
    latency_p50_ms = models.FloatField(null=True)
    latency_p99_ms = models.FloatField(null=True)
    latency_p999_ms = models.FloatField(null=True)
    cut_short = models.BooleanField(default=False)  # cancelled while it ran

    class Meta:
        ordering = ("load_test", "index")
        constraints = [
            models.UniqueConstraint(fields=["load_test", "index"], name="uniq_load_test_step")
        ]

    def __str__(self) -> str:
        return f"step {self.index} ({self.concurrency} clients)"

    @property
    def error_rate(self) -> float:
        attempts = self.ok + self.errors
        return self.errors / attempts if attempts else 0.0

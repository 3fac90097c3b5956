"""A stepped load test and its measured steps."""

from __future__ import annotations

from django.db import models
from django.utils import timezone as tz
from django.utils.translation import gettext, pgettext, pgettext_lazy

from console.kernel.choices import TextChoices


class Status(TextChoices):
    QUEUED = "queued", pgettext_lazy("load test status", "Queued")
    RUNNING = "running", pgettext_lazy("load test status", "Running")
    DONE = "done", pgettext_lazy("load test status", "Finished")
    CANCELLED = "cancelled", pgettext_lazy("load test status", "Cancelled")
    FAILED = "failed", pgettext_lazy("load test status", "Failed")


ACTIVE = (Status.QUEUED, Status.RUNNING)


def step_label(number: int, clients: int) -> str:
    """How the list, the page and the chart name a step (the knee): its
    1-based number and its clients, "step 2 (4 clients)"."""
    return gettext("step %(n)d (%(clients)d clients)") % {"n": number, "clients": clients}


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
    # Index into steps (0-based, as stored and as ``knee_step`` in the API);
    # people read its ``knee_number`` (1-based) with its ``knee_concurrency``.
    knee_step = models.PositiveSmallIntegerField(null=True, blank=True)
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
    def cancelling(self) -> bool:
        """A cancel was asked and the run has not stopped yet."""
        return self.active and self.cancel_requested

    @property
    def status_label(self) -> str:
        """The status as people read it: "Cancelling" between the cancel and the stop."""
        if self.cancelling:
            return pgettext("load test status", "Cancelling")
        return str(self.get_status_display())

    @property
    def knee_number(self) -> int | None:
        """The knee as people count steps (1-based), ``None`` without one."""
        return None if self.knee_step is None else self.knee_step + 1

    @property
    def knee_concurrency(self) -> int | None:
        """The knee step's concurrent clients."""
        if self.knee_step is None or self.knee_step >= len(self.steps):
            return None
        return int(self.steps[self.knee_step])

    @property
    def knee_label(self) -> str:
        """The knee named one way on the list and the page: "step 2 (4 clients)"."""
        if self.knee_number is None:
            return ""
        return step_label(self.knee_number, self.knee_concurrency or 0)

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
    # Calls sent in the step whose answer ended after it (in the drain, or
    # aborted at its end or by a cancel): charged, in the call log, and in no
    # figure above. ``requests + cut_off`` is every call the step made.
    cut_off = models.PositiveIntegerField(default=0)
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
    def number(self) -> int:
        """The step as people count them (1-based)."""
        return self.index + 1

    @property
    def calls(self) -> int:
        """Every call the step made: answered in it, and cut off at its end."""
        return self.requests + self.cut_off

    @property
    def error_rate(self) -> float:
        attempts = self.ok + self.errors
        return self.errors / attempts if attempts else 0.0

"""Usage: the model catalogue and price book, one record per call, hourly
rollups with latency sketches, dead letters, and the re-rating trail.

Money is an integer count of micro-units of the organization's currency.
Durations are integer microseconds. Call records and rollups refer to
organizations, keys, sub-accounts and nodes by plain id columns without
database constraints: ingest checks them once per batch, and 50,000 inserts
a second cannot afford five foreign-key lookups each."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone as tz

from console.kernel.choices import TextChoices


class ModelKind(TextChoices):
    CHAT = "chat", "Chat / completions"
    EMBEDDING = "embedding", "Embeddings"


class Modality(TextChoices):
    TEXT = "text", "Text"
    # Takes images (and documents) in the prompt.
    VISION = "vision", "Text and images"


class CatalogModel(models.Model):
    """A public model name callers may ask for."""

    name = models.CharField(max_length=128, unique=True)
    display_name = models.CharField(max_length=128)
    family = models.CharField(max_length=64, blank=True)
    provider = models.CharField(max_length=64, blank=True)
    kind = models.CharField(max_length=16, choices=ModelKind.choices, default=ModelKind.CHAT)
    context_window = models.PositiveIntegerField(default=8192)
    modality = models.CharField(max_length=8, choices=Modality.choices, default=Modality.TEXT)
    enabled = models.BooleanField(default=True)
    # Public model names to try, in order, when no node can serve this one.
    fallbacks = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=tz.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return str(self.name)


class Price(models.Model):
    """Prices per million tokens, per token class, in micro-units of
    ``currency``. The row in effect for a call is the one with the latest
    ``effective_from`` not after the call's start. ``organization`` set means
    a negotiated price for that organization, which replaces the list price
    (the organization's discount rate applies to list prices only)."""

    model = models.ForeignKey(CatalogModel, on_delete=models.PROTECT, related_name="prices")
    organization = models.ForeignKey(
        "accounts.Organization",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="price_overrides",
    )
    currency = models.CharField(max_length=3, default="USD")
    input_per_mtok = models.BigIntegerField()
    cache_read_per_mtok = models.BigIntegerField()
    cache_write_per_mtok = models.BigIntegerField()
    output_per_mtok = models.BigIntegerField()
    effective_from = models.DateTimeField()
    created_at = models.DateTimeField(default=tz.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ("model__name", "currency", "-effective_from")
        constraints = [
            models.UniqueConstraint(
                fields=["model", "currency", "organization", "effective_from"],
                name="usage_price_unique_effective",
            ),
            models.CheckConstraint(
                condition=models.Q(input_per_mtok__gte=0)
                & models.Q(cache_read_per_mtok__gte=0)
                & models.Q(cache_write_per_mtok__gte=0)
                & models.Q(output_per_mtok__gte=0),
                name="usage_price_non_negative",
            ),
        ]
        indexes = [models.Index(fields=["model", "currency", "effective_from"])]

    def __str__(self) -> str:
        return f"{self.model_id} {self.currency} from {self.effective_from:%Y-%m-%d %H:%M}"


class CacheStatus(TextChoices):
    MISS = "miss", "Miss"
    PREFIX_HIT = "prefix_hit", "Prefix cache hit"
    RESPONSE_HIT = "response_hit", "Response cache hit"


class CallQuerySet(models.QuerySet):
    def billed(self) -> CallQuerySet:
        """The calls an organization pays for: all but load-test calls marked
        "not billed" (``is_test``). Invoices, their reconciliation, incident
        credits, the SLA and re-rating read calls through this; the prepaid
        ledger is debited from ingest's totals, and the rollups and
        attribution rollups are sums of these calls only (ingest adds no test
        call to them), so whatever reads a rollup plus the call records of a
        partial hour reads the edge through this too."""
        billed: CallQuerySet = self.filter(is_test=False)
        return billed


class CallRecord(models.Model):
    """One call through the gateway, rated once at ingest."""

    request_id = models.CharField(max_length=64, primary_key=True)
    organization_id = models.BigIntegerField()
    sub_account_id = models.BigIntegerField(null=True, blank=True)
    api_key_id = models.BigIntegerField()
    model = models.CharField(max_length=128)
    node_id = models.BigIntegerField(null=True, blank=True)
    protocol = models.CharField(max_length=16)
    endpoint = models.CharField(max_length=64)
    stream = models.BooleanField(default=False)
    status_code = models.PositiveSmallIntegerField()
    error_type = models.CharField(max_length=64, blank=True)
    # The four billed token classes; input means uncached prompt tokens.
    input_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    # Part of output_tokens, shown separately, billed as output.
    reasoning_tokens = models.BigIntegerField(default=0)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    ttft_us = models.BigIntegerField(null=True, blank=True)
    latency_us = models.BigIntegerField()
    upstream_us = models.BigIntegerField(null=True, blank=True)
    overhead_us = models.BigIntegerField(null=True, blank=True)
    queue_us = models.BigIntegerField(null=True, blank=True)
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    priority = models.SmallIntegerField(default=0)
    cache_status = models.CharField(
        max_length=16, choices=CacheStatus.choices, default=CacheStatus.MISS
    )
    # The key-pool credential the call went out with (null: the channel's own
    # token, or no upstream), and what the vendor charges for the call's tokens
    # at the channel's cost price, in micro-units of ``upstream_currency`` (0
    # and "" when unknown). Added later, hence db_default.
    credential_id = models.BigIntegerField(null=True, blank=True)
    upstream_cost = models.BigIntegerField(default=0, db_default=0)
    upstream_currency = models.CharField(max_length=3, blank=True, default="", db_default="")
    # Cost attribution: who the call was for, as the caller names its end
    # user ("" when not said), and the caller's tags ({key: value}, at most
    # ten; ``usage.events.tags_problem``). Added later, hence db_default.
    end_user = models.CharField(max_length=128, blank=True, default="", db_default="")
    tags = models.JSONField(default=dict, blank=True, db_default=models.Value("{}"))
    # Made with a load-test key marked "not billed": rated (``cost`` is what
    # the test reports) but on no invoice, debited from no balance and in no
    # rollup nor attribution rollup (``CallQuerySet.billed``). Added later,
    # hence db_default.
    is_test = models.BooleanField(default=False, db_default=False)
    currency = models.CharField(max_length=3)
    # What the organization is charged for the call (its revenue to us).
    cost = models.BigIntegerField(default=0)
    # False when no price was in effect: recorded, cost 0, flagged for admins.
    priced = models.BooleanField(default=True)
    price_id = models.BigIntegerField(null=True, blank=True)
    ingested_at = models.DateTimeField(default=tz.now)

    objects = CallQuerySet.as_manager()

    class Meta:
        db_table = "usage_call"
        ordering = ("-started_at", "-request_id")
        indexes = [
            # Organization and time first: every log query is one org over a time range.
            models.Index(fields=["organization_id", "-started_at"], name="usage_call_org_time"),
            models.Index(
                fields=["organization_id", "api_key_id", "-started_at"],
                name="usage_call_org_key_time",
            ),
            models.Index(
                fields=["organization_id", "model", "-started_at"],
                name="usage_call_org_model_time",
            ),
        ]

    def __str__(self) -> str:
        return str(self.request_id)


class Grain(TextChoices):
    """Which dimensions a rollup row keeps. Unkept dimensions hold 0 or ''."""

    ORG = "org", "Organization"
    SUB_ACCOUNT = "sub", "Sub-account"
    KEY = "key", "API key"
    MODEL = "model", "Model"
    NODE = "node", "Node"
    TRAFFIC = "traffic", "Model, protocol and streaming"
    FULL = "full", "Sub-account, key, model, node, protocol and streaming"


class Rollup(models.Model):
    """Sums of an hour of billed calls at one grain. Each billed call adds to
    one row of each grain, in the same transaction that stores it, so a row
    always equals the sum of its billed records (``CallQuerySet.billed``: a
    load-test call marked "not billed" adds to none). Histograms are
    ``usage.sketch`` encodings."""

    organization_id = models.BigIntegerField()
    grain = models.CharField(max_length=8, choices=Grain.choices)
    sub_account_id = models.BigIntegerField(default=0)
    api_key_id = models.BigIntegerField(default=0)
    model = models.CharField(max_length=128, default="", blank=True)
    node_id = models.BigIntegerField(default=0)
    # The client's protocol (openai, anthropic, gemini) and "stream" or "plain";
    # kept by the TRAFFIC and FULL grains (added later, hence db_default).
    protocol = models.CharField(max_length=16, default="", blank=True, db_default="")
    mode = models.CharField(max_length=8, default="", blank=True, db_default="")
    hour = models.DateTimeField()
    currency = models.CharField(max_length=3)
    calls = models.BigIntegerField(default=0)
    calls_2xx = models.BigIntegerField(default=0)
    calls_4xx = models.BigIntegerField(default=0)
    calls_429 = models.BigIntegerField(default=0)
    calls_5xx = models.BigIntegerField(default=0)
    stream_calls = models.BigIntegerField(default=0)
    cache_hit_calls = models.BigIntegerField(default=0)
    unpriced_calls = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    cost = models.BigIntegerField(default=0)
    latency_sum_us = models.BigIntegerField(default=0)
    ttft_count = models.BigIntegerField(default=0)
    ttft_sum_us = models.BigIntegerField(default=0)
    # Added later: db_default keeps the column's DEFAULT, so a worker still
    # running the previous code (a rolling deploy) can insert rows without it.
    # Where time goes, summed over the calls that report each (a missing one adds 0).
    queue_sum_us = models.BigIntegerField(default=0, db_default=0)
    overhead_sum_us = models.BigIntegerField(default=0, db_default=0)
    upstream_sum_us = models.BigIntegerField(default=0, db_default=0)
    # Answered from the response cache (these count in cache_hit_calls too).
    response_cache_calls = models.BigIntegerField(default=0, db_default=0)
    # Refused by a rate limit (rpm/tpm), a spend cap or the prepaid balance,
    # or the queue (full or timed out): ``usage.ingest.aggregate``'s codes.
    rate_limited_calls = models.BigIntegerField(default=0, db_default=0)
    cap_refused_calls = models.BigIntegerField(default=0, db_default=0)
    queue_refused_calls = models.BigIntegerField(default=0, db_default=0)
    # What the upstream vendors charge for these calls, in ``currency`` (the
    # organization's): the sum of ``CallRecord.upstream_cost`` over the calls
    # whose upstream currency is the organization's. The calls an upstream
    # served with tokens to pay for but whose cost is unknown or in another
    # currency count in ``uncosted_calls`` (their cost is in no sum).
    upstream_cost = models.BigIntegerField(default=0, db_default=0)
    uncosted_calls = models.BigIntegerField(default=0, db_default=0)
    latency_hist = models.BinaryField(default=b"")
    ttft_hist = models.BinaryField(default=b"")
    # Output tokens per second of generation, in thousandths (see
    # ``usage.ingest.aggregate.TPS_BINS``). Added later, hence db_default.
    tps_hist = models.BinaryField(default=b"", db_default=b"")
    updated_at = models.DateTimeField(default=tz.now)

    class Meta:
        db_table = "usage_rollup"
        constraints = [
            # Dimensions before the hour: a filtered series is one index range.
            models.UniqueConstraint(
                fields=[
                    "organization_id",
                    "grain",
                    "sub_account_id",
                    "api_key_id",
                    "model",
                    "node_id",
                    "protocol",
                    "mode",
                    "hour",
                ],
                name="usage_rollup_unique_cell",
            )
        ]
        indexes = [
            models.Index(fields=["organization_id", "grain", "hour"]),
            # Platform-wide reads (margin across organizations) of one of these
            # grains over a range. Small next to the FULL grain's rows, and
            # written once per new row: sums change in place, keys never.
            models.Index(
                fields=["grain", "hour"],
                name="usage_rollup_platform",
                condition=models.Q(grain__in=["org", "model", "node"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.organization_id}/{self.grain} {self.hour:%Y-%m-%d %H}h"


class AttributionKind(TextChoices):
    TAG = "tag", "Tag"
    END_USER = "user", "End user"


class AttributionRollup(models.Model):
    """Sums of an hour of an organization's calls per tag value (``kind``
    "tag": ``tag_key`` and ``value``) or per end user (``kind`` "user":
    ``value`` the end user, ``tag_key`` ""). A call adds to one row per tag
    it carries and one for its end user (none when it has neither), in the
    ingest transaction that stores it, so a row always equals the sum of its
    billed call records (a load-test call marked "not billed" adds to none).
    The calls without a tag key (or an end user) are the
    organization's rollup less these rows."""

    organization_id = models.BigIntegerField()
    kind = models.CharField(max_length=4, choices=AttributionKind.choices)
    tag_key = models.CharField(max_length=32, default="", blank=True)
    value = models.CharField(max_length=128)
    hour = models.DateTimeField()
    currency = models.CharField(max_length=3)
    calls = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(default=tz.now)

    class Meta:
        db_table = "usage_attribution"
        constraints = [
            # Kind and key before the hour: one key's values over a range is one index range.
            models.UniqueConstraint(
                fields=["organization_id", "kind", "tag_key", "hour", "value"],
                name="usage_attribution_unique_cell",
            )
        ]

    def __str__(self) -> str:
        cell = f"{self.kind}:{self.tag_key}={self.value}"
        return f"{self.organization_id}/{cell} {self.hour:%Y-%m-%d %H}h"


class DeadLetter(models.Model):
    """A usage event ingest refused, with why. Never silently dropped."""

    received_at = models.DateTimeField(default=tz.now)
    request_id = models.CharField(max_length=64, blank=True)
    organization_id = models.BigIntegerField(null=True, blank=True)
    reason = models.TextField()
    payload = models.JSONField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-received_at",)
        indexes = [models.Index(fields=["organization_id", "-received_at"])]

    def __str__(self) -> str:
        return f"{self.request_id or '?'}: {self.reason[:60]}"


class PeriodClose(models.Model):
    """A stretch of an organization's usage that has been invoiced. Re-rating
    never edits calls inside a closed period; it records adjustments instead.
    Invoicing writes these rows when it issues an invoice."""

    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.CASCADE, related_name="closed_periods"
    )
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    reference = models.CharField(max_length=64, blank=True)
    closed_at = models.DateTimeField(default=tz.now)

    class Meta:
        ordering = ("-period_start",)
        indexes = [models.Index(fields=["organization", "period_start", "period_end"])]

    def __str__(self) -> str:
        return f"{self.organization_id} {self.period_start:%Y-%m-%d}..{self.period_end:%Y-%m-%d}"


class RerateRun(models.Model):
    """One explicit re-rating of a period after a price fix."""

    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    organization = models.ForeignKey(
        "accounts.Organization", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    model = models.CharField(max_length=128, blank=True)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    reason = models.TextField()
    calls_examined = models.BigIntegerField(default=0)
    calls_rerated = models.BigIntegerField(default=0)
    adjustments = models.BigIntegerField(default=0)
    cost_delta = models.BigIntegerField(default=0)
    adjustment_delta = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(default=tz.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"re-rate #{self.pk}"


class Adjustment(models.Model):
    """A correction to an invoiced call's cost, billed in the next open period."""

    run = models.ForeignKey(RerateRun, on_delete=models.PROTECT, related_name="adjustment_rows")
    organization_id = models.BigIntegerField()
    request_id = models.CharField(max_length=64)
    currency = models.CharField(max_length=3)
    original_cost = models.BigIntegerField()
    new_cost = models.BigIntegerField()
    delta = models.BigIntegerField()
    created_at = models.DateTimeField(default=tz.now)
    # Set by invoicing when the adjustment is put on an invoice.
    billed_reference = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [models.Index(fields=["organization_id", "created_at"])]

    def __str__(self) -> str:
        return f"{self.request_id} {self.delta:+d}"

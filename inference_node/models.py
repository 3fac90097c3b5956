"""Inference nodes: the OpenAI-compatible servers (vLLM, SGLang, llama.cpp or
the bundled simulator) the gateway forwards calls to, the models each serves,
and what the health prober last saw of it.

A node belongs to one organization (its own hardware, managed by its owners
and admins) or to none: a shared platform node, managed by the platform's
staff in the Django admin and usable by every organization."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone as tz


class NodeStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    # Finishes what it has, receives no new calls; still probed.
    DRAINING = "draining", "Draining"
    DISABLED = "disabled", "Disabled"


class NodeHealth(models.TextChoices):
    UNKNOWN = "unknown", "Unknown"
    HEALTHY = "healthy", "Healthy"
    UNHEALTHY = "unhealthy", "Unhealthy"


class Node(models.Model):
    organization = models.ForeignKey(
        "accounts.Organization",  # by label: models import no other app
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="inference_nodes",
        help_text="Empty for a shared platform node that every organization may use.",
    )
    name = models.CharField(max_length=120)
    base_url = models.CharField(
        max_length=500, help_text="The server's root, e.g. http://10.0.0.5:8000 (without /v1)."
    )
    # Stored as is: the gateway has to present it to the node. Never shown back
    # in full, never in API output or audit parameters.
    token = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=16, choices=NodeStatus.choices, default=NodeStatus.ACTIVE)
    weight = models.PositiveIntegerField(default=1)
    max_concurrency = models.PositiveIntegerField(default=64)
    labels = models.JSONField(default=dict, blank=True, help_text='e.g. {"region": "eu-west"}')

    # What the prober last saw.
    health = models.CharField(max_length=16, choices=NodeHealth.choices, default=NodeHealth.UNKNOWN)
    consecutive_failures = models.PositiveIntegerField(default=0)
    consecutive_successes = models.PositiveIntegerField(default=0)
    last_probe_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    last_latency_ms = models.FloatField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    health_changed_at = models.DateTimeField(null=True, blank=True)
    # The node's own /v1/models answer: [{"id": ..., "max_model_len": ...}].
    discovered_models = models.JSONField(default=list, blank=True)

    # Load from /metrics (None: the node exposes none, or not these).
    metrics_available = models.BooleanField(default=False)
    running = models.PositiveIntegerField(null=True, blank=True)
    waiting = models.PositiveIntegerField(null=True, blank=True)
    kv_cache_usage = models.FloatField(null=True, blank=True)
    # The counters as last scraped, so the next scrape can take the delta.
    prefix_cache_queries = models.FloatField(null=True, blank=True)
    prefix_cache_hits = models.FloatField(null=True, blank=True)
    prefix_cache_hit_rate = models.FloatField(null=True, blank=True)

    created_at = models.DateTimeField(default=tz.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name", "id")
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "name"],
                condition=Q(organization__isnull=False),
                name="uniq_node_name_per_org",
            ),
            models.UniqueConstraint(
                fields=["name"],
                condition=Q(organization__isnull=True),
                name="uniq_shared_node_name",
            ),
        ]
        indexes = [models.Index(fields=["status", "health"])]

    def __str__(self) -> str:
        return self.name if self.organization_id else f"{self.name} (shared)"

    @property
    def is_shared(self) -> bool:
        return self.organization_id is None

    @property
    def token_hint(self) -> str:
        """What may be shown of the token: its last 4 characters when it is long
        enough that they reveal little, else only that one is set."""
        if not self.token:
            return ""
        return f"…{self.token[-4:]}" if len(self.token) >= 12 else "set"

    @property
    def kv_cache_percent(self) -> float | None:
        return None if self.kv_cache_usage is None else round(self.kv_cache_usage * 100, 1)

    @property
    def hit_rate_percent(self) -> float | None:
        return (
            None
            if self.prefix_cache_hit_rate is None
            else round(self.prefix_cache_hit_rate * 100, 1)
        )

    @property
    def discovered_ids(self) -> set[str]:
        return {m.get("id") for m in self.discovered_models or [] if isinstance(m, dict)}


class NodeModel(models.Model):
    """A model a node serves: the public name callers ask for, mapped to the
    node's own name for it."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="models")
    public_name = models.CharField(max_length=200)
    upstream_name = models.CharField(max_length=200)
    context_window = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ("public_name", "id")
        constraints = [
            models.UniqueConstraint(fields=["node", "public_name"], name="uniq_node_public_model")
        ]
        indexes = [models.Index(fields=["public_name"])]

    def __str__(self) -> str:
        return f"{self.public_name} → {self.upstream_name}"

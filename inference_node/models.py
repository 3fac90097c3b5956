"""Inference nodes and vendor channels: the upstreams the gateway forwards
calls to, the credentials it presents, the models each serves (with priority
tier, weight and cost price), and what the health prober last saw.

A node (called a channel when it is a vendor's API) has a kind: an
OpenAI-compatible server (vLLM, SGLang, llama.cpp, the bundled simulator, or a
vendor speaking OpenAI chat such as DeepSeek, Kimi, GLM, Qwen, OpenRouter),
the OpenAI API, the Anthropic API or the Gemini API. It belongs to one
organization (its own hardware or its own vendor account: bring your own key)
or to none: a shared platform channel, managed by the platform's staff and
usable by every organization.

Secrets (the node token, every credential) are sealed at rest
(``console.kernel.crypto.SealedTextField``) and never shown back beyond a hint.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone as tz
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from console.kernel.choices import TextChoices
from console.kernel.crypto import SealedTextField, hint


class NodeKind(TextChoices):
    OPENAI_COMPATIBLE = "openai_compatible", _("OpenAI-compatible (self-hosted or vendor)")
    OPENAI = "openai", _("OpenAI API")
    ANTHROPIC = "anthropic", _("Anthropic API")
    GEMINI = "gemini", _("Google Gemini API")


class HealthCheck(TextChoices):
    # Self-hosted servers: GET /health and the model list, every probe round.
    HEALTH = "health", _("Health endpoint and model list")
    # Vendors: the vendor's model list with one credential (a light probe).
    MODELS = "models", _("The vendor's model list")
    # Vendors: judged by live traffic only (breakers per channel and credential).
    TRAFFIC = "traffic", _("Live traffic only")


class NodeStatus(TextChoices):
    ACTIVE = "active", pgettext_lazy("node status", "Active")
    # Finishes what it has, receives no new calls; still probed.
    DRAINING = "draining", pgettext_lazy("node status", "Draining")
    DISABLED = "disabled", pgettext_lazy("node status", "Disabled")


class NodeHealth(TextChoices):
    UNKNOWN = "unknown", pgettext_lazy("node health", "Unknown")
    HEALTHY = "healthy", pgettext_lazy("node health", "Healthy")
    UNHEALTHY = "unhealthy", pgettext_lazy("node health", "Unhealthy")


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
    kind = models.CharField(
        max_length=24, choices=NodeKind.choices, default=NodeKind.OPENAI_COMPATIBLE
    )
    # The vendor preset it was made from (inference_node.presets), "" for none.
    preset = models.CharField(max_length=32, blank=True)
    base_url = models.CharField(
        max_length=500, help_text="The server's root, e.g. http://10.0.0.5:8000 (without /v1)."
    )
    # Where the API's paths start when not at the kind's usual /v1 (/v1beta for
    # Gemini): Zhipu GLM's OpenAI-compatible API is under /api/paas/v4.
    api_path = models.CharField(max_length=120, blank=True)
    health_check = models.CharField(
        max_length=16, choices=HealthCheck.choices, default=HealthCheck.HEALTH
    )
    # Sealed at rest: the gateway presents it to a self-hosted node (and to the
    # simulator's admin endpoints) when the node has no credential pool. Never
    # shown back in full, never in API output or audit parameters.
    token = SealedTextField(blank=True)
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
        return hint(self.token)

    @property
    def is_vendor(self) -> bool:
        """Judged by traffic and a vendor probe rather than a /health endpoint."""
        return self.health_check != HealthCheck.HEALTH

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
    def discovered_ids(self) -> set[str | None]:  # None: a listed model without an id
        return {m.get("id") for m in self.discovered_models or [] if isinstance(m, dict)}


class CredentialStatus(TextChoices):
    ACTIVE = "active", pgettext_lazy("API key status", "Active")
    # Turned off by a person, or by the gateway after the vendor refused it (401 / 403).
    DISABLED = "disabled", pgettext_lazy("API key status", "Disabled")


class Credential(models.Model):
    """One vendor API key of a channel's key pool. The gateway picks one per
    call (weighted, skipping cooling and disabled ones); a 429 cools it for the
    vendor's retry-after, a 401 / 403 disables it (with an audit event)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="credentials")
    label = models.CharField(max_length=80, blank=True)
    secret = SealedTextField()
    # The last four characters, kept beside the sealed secret so lists need not open it.
    secret_hint = models.CharField(max_length=16, blank=True)
    weight = models.PositiveIntegerField(default=1)
    rpm_limit = models.PositiveIntegerField(null=True, blank=True)
    tpm_limit = models.PositiveIntegerField(null=True, blank=True)
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=CredentialStatus.choices, default=CredentialStatus.ACTIVE
    )
    disabled_reason = models.CharField(max_length=300, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=tz.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("node_id", "id")
        indexes = [models.Index(fields=["node", "status"])]

    def __str__(self) -> str:
        return f"{self.label or 'credential'} {self.secret_hint}".strip()

    def __repr__(self) -> str:  # never the secret
        return f"<Credential {self.pk} of node {self.node_id} {self.secret_hint}>"


class NodeModel(models.Model):
    """A model a node serves: the public name callers ask for, mapped to the
    node's own (the vendor's) name for it, with its place among the channels
    that serve the same model and what the vendor charges for it."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="models")
    public_name = models.CharField(max_length=200)
    upstream_name = models.CharField(max_length=200)
    context_window = models.PositiveIntegerField(null=True, blank=True)
    # Priority tier: 0 primary, 1 backup, ... A call goes to the lowest tier
    # with a channel able to take it; inside a tier, by weight.
    tier = models.PositiveSmallIntegerField(default=0)
    # Weight inside the tier (empty: the node's weight).
    weight = models.PositiveIntegerField(null=True, blank=True)
    # What the reseller pays the vendor, micro-units of cost_currency per
    # million tokens of each class (empty: unknown, the margin shows no cost).
    cost_currency = models.CharField(max_length=3, blank=True)
    cost_input_per_mtok = models.BigIntegerField(null=True, blank=True)
    cost_cache_read_per_mtok = models.BigIntegerField(null=True, blank=True)
    cost_cache_write_per_mtok = models.BigIntegerField(null=True, blank=True)
    cost_output_per_mtok = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ("public_name", "id")
        constraints = [
            models.UniqueConstraint(fields=["node", "public_name"], name="uniq_node_public_model")
        ]
        indexes = [models.Index(fields=["public_name"])]

    def __str__(self) -> str:
        return f"{self.public_name} → {self.upstream_name}"

    @property
    def has_cost(self) -> bool:
        return bool(self.cost_currency) and self.cost_input_per_mtok is not None

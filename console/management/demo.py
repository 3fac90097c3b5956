"""The demo data ``manage.py up`` makes sure of: a demo user, organization and
API key, the bundled simulator as a shared node, and the vendor simulator as
three shared channels (one per kind) with a key pool and cost prices."""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings
from django.core.management.base import CommandError
from django.db import transaction

from accounts.facade import (
    Actor,
    ApiKey,
    ApiKeyStatus,
    Membership,
    Organization,
    Role,
    User,
    api_key_issue,
    api_key_revoke,
    organization_create,
)
from inference_node.facade import (
    HealthCheck,
    Node,
    NodeHealth,
    NodeKind,
    SeedCost,
    invalidate_routing_snapshot,
    seed_credential,
    seed_node_model,
)

DEMO_EMAIL = "demo@example.com"
DEMO_ORG_NAME = "Demo Org"
DEMO_ORG_SLUG = "demo"
DEMO_KEY_NAME = "Demo key"
SIMULATOR_NODE_NAME = "simulator-1"
# The bundled simulator's models: (public name, context window). Both chat models
# hold a coding agent's first prompt (9k tokens for Codex, 29k for Claude Code):
# 128k, as the models agents are built for.
SIMULATOR_MODELS = (
    ("sim-chat-small", 131_072),
    ("sim-chat-large", 131_072),
    ("sim-embed", 8192),
)
SIMULATOR_EMBEDDING_MODELS = ("sim-embed",)


# The demo vendor channels: (channel name, kind, public model, the vendor's model id,
# context window, cost price in micro-USD per Mtok: input, cache read, cache write, output).
VENDOR_CHANNELS = (
    ("sim-openai", NodeKind.OPENAI, "sim-gpt", "gpt-sim", 128_000,
     (1_750_000, 175_000, 2_187_500, 7_000_000)),
    ("sim-anthropic", NodeKind.ANTHROPIC, "sim-claude", "claude-sim", 200_000,
     (2_100_000, 210_000, 2_625_000, 10_500_000)),
    ("sim-gemini", NodeKind.GEMINI, "sim-gemini", "gemini-sim", 1_000_000,
     (875_000, 87_500, 1_093_750, 7_000_000)),
)  # fmt: skip


def demo_password() -> str:
    """Derived from the secret key, so it is the same on every start and never stored."""
    digest = hmac.new(settings.SECRET_KEY.encode(), b"demo-password", hashlib.sha256)
    return digest.hexdigest()[:16]


def ensure_demo(*, new_key: bool) -> tuple[str, str, str | None]:
    """Create the demo user, organization and key once. Returns the login line's
    password, what to print for the key (the raw key when one was just issued,
    else a hint naming its prefix) and the raw key (``None`` when not issued now)."""

    password = demo_password()
    with transaction.atomic():
        user = User.objects.filter(email=DEMO_EMAIL).first()
        if user is None:
            user = User.objects.create_user(DEMO_EMAIL, password, full_name="Demo User")
        org = Organization.objects.filter(slug=DEMO_ORG_SLUG).first()
        if org is None:
            org = organization_create(name=DEMO_ORG_NAME, slug=DEMO_ORG_SLUG, owner=user)
            new_key = True
        owners = Membership.objects.select_related("user", "organization").filter(
            organization=org, role=Role.OWNER
        )
        membership = owners.filter(user=user).first() or owners.order_by("pk").first()
        if membership is None:
            raise CommandError(f"The demo organization '{DEMO_ORG_SLUG}' has no owner.")
        actor = Actor(membership)
        current = (
            ApiKey.objects.filter(organization=org, name=DEMO_KEY_NAME, sub_account=None)
            .exclude(status=ApiKeyStatus.REVOKED)
            .order_by("-created_at", "-pk")
            .first()
        )
        if new_key:
            if current is not None:
                api_key_revoke(actor=actor, key_id=current.pk)
            _key, raw = api_key_issue(actor=actor, name=DEMO_KEY_NAME)
            return password, raw, raw
    hint = "(shown once when it was issued; run with --new-demo-key for a fresh one)"
    if current is None or not current.is_usable:
        return password, f"none active {hint}", None
    return password, f"{current.prefix}… {hint}", None


def ensure_simulator_node(port: int) -> None:
    """Register the bundled simulator as a shared platform node (every
    organization may route to it), pointing at this run's port."""

    base_url = f"http://127.0.0.1:{port}"
    with transaction.atomic():
        node, created = Node.objects.get_or_create(
            organization=None,
            name=SIMULATOR_NODE_NAME,
            defaults={"base_url": base_url, "labels": {"hardware": "simulator"}},
        )
        if not created and node.base_url != base_url:
            node.base_url = base_url
            node.health = NodeHealth.UNKNOWN  # not routable until probed at the new address
            node.save(update_fields=["base_url", "health", "updated_at"])
        for name, context in SIMULATOR_MODELS:
            # the simulator serves these contexts (up starts it so): an older demo's
            # smaller ones are brought up to date
            seed_node_model(node.pk, name, upstream_name=name, context_window=context)
    invalidate_routing_snapshot()


def vendor_key() -> str:
    """The vendor simulator's API key (derived from the secret key: the same on
    every start, never printed)."""
    digest = hmac.new(settings.SECRET_KEY.encode(), b"vendor-simulator-key", hashlib.sha256)
    return "sk-sim-" + digest.hexdigest()[:40]


def ensure_vendor_channels(port: int) -> None:
    """Register the vendor simulator as three shared channels, one per kind,
    each with the simulator's key in its pool and a cost price per model."""
    base_url = f"http://127.0.0.1:{port}"
    secret = vendor_key()
    with transaction.atomic():
        for name, kind, public, upstream, context, cost in VENDOR_CHANNELS:
            node, created = Node.objects.get_or_create(
                organization=None,
                name=name,
                defaults={
                    "base_url": base_url,
                    "kind": kind,
                    "health_check": HealthCheck.MODELS,
                    "labels": {"hardware": "simulator", "vendor": kind},
                },
            )
            if not created and node.base_url != base_url:
                node.base_url = base_url
                node.health = NodeHealth.UNKNOWN
                node.save(update_fields=["base_url", "health", "updated_at"])
            if not node.credentials.exists():
                seed_credential(node.pk, secret=secret, label="simulator key")
            seed_node_model(
                node.pk,
                public,
                upstream_name=upstream,
                context_window=context,
                cost=SeedCost("USD", *cost),
                keep_existing=True,
            )
    invalidate_routing_snapshot()

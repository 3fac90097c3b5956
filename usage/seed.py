"""The starter catalogue and USD list prices (micro-units per million tokens),
effective from 2024-01-01 UTC. ``seed_catalog`` is idempotent: it adds what
is missing and never changes a model or price an operator has edited. The
data migration 0002 and ``manage.py up`` both call it."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from usage.models import CatalogModel, Price

SEED_EFFECTIVE_FROM = datetime(2024, 1, 1, tzinfo=UTC)
USD = 1_000_000  # micro-units per dollar

# name, display name, family, provider, kind, context window, fallbacks,
# (input, output) in dollars per million tokens.
CATALOG: tuple[tuple[Any, ...], ...] = (
    ("gpt-4o", "GPT-4o", "gpt-4o", "openai", "chat", 128_000, ["gpt-4o-mini"], ("2.50", "10.00")),
    ("gpt-4o-mini", "GPT-4o mini", "gpt-4o", "openai", "chat", 128_000, [], ("0.15", "0.60")),
    ("o3-mini", "o3-mini", "o-series", "openai", "chat", 200_000, [], ("1.10", "4.40")),
    (
        "claude-3-5-sonnet",
        "Claude 3.5 Sonnet",
        "claude-3.5",
        "anthropic",
        "chat",
        200_000,
        ["claude-3-5-haiku"],
        ("3.00", "15.00"),
    ),
    (
        "claude-3-5-haiku",
        "Claude 3.5 Haiku",
        "claude-3.5",
        "anthropic",
        "chat",
        200_000,
        [],
        ("0.80", "4.00"),
    ),
    (
        "gemini-1.5-pro",
        "Gemini 1.5 Pro",
        "gemini-1.5",
        "google",
        "chat",
        2_000_000,
        ["gemini-1.5-flash"],
        ("1.25", "5.00"),
    ),
    (
        "gemini-1.5-flash",
        "Gemini 1.5 Flash",
        "gemini-1.5",
        "google",
        "chat",
        1_000_000,
        [],
        ("0.075", "0.30"),
    ),
    (
        "llama-3.1-70b-instruct",
        "Llama 3.1 70B Instruct",
        "llama-3.1",
        "meta",
        "chat",
        131_072,
        ["llama-3.1-8b-instruct"],
        ("0.60", "0.80"),
    ),
    (
        "llama-3.1-8b-instruct",
        "Llama 3.1 8B Instruct",
        "llama-3.1",
        "meta",
        "chat",
        131_072,
        [],
        ("0.05", "0.08"),
    ),
    (
        "text-embedding-3-small",
        "Text Embedding 3 Small",
        "text-embedding-3",
        "openai",
        "embedding",
        8_191,
        [],
        ("0.02", "0"),
    ),
    # The bundled simulator node's models.
    (
        "sim-chat-small",
        "Simulator chat (small)",
        "sim",
        "simulator",
        "chat",
        131_072,
        [],
        ("0.10", "0.40"),
    ),
    (
        "sim-chat-large",
        "Simulator chat (large)",
        "sim",
        "simulator",
        "chat",
        131_072,
        ["sim-chat-small"],
        ("1.00", "4.00"),
    ),
    (
        "sim-embed",
        "Simulator embeddings",
        "sim",
        "simulator",
        "embedding",
        8_192,
        [],
        ("0.01", "0"),
    ),
    # The demo vendor channels (`manage.py up`): the simulator speaking the OpenAI,
    # Anthropic and Gemini APIs with vendor keys, as the real vendors do.
    (
        "sim-gpt",
        "Simulated GPT (OpenAI API)",
        "sim",
        "openai",
        "chat",
        128_000,
        [],
        ("2.50", "10.00"),
    ),
    (
        "sim-claude",
        "Simulated Claude (Anthropic API)",
        "sim",
        "anthropic",
        "chat",
        200_000,
        [],
        ("3.00", "15.00"),
    ),
    (
        "sim-gemini",
        "Simulated Gemini (Gemini API)",
        "sim",
        "google",
        "chat",
        1_000_000,
        [],
        ("1.25", "10.00"),
    ),
)
# Models of the catalogue that take images and documents in the prompt.
VISION = frozenset(
    {
        "gpt-4o",
        "gpt-4o-mini",
        "claude-3-5-sonnet",
        "claude-3-5-haiku",
        "gemini-1.5-pro",
        "gemini-1.5-flash",
        "sim-gpt",
        "sim-claude",
        "sim-gemini",
    }
)


def _micro(dollars: str) -> int:
    return int(Decimal(dollars) * USD)


def list_prices(input_dollars: str, output_dollars: str) -> dict[str, int]:
    """A list price: cache reads at 10 % of input, cache writes at 125 %."""
    inp = _micro(input_dollars)
    return {
        "input_per_mtok": inp,
        "cache_read_per_mtok": inp // 10,
        "cache_write_per_mtok": inp * 5 // 4,
        "output_per_mtok": _micro(output_dollars),
    }


def seed_catalog(catalog_model: Any = None, price_model: Any = None) -> int:
    """Create missing catalogue entries and their 2024-01-01 USD list prices.
    Returns how many models were created. The model classes can be passed
    (a migration passes its historical ones)."""
    if catalog_model is None or price_model is None:
        catalog_model, price_model = CatalogModel, Price
    created = 0
    # (Migrations older than the modality column pass models without it.)
    has_modality = any(f.name == "modality" for f in catalog_model._meta.get_fields())
    for name, display, family, provider, kind, context, fallbacks, (inp, out) in CATALOG:
        defaults = {
            "display_name": display,
            "family": family,
            "provider": provider,
            "kind": kind,
            "context_window": context,
            "fallbacks": fallbacks,
        }
        if has_modality:
            defaults["modality"] = "vision" if name in VISION else "text"
        model, was_created = catalog_model.objects.get_or_create(name=name, defaults=defaults)
        created += was_created
        if not price_model.objects.filter(model=model, currency="USD", organization=None).exists():
            price_model.objects.create(
                model=model,
                currency="USD",
                organization=None,
                effective_from=SEED_EFFECTIVE_FROM,
                **list_prices(inp, out),
            )
    return created

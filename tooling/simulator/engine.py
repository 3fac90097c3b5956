"""Per-model state: prefix cache, Anthropic's explicit prompt cache, batch scheduler
and counters."""

from __future__ import annotations

from .config import ModelSpec
from .latency import Scheduler
from .metrics import ModelMetrics
from .prefix_cache import PrefixCache
from .prompt_cache import PromptCache


class ModelEngine:
    def __init__(
        self, spec: ModelSpec, *, cache_blocks: int, max_running: int, cache_ttl_scale: float = 1.0
    ):
        self.spec = spec
        self.name = spec.name
        self.cache = PrefixCache(cache_blocks)
        self.prompt_cache = PromptCache(cache_ttl_scale)
        self.scheduler = Scheduler(max_running)
        self.metrics = ModelMetrics()

    def reset(self) -> None:
        self.cache.clear()
        self.prompt_cache.clear()
        self.metrics = ModelMetrics()

"""Per-model state: prefix cache, batch scheduler and counters."""

from __future__ import annotations

from .config import ModelSpec
from .latency import Scheduler
from .metrics import ModelMetrics
from .prefix_cache import PrefixCache


class ModelEngine:
    def __init__(self, spec: ModelSpec, *, cache_blocks: int, max_running: int):
        self.spec = spec
        self.name = spec.name
        self.cache = PrefixCache(cache_blocks)
        self.scheduler = Scheduler(max_running)
        self.metrics = ModelMetrics()

    def reset(self) -> None:
        self.cache.clear()
        self.metrics = ModelMetrics()

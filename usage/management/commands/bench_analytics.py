"""``manage.py bench_analytics``: its code is tooling (``tooling.bench.analytics``), which nothing
the product serves imports; this module is the command's door."""

from tooling.bench.analytics import Command

__all__ = ["Command"]

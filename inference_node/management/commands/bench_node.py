"""``manage.py bench_node``: its code is tooling (``tooling.bench.node``), which nothing
the product serves imports; this module is the command's door."""

from tooling.bench.node import Command

__all__ = ["Command"]

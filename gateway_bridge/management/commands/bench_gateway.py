"""``manage.py bench_gateway``: its code is tooling (``tooling.bench.gateway``), which nothing
the product serves imports; this module is the command's door."""

from tooling.bench.gateway import Command

__all__ = ["Command"]

"""``manage.py bench_keys``: its code is tooling (``tooling.bench.keys``), which nothing
the product serves imports; this module is the command's door."""

from tooling.bench.keys import Command

__all__ = ["Command"]

"""``manage.py bench_console``: its code is tooling (``tooling.bench.console``), which nothing
the product serves imports; this module is the command's door."""

from tooling.bench.console import Command

__all__ = ["Command"]

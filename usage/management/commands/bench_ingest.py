"""``manage.py bench_ingest``: its code is tooling (``tooling.bench.ingest``), which nothing
the product serves imports; this module is the command's door."""

from tooling.bench.ingest import Command

__all__ = ["Command"]

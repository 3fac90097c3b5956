"""``python manage.py bench_node``: measure a simulator node's throughput.

Starts a node process (instant profile) on a free loopback port, drives it
with keep-alive connections from this process and prints one JSON object."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from tooling.simulator.bench import run_bench


class Command(BaseCommand):
    help = "Benchmark a simulator node process and print requests per second as JSON."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--seconds", type=float, default=5.0)
        parser.add_argument("--concurrency", type=int, default=32)
        parser.add_argument(
            "--stream-seconds", type=float, default=1.0, help="a short streamed run; 0 skips it"
        )

    def handle(self, *args, **options) -> None:
        if options["seconds"] <= 0 or options["concurrency"] < 1:
            raise CommandError("--seconds must be positive and --concurrency at least 1.")
        try:
            result = run_bench(
                seconds=options["seconds"],
                concurrency=options["concurrency"],
                stream_seconds=max(0.0, options["stream_seconds"]),
            )
        except RuntimeError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(json.dumps(result))

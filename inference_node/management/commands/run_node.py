"""``python manage.py run_node``: run the bundled simulator inference node.

A thin wrapper over ``python -m tooling.simulator``; both take the same flags."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from tooling.simulator.app import run
from tooling.simulator.config import add_node_arguments, config_from_options


class Command(BaseCommand):
    help = "Run the simulator inference node (OpenAI-compatible, vLLM-like) until Ctrl-C."

    def add_arguments(self, parser) -> None:
        add_node_arguments(parser)

    def handle(self, *args, **options) -> None:
        try:
            config = config_from_options(options)
        except ValueError as error:
            raise CommandError(str(error)) from None
        run(config, out=self.stdout)

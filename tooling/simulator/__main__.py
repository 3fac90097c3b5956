"""``python -m tooling.simulator [flags]``: run a simulator node (same flags as run_node)."""

from __future__ import annotations

import argparse
import sys

from .app import run
from .config import add_node_arguments, config_from_options


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tooling.simulator", description=__doc__)
    add_node_arguments(parser)
    options = vars(parser.parse_args(argv))
    try:
        config = config_from_options(options)
    except ValueError as error:
        parser.error(str(error))
    run(config)


if __name__ == "__main__":
    main(sys.argv[1:])

"""``python -m tooling.bench.profiled FILE <uvicorn arguments>``: uvicorn under
cProfile, its stats written to FILE when it stops (``bench_gateway --profile``).

uvicorn re-raises the SIGTERM or SIGINT that stopped it once it has shut down,
under the handler that was there before it started: this module's, which
writes the stats and exits (``python -m cProfile`` would be killed first)."""

from __future__ import annotations

import cProfile
import signal
import sys

import uvicorn.main


def main() -> None:
    path, args = sys.argv[1], sys.argv[2:]
    profiler = cProfile.Profile()

    def stop(signum: int, _frame: object) -> None:
        profiler.disable()
        profiler.dump_stats(path)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    profiler.enable()
    try:
        uvicorn.main.main(args, standalone_mode=False)
    finally:
        profiler.disable()
        profiler.dump_stats(path)


if __name__ == "__main__":
    main()

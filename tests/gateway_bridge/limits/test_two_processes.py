"""Two processes sharing Redis never admit more than the cap between them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from gateway_bridge.limits import RedisLimitStore
from tests.gateway_bridge.limits.conftest import flush_redis, redis_url, require_redis
from tests.gateway_bridge.limits.contender import CAP_KEY

ROOT = Path(__file__).resolve().parents[3]


def test_two_processes_on_one_cap_never_admit_more_than_it_holds():
    require_redis()
    flush_redis()
    worst, fits = 10_000, 150
    limit = fits * worst + worst // 2

    async def seed():
        store = RedisLimitStore.from_url(redis_url())
        await store.seed(CAP_KEY, 0, 3600)
        await store.close()

    async def snapshot():
        store = RedisLimitStore.from_url(redis_url())
        try:
            return await store.snapshot(CAP_KEY)
        finally:
            await store.close()

    asyncio.run(seed())
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.gateway_bridge.limits.contender",
                redis_url(),
                name,
                "200",
                str(worst),
                str(limit),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("p1", "p2")
    ]
    for proc in procs:  # both connected and waiting
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out)["admitted"])
    try:
        used, reserved = asyncio.run(snapshot())
    finally:
        flush_redis()
    # Every admitted call was settled at its full worst case: exactly the
    # calls that fit got through, shared between the two processes.
    assert sum(results) == fits, results
    assert all(r > 0 for r in results), results  # both really competed
    assert (used, reserved) == (fits * worst, 0)

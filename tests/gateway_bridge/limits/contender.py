"""One gateway-like process for the two-process overspend test: connect,
print "ready", wait for a line on stdin, then fire concurrent admissions (arriving
over 0.2 s) at
one cap in Redis, settle every admitted call at its full worst case, and
print how many got through (JSON).

    python -m tests.gateway_bridge.limits.contender URL NAME CALLS WORST LIMIT
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

from gateway_bridge.limits import CapBucket, RedisLimitStore
from gateway_bridge.protocols.base import GatewayError

CAP_KEY = "cap:k:77:d:2026-12-02"
SPREAD_S = 0.2


async def main(url: str, name: str, calls: int, worst: int, limit: int) -> dict:
    store = RedisLimitStore.from_url(url)
    cap = CapBucket("key_daily_cap_exceeded", CAP_KEY, limit, 3600)
    await store.snapshot(CAP_KEY)  # connected
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)

    rng = random.Random(name)

    async def call(i: int) -> bool:
        rid = f"{name}-{i}"
        await asyncio.sleep(rng.random() * SPREAD_S)  # arrivals over a short stretch
        try:
            await store.admit(rid, worst, [cap], [], 0, hold_seconds=60)
        except GatewayError:
            return False
        await asyncio.sleep(0)
        await store.settle(rid, worst, 0)
        return True

    try:
        admitted = sum(await asyncio.gather(*(call(i) for i in range(calls))))
    finally:
        await store.close()
    return {"admitted": admitted}


if __name__ == "__main__":
    url, name, calls, worst, limit = sys.argv[1:6]
    out = asyncio.run(main(url, name, int(calls), int(worst), int(limit)))
    print(json.dumps(out))

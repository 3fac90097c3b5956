"""``uvicorn --workers 2``: whichever worker a scrape reaches, ``/metrics``
shows the whole host (issue 20: eight scrapes used to answer absent, 20,
absent, 20, ... as each worker reported only itself)."""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from tests.gateway_bridge.harness import METRICS_TOKEN, gateway_process

CALLS = 20
BODY = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
REQUESTS = (
    'gateway_requests_total{protocol="openai",endpoint="chat.completions",'
    'model="sim-chat-small",status="200"}'
)


def call(url: str, raw: str) -> int:
    req = urllib.request.Request(  # noqa: S310 - a local test gateway
        f"{url}/v1/chat/completions",
        data=json.dumps(BODY).encode(),
        headers={"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310
        return resp.status


def scrape(url: str) -> dict[str, float]:
    # A new connection each time: the kernel hands it to either worker.
    req = urllib.request.Request(  # noqa: S310 - a local test gateway
        f"{url}/metrics",
        headers={"Authorization": f"Bearer {METRICS_TOKEN}", "Connection": "close"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def wait_for(url: str, ok, timeout: float = 20.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        got = scrape(url)
        if ok(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_every_scrape_of_two_workers_shows_the_whole_host(tenant, tmp_path, gateway_settings):
    metrics_dir = tmp_path / "metrics"
    with gateway_process(tmp_path / "gw", workers=2, GATEWAY_METRICS_DIR=str(metrics_dir)) as gw:
        # both workers up (each reports itself within a second of starting)
        assert wait_for(gw.url, lambda m: m.get("gateway_processes") == 2)["gateway_processes"] == 2
        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(lambda _: call(gw.url, tenant.raw), range(CALLS)))
        assert statuses == [200] * CALLS
        # the other worker's snapshot is at most a second old
        wait_for(gw.url, lambda m: m.get(REQUESTS) == CALLS)
        scrapes = [scrape(gw.url) for _ in range(8)]
        served = {
            path.name: sum(
                row[1] for row in json.loads(path.read_text())["counters"]["gateway_requests_total"]
            )
            for path in metrics_dir.glob("gw-*.json")
        }
    totals = [m.get(REQUESTS) for m in scrapes]
    assert totals == [CALLS] * 8, (totals, served)
    assert [m["gateway_processes"] for m in scrapes] == [2] * 8
    events = [m.get("gateway_usage_events_total") for m in scrapes]
    assert events == [events[0]] * 8 and events[0] >= CALLS
    assert len(served) == 2 and sum(served.values()) == CALLS
    assert all(m["process_resident_memory_bytes"] > 0 for m in scrapes)

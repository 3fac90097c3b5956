"""``bench_gateway``'s cache-affinity figure: four simulator nodes (realistic
latency profile, bounded prefix caches) and many tenants with long system
prompts, routed by prefix affinity and by round robin; for each, the prefix
cache hit rate (from the nodes' own counters) and the TTFT p50."""

from __future__ import annotations

import random
import signal
import subprocess
import time

from inference_node.facade import Node, NodeHealth, NodeStatus, seed_node_model
from tooling.bench.gateway_procs import (
    NODE_TOKEN,
    http_get,
    http_post,
    metric_total,
    run_load,
    start_node,
)

AFFINITY_MODEL = "bench-affinity"
RR_MODEL = "bench-round-robin"
NODES = 4
CACHE_BLOCKS = 600


def _start_nodes(org, procs: list[subprocess.Popen], nodes: list[tuple[Node, str]]) -> None:
    """The four nodes, registered for the organization under both models: each
    process in ``procs`` as soon as it runs, each node in ``nodes`` once
    registered (so that a failure half way stops and removes what was made)."""
    for i in range(NODES):
        proc, url = start_node(
            "--profile", "realistic", "--prefix-cache-blocks", str(CACHE_BLOCKS), "--seed", str(i),
            "--jitter", "0",
        )  # fmt: skip
        procs.append(proc)
        node = Node.objects.create(
            organization=org, name=f"bench-affinity-{i}", base_url=url, token=NODE_TOKEN,
            status=NodeStatus.ACTIVE, health=NodeHealth.HEALTHY, max_concurrency=256,
        )  # fmt: skip
        for public in (AFFINITY_MODEL, RR_MODEL):
            seed_node_model(node.pk, public, upstream_name="sim-chat-small", context_window=8192)
        nodes.append((node, url))


def _bodies(tenant_count: int) -> dict[str, list[dict]]:
    """The same calls for each model: the tenants' long system prompts in a random order."""
    rng = random.Random(7)  # noqa: S311 - benchmark text, not secrets
    words = [f"w{n}" for n in range(5000)]
    tenants = [
        # ~900 tokens each (56 cache blocks): the six tenants a node gets by
        # affinity fit its 600 blocks, all 24 (1,344 blocks) do not
        " ".join(rng.choice(words) for _ in range(500))
        for _ in range(tenant_count)
    ]
    # Tenants in a random order: in a fixed cycle whose length the node count
    # divides, round robin would send each tenant to one node, by accident.
    order = [rng.randrange(len(tenants)) for _ in range(tenant_count * 8)]
    bodies_for = {}
    for model in (RR_MODEL, AFFINITY_MODEL):
        bodies = []
        for i, t in enumerate(order):
            tenant = tenants[t]
            bodies.append(
                {
                    "model": model,
                    "messages": [
                        {
                            "role": "system",
                            "content": f"You are tenant {t}. {tenant}",
                        },
                        {"role": "user", "content": f"Question {i}: what is {i} + {i}?"},
                    ],
                    "max_tokens": 4,
                    "stream": True,
                }
            )
        bodies_for[model] = bodies
    return bodies_for


def _measure(urls: list[str], gw: str, auth: dict, bodies: list[dict], seconds: float) -> dict:
    """One routing's figures, from caches emptied first."""
    for url in urls:
        http_post(f"{url}/admin/reset", {}, {"Authorization": f"Bearer {NODE_TOKEN}"})
    result = run_load(
        f"{gw}/v1/chat/completions", bodies=bodies, headers=auth,
        concurrency=32, seconds=seconds, stream=True, warmup=2.0,
    )  # fmt: skip
    queries = hits = 0.0
    for url in urls:
        text = http_get(f"{url}/metrics").decode()
        queries += metric_total(text, "vllm:prefix_cache_queries_total")
        hits += metric_total(text, "vllm:prefix_cache_hits_total")
    return {
        "prefix_cache_hit_rate": round(hits / queries, 4) if queries else None,
        "ttft_p50_ms": result.get("ttft_p50_ms"),
        "p50_ms": result.get("p50_ms"),
        "requests_per_second": result.get("requests_per_second"),
        "errors": result.get("errors"),
        "error_kinds": result.get("error_kinds"),
    }


def cache_affinity(org, gw: str, auth: dict, *, tenants: int, seconds: float) -> dict:
    """The figure, through the gateway at ``gw`` with the key in ``auth``; the
    nodes are stopped and unregistered after."""
    nodes: list[tuple[Node, str]] = []
    procs: list[subprocess.Popen] = []
    try:
        _start_nodes(org, procs, nodes)
        time.sleep(2.5)  # the gateway's node snapshot refreshes every second
        bodies_for = _bodies(tenants)
        urls = [url for _, url in nodes]
        out: dict = {"nodes": NODES, "tenants": tenants}
        out["prefix_cache_blocks_per_node"] = CACHE_BLOCKS
        for label, model in (("round_robin", RR_MODEL), ("prefix_affinity", AFFINITY_MODEL)):
            out[label] = _measure(urls, gw, auth, bodies_for[model], seconds)
        return out
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        Node.objects.filter(pk__in=[n.pk for n, _ in nodes]).delete()

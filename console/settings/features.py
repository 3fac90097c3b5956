"""Alerts, inference-node probing and outbound webhooks, with their beat tasks."""

from __future__ import annotations

from console.kernel import config
from console.settings.workers import CELERY_BEAT_SCHEDULE

# --- alerts ---------------------------------------------------------------
# Every enabled alert rule is evaluated once a minute (console.features.alerts.services.evaluate).
CELERY_BEAT_SCHEDULE["alerts-evaluate"] = {
    "task": "alerts.evaluate",
    "schedule": 60.0,
    "options": {"expires": 55.0},
}

# --- inference nodes ------------------------------------------------------
# How often beat probes every active and draining node, how long one request
# of a probe may take, and how many probes in a row flip a node's health.
NODE_PROBE_INTERVAL_SECONDS = config.env_int("NODE_PROBE_INTERVAL_SECONDS", 5, minimum=1)
NODE_PROBE_TIMEOUT_SECONDS = config.env_int("NODE_PROBE_TIMEOUT_SECONDS", 2, minimum=1)
NODE_UNHEALTHY_AFTER = config.env_int("NODE_UNHEALTHY_AFTER", 3, minimum=1)
NODE_HEALTHY_AFTER = config.env_int("NODE_HEALTHY_AFTER", 2, minimum=1)
NODE_PROBE_CONCURRENCY = config.env_int("NODE_PROBE_CONCURRENCY", 50, minimum=1)
# Whether organizations' nodes may be on private, loopback, link-local or other
# non-public addresses (the gateway and the prober would call them from inside
# this network). Off unless staff turn it on; shared platform nodes are never limited.
NODE_ALLOW_PRIVATE_URLS = config.env_bool("NODE_ALLOW_PRIVATE_URLS", False)
CELERY_BEAT_SCHEDULE["inference-node-probe"] = {
    "task": "inference_node.probe_nodes",
    "schedule": float(NODE_PROBE_INTERVAL_SECONDS),
    # A round nobody picked up in time is stale; the next one replaces it.
    "options": {"expires": float(NODE_PROBE_INTERVAL_SECONDS)},
}

# --- outbound webhooks (issue 21: console.features.webhooks) ---------------------------
# One POST to a destination: seconds to connect, and for the whole exchange.
WEBHOOK_CONNECT_TIMEOUT_SECONDS = config.env_float(
    "WEBHOOK_CONNECT_TIMEOUT_SECONDS", 5.0, minimum=0.1
)
WEBHOOK_TIMEOUT_SECONDS = config.env_float("WEBHOOK_TIMEOUT_SECONDS", 10.0, minimum=0.1)
# Retries: exponential backoff with full jitter (a random wait up to
# base * 2**attempt, at most the cap) for this many hours, then abandoned.
WEBHOOK_RETRY_BASE_SECONDS = config.env_float("WEBHOOK_RETRY_BASE_SECONDS", 30.0, minimum=0.1)
WEBHOOK_RETRY_MAX_DELAY_SECONDS = config.env_float(
    "WEBHOOK_RETRY_MAX_DELAY_SECONDS", 3600.0, minimum=1
)
WEBHOOK_RETRY_HOURS = config.env_float("WEBHOOK_RETRY_HOURS", 24.0, minimum=0)
# A destination is marked failing after this many failed attempts in a row.
WEBHOOK_FAILING_AFTER = config.env_int("WEBHOOK_FAILING_AFTER", 5, minimum=1)
# How often beat sends the deliveries whose retry is due.
WEBHOOK_SWEEP_SECONDS = config.env_float("WEBHOOK_SWEEP_SECONDS", 30.0, minimum=1)
CELERY_BEAT_SCHEDULE["webhooks-deliver-due"] = {
    "task": "webhooks.deliver_due",
    "schedule": WEBHOOK_SWEEP_SECONDS,
    "options": {"expires": WEBHOOK_SWEEP_SECONDS},
}

"""The Nodes tab's registry charts: health over the range from the prober's
flips, and load as last probed; an organization sees its own nodes and the
shared ones, never another organization's."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from accounts.audit import audit_record
from accounts.models import Role
from console.features.analytics.nodes import health_segments
from inference_node.models import Node, NodeHealth
from tests.console.test_analytics_views import figure_of, login
from tests.inference_node.factories import NodeFactory

pytest_plugins = ["tests.console.test_analytics_data"]
pytestmark = pytest.mark.django_db

T0 = datetime(2025, 2, 3, tzinfo=UTC)
RANGE = {"range": "custom", "from": "2025-02-03T00:00", "to": "2025-02-05T00:00"}


def flip(node: Node, at: datetime, before: str, after: str) -> None:
    audit_record(
        actor=None,
        action=f"node.{after}",
        target=node,
        organization=node.organization,
        params={"from": before, "to": after},
    )
    from accounts.models import AuditEvent

    AuditEvent.objects.filter(target_id=str(node.pk)).filter(created_at__gt=at).update(
        created_at=at
    )


def test_segments_cover_the_range_from_the_flips():
    node = Node(health=NodeHealth.HEALTHY)
    start, end = T0, T0 + timedelta(hours=10)
    flips = [
        (T0 - timedelta(hours=1), "unknown", "healthy"),
        (T0 + timedelta(hours=2), "healthy", "unhealthy"),
        (T0 + timedelta(hours=3), "unhealthy", "healthy"),
    ]
    assert health_segments(node, flips, start, end) == [
        (start, T0 + timedelta(hours=2), "healthy"),
        (T0 + timedelta(hours=2), T0 + timedelta(hours=3), "unhealthy"),
        (T0 + timedelta(hours=3), end, "healthy"),
    ]
    # no flip at all: the node's current health, all along
    assert health_segments(node, [], start, end) == [(start, end, "healthy")]


def test_health_timeline_and_load_show_own_and_shared_nodes_only(client, data, other):
    own = NodeFactory(organization=data.org, name="own-gpu", running=3, waiting=1)
    NodeFactory(organization=None, name="shared-gpu", kv_cache_usage=0.25)
    theirs = NodeFactory(organization=other.org, name="their-gpu")
    flip(own, T0 + timedelta(hours=5), "healthy", "unhealthy")
    flip(own, T0 + timedelta(hours=6), "unhealthy", "healthy")
    flip(theirs, T0 + timedelta(hours=5), "healthy", "unhealthy")
    login(client, data, Role.VIEWER)

    url = reverse("analytics:chart_node_health")
    fig = figure_of(client.get(url, RANGE))
    names = {y for trace in fig["data"] for y in trace["y"]}
    assert {"own-gpu", "shared-gpu"} <= names and "their-gpu" not in names
    rows = list(
        csv.DictReader(
            io.StringIO(client.get(url, {**RANGE, "format": "csv"}).content.decode("utf-8-sig"))
        )
    )
    mine = [(r["state"], int(r["seconds"])) for r in rows if r["node"] == "own-gpu"]
    assert mine == [("healthy", 5 * 3600), ("unhealthy", 3600), ("healthy", 42 * 3600)]
    assert not [r for r in rows if r["node"] == "their-gpu"]

    url = reverse("analytics:chart_node_load")
    rows = list(
        csv.DictReader(
            io.StringIO(client.get(url, {**RANGE, "format": "csv"}).content.decode("utf-8-sig"))
        )
    )
    by_node = {r["node"]: r for r in rows}
    assert set(by_node) >= {"own-gpu", "shared-gpu"} and "their-gpu" not in by_node
    assert (by_node["own-gpu"]["running"], by_node["own-gpu"]["waiting"]) == ("3", "1")
    assert by_node["shared-gpu"]["kv_cache_usage_pct"] == "25.0"
    html = client.get(url, RANGE).content.decode()
    assert "own-gpu" in html and "their-gpu" not in html


# --- circuit-breaker openings (Errors page) ---------------------------------------------


def transition(node, at, state, *, gateway="gw-1:100", calls=120, errors=40, reason="error_rate"):
    from inference_node.health import record_circuit_events

    record_circuit_events(
        [
            {
                "id": f"{node.pk}-{state}-{at.timestamp()}-{gateway}",
                "node_id": node.pk,
                "node": node.name,
                "state": state,
                "reason": reason if state == "open" else "probe_succeeded",
                "calls": calls if state == "open" else 0,
                "errors": errors if state == "open" else 0,
                "gateway": gateway,
                "at": at.timestamp(),
            }
        ]
    )


def test_circuit_openings_show_own_and_shared_nodes_with_how_long_they_stayed_open(
    client, data, other
):
    own = NodeFactory(organization=data.org, name="own-gpu")
    shared = NodeFactory(organization=None, name="shared-gpu")
    theirs = NodeFactory(organization=other.org, name="their-gpu")
    transition(own, T0 + timedelta(hours=5), "open")
    transition(own, T0 + timedelta(hours=5, seconds=30), "closed")
    # Another gateway process opened the same node's circuit at the same time.
    transition(own, T0 + timedelta(hours=5, seconds=2), "open", gateway="gw-2:7", calls=100)
    transition(shared, T0 + timedelta(hours=30), "open", reason="probe_failed", calls=0)
    transition(theirs, T0 + timedelta(hours=5), "open")
    transition(own, T0 - timedelta(hours=1), "open")  # before the range
    login(client, data, Role.VIEWER)

    url = reverse("analytics:chart_circuit_openings")
    fig = figure_of(client.get(url, RANGE))
    drawn = sorted((t["name"], y) for t in fig["data"] for y in t["y"])
    assert drawn == [
        ("Error rate over the window", "own-gpu"),
        ("Error rate over the window", "own-gpu"),
        ("Half-open probe failed", "shared-gpu"),
    ]
    rows = list(
        csv.DictReader(
            io.StringIO(client.get(url, {**RANGE, "format": "csv"}).content.decode("utf-8-sig"))
        )
    )
    got = [(r["node"], r["gateway"], r["error_rate_pct"], r["seconds_open"]) for r in rows]
    assert got == [
        ("own-gpu", "gw-1:100", "33.3", "30.0"),
        ("own-gpu", "gw-2:7", "40.0", ""),  # still open: its gateway never closed it
        ("shared-gpu", "gw-1:100", "", ""),
    ]
    # The page carries the chart; another organization's node is never named.
    page = client.get(reverse("analytics:errors"), RANGE).content.decode()
    assert reverse("analytics:chart_circuit_openings") in page
    assert "their-gpu" not in client.get(url, {**RANGE, "format": "csv"}).content.decode()


def test_no_openings_says_so(client, data):
    NodeFactory(organization=data.org, name="own-gpu")
    login(client, data, Role.DEVELOPER)
    r = client.get(reverse("analytics:chart_circuit_openings"), RANGE)
    assert r.status_code == 200
    assert "No circuit opened between" in r.content.decode()

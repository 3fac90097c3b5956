"""Circuit transitions reported by the gateways become audit events, dated when
the gateway saw them, once each however often a batch is delivered."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accounts.models import AuditEvent
from inference_node.tasks import record_circuit_events
from tests.factories import OrganizationFactory
from tests.inference_node.factories import NodeFactory

pytestmark = pytest.mark.django_db
AT = datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)


def opened(node, **extra):
    return {
        "id": "a1b2",
        "node_id": node.pk,
        "node": node.name,
        "state": "open",
        "reason": "error_rate",
        "calls": 150,
        "errors": 30,
        "gateway": "host-1:4242",
        "at": AT.timestamp(),
        **extra,
    }


def test_an_opening_is_audited_once_with_its_time_and_window():
    org = OrganizationFactory()
    node = NodeFactory(organization=org, name="gpu-a")
    batch = [
        opened(node),
        {**opened(node), "id": "c3d4", "state": "closed", "at": AT.timestamp() + 31},
    ]
    assert record_circuit_events.apply(args=[batch]).get() == 2
    assert record_circuit_events.apply(args=[batch]).get() == 0  # redelivered: nothing new
    events = list(AuditEvent.objects.filter(target_id=str(node.pk)).order_by("created_at"))
    assert [e.action for e in events] == ["node.circuit_opened", "node.circuit_closed"]
    first = events[0]
    assert first.organization_id == org.pk and first.actor_label == "system"
    assert first.created_at == AT
    assert first.params == {
        "id": "a1b2", "gateway": "host-1:4242", "reason": "error_rate", "calls": 150, "errors": 30,
    }  # fmt: skip


def test_unknown_nodes_and_malformed_transitions_are_skipped():
    node = NodeFactory(organization=None)
    batch = [
        opened(node, node_id=10**9),  # deleted since
        opened(node, state="sideways"),
        {"node_id": node.pk},
        opened(node, at="yesterday"),
        opened(node, id="ok"),
    ]
    assert record_circuit_events.apply(args=[batch]).get() == 1
    (event,) = AuditEvent.objects.filter(action="node.circuit_opened")
    assert event.organization_id is None  # a shared node's shows in the admin

"""Builders for the call-log tests: two organizations with members of every
role, keys, sub-accounts and nodes, and call records written directly with
``bulk_create`` (ingest is tested elsewhere)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from accounts.actors import Actor
from accounts.models import ApiKey, Membership, Organization, Role, SubAccount
from inference_node.models import Node
from tests.factories import MembershipFactory, OrganizationFactory, SubAccountFactory, issue_key
from usage.models import CallRecord

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
_ids = itertools.count(1)


def call(org: Organization, key: ApiKey, *, started_at: datetime = T0, **fields) -> CallRecord:
    """An unsaved call record of ``key`` with plausible defaults."""
    latency = fields.pop("latency_us", 420_000)
    values = {
        "request_id": f"req-{next(_ids):09d}",
        "organization_id": org.pk,
        "sub_account_id": key.sub_account_id,
        "api_key_id": key.pk,
        "model": "gpt-test",
        "protocol": "openai",
        "endpoint": "/v1/chat/completions",
        "stream": False,
        "status_code": 200,
        "input_tokens": 1200,
        "cache_read_tokens": 300,
        "cache_write_tokens": 50,
        "output_tokens": 400,
        "reasoning_tokens": 40,
        "started_at": started_at,
        "finished_at": started_at + timedelta(microseconds=latency),
        "ttft_us": 95_500,
        "latency_us": latency,
        "upstream_us": latency - 20_000,
        "overhead_us": 12_000,
        "queue_us": 8_000,
        "client_ip": "198.51.100.7",
        "currency": org.currency,
        "cost": 2_345,
        "priced": True,
    }
    values.update(fields)
    return CallRecord(**values)


def save(calls: list[CallRecord]) -> list[CallRecord]:
    CallRecord.objects.bulk_create(calls, batch_size=2000)
    return calls


@dataclass
class Tenant:
    org: Organization
    members: dict[str, Membership]
    sub: SubAccount
    key: ApiKey  # the owner's key, under ``sub``
    org_key: ApiKey  # the owner's key, org-wide
    dev_key: ApiKey  # the developer's own key
    node: Node
    calls: list[CallRecord] = field(default_factory=list)

    def actor(self, role: str = Role.OWNER) -> Actor:
        return Actor(self.members[role])


def tenant(name: str, slug: str, *, timezone: str = "UTC", node_name: str = "gpu-a") -> Tenant:
    org = OrganizationFactory(name=name, slug=slug, timezone=timezone)
    members = {role: MembershipFactory(organization=org, role=role) for role in Role.values}
    owner = Actor(members[Role.OWNER])
    sub = SubAccountFactory(organization=org, name=f"{slug}-research")
    sub.members.add(members[Role.DEVELOPER])
    key, _ = issue_key(owner, name=f"{slug}-svc", sub_account_id=sub.pk)
    org_key, _ = issue_key(owner, name=f"{slug}-batch")
    dev_key, _ = issue_key(Actor(members[Role.DEVELOPER]), name=f"{slug}-dev")
    node = Node.objects.create(organization=org, name=node_name, base_url="http://10.0.0.5:8000")
    return Tenant(org, members, sub, key, org_key, dev_key, node)


def mixed_calls(t: Tenant, *, start: datetime = T0) -> list[CallRecord]:
    """A spread of calls over one tenant's keys, models, nodes, statuses and
    latencies, one minute apart, newest first when sorted."""
    specs = [
        (t.key, "gpt-test", 200, 300_000),
        (t.key, "gpt-test", 429, 5_000),
        (t.org_key, "llama-70b", 200, 1_500_000),
        (t.org_key, "llama-70b", 500, 2_500_000),
        (t.dev_key, "gpt-test", 200, 800_000),
        (t.dev_key, "llama-70b", 404, 20_000),
        (t.key, "gpt-test", 201, 650_000),
        (t.dev_key, "gpt-test", 503, 3_100_000),
    ]
    out = []
    for i, (key, model, status, latency) in enumerate(specs):
        out.append(
            call(
                t.org,
                key,
                started_at=start + timedelta(minutes=i),
                model=model,
                status_code=status,
                latency_us=latency,
                node_id=t.node.pk if i % 2 == 0 else None,
                error_type="" if status < 400 else "upstream_error",
                cost=1_000 + 17 * i,
            )
        )
    t.calls = save(out)
    return out


def login(client, t, role=None):
    """``client`` logged in as the member of tenant ``t`` with ``role`` (owner by default)."""
    from accounts.models import Role

    client.force_login(t.members[role or Role.OWNER].user)
    return client

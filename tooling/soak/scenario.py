"""The soak's tenants: created fresh for every run (their own organizations,
so the checks read only this run's calls), through the real services.

* ``soak-a`` — postpaid; two sub-accounts; a plain key, a key with an IP
  allowlist that admits loopback, a key with a tight RPM limit, a key with an
  allowlist that excludes loopback (its calls are refused with 403), and the key
  revoked mid-run.
* ``soak-b`` — prepaid, with a balance meant to run out during the run.
* ``soak-c`` — postpaid with a capped sub-account (daily cap), a key with a
  monthly cap, and the burst key: a lifetime cap that admits about fifty calls,
  hit by a hundred concurrent ones.
* ``soak-d`` — the hostile phase's flooding tenant (``--hostile``), kept out of
  the reconciled organizations.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from accounts.facade import (
    Actor,
    BillingMode,
    Membership,
    Organization,
    Role,
    User,
    api_key_issue,
    sub_account_create,
)
from console.kernel import redis_url
from inference_node.facade import Node, NodeHealth, NodeStatus, seed_node_model
from invoicing.facade import LedgerKind, ledger_entry_create
from tooling.soak.cluster import NODE_MODELS, NODE_TOKEN
from usage.facade import seed_catalog

# Long system prompts shared by many keys: prefix affinity sends each to the node
# that has it cached.
_TOPICS = ("billing support", "code review", "travel planning", "legal summaries")
SYSTEM_PROMPTS = [
    (
        f"You are an assistant for {topic}. Answer briefly and precisely. "
        + " ".join(f"Rule {i}: be accurate about {topic} detail number {i}." for i in range(40))
    )
    for topic in _TOPICS
]

#: The worst case of one burst call (max_tokens 16 plus the prompt estimate) is
#: about 70 micro-units at sim-chat-small's list price; the cap admits ~50 of them.
BURST_CAP = 3_500


@dataclass
class KeySpec:
    label: str
    org: str
    raw: str
    key_id: int
    model: str = "sim-chat-small"
    weight: int = 10  # share of the steady traffic
    system: str = ""
    caps: dict = field(default_factory=dict)  # field name -> micro-units


@dataclass
class Scenario:
    run: str
    orgs: dict  # label -> Organization
    subs: dict  # label -> SubAccount
    keys: dict  # label -> KeySpec
    actors: dict  # org label -> Actor (the owner)
    prepaid_balance: int
    node_ids: list[int]
    # The hostile phase's flooding tenant (an organization of its own, outside
    # ``orgs``: the checks reconcile the normal tenants).
    flooder: KeySpec | None = None

    def traffic_keys(self) -> list[KeySpec]:
        return [k for k in self.keys.values() if k.weight > 0]


def _owner(org):
    user, _ = User.objects.get_or_create(email=f"owner@{org.slug}.soak.invalid")
    membership = Membership.objects.create(user=user, organization=org, role=Role.OWNER)
    return Actor(membership, "127.0.0.1")


def _key(
    actor, label: str, org: str, *, weight: int, system: str, model="sim-chat-small", **fields
) -> KeySpec:

    key, raw = api_key_issue(actor=actor, name=label, **fields)
    caps = {
        f: fields[f]
        for f in ("spend_cap_daily", "spend_cap_monthly", "spend_cap_lifetime")
        if fields.get(f)
    }
    return KeySpec(label, org, raw, key.id, model=model, weight=weight, system=system, caps=caps)


def register_nodes(node_urls: list[str]) -> list[int]:
    """The simulator nodes as shared platform nodes (any organization routes to them)."""

    Node.objects.filter(organization=None, name__startswith="soak-node-").delete()
    ids = []
    for i, url in enumerate(node_urls):
        node = Node.objects.create(
            organization=None,
            name=f"soak-node-{i + 1}",
            base_url=url,
            token=NODE_TOKEN,
            status=NodeStatus.ACTIVE,
            health=NodeHealth.HEALTHY,
            max_concurrency=512,
        )
        for model in NODE_MODELS.split(","):
            seed_node_model(node.pk, model, upstream_name=model, context_window=8192)
        ids.append(node.id)
    return ids


def _clear_limit_state(orgs, subs, keys) -> None:
    """Drop limit buckets a previous database left in this Redis under the ids
    just created (a soak database recreated while Redis kept its keys): new
    tenants start from what their own database says."""

    client = redis_url.sync_client(settings.REDIS_URL)
    try:
        # Limits keys start with their organization's hash tag ("{o:3}cap:k:42:life").
        patterns = [f"*bal:o:{o.id}*" for o in orgs] + [f"*rl:o:{o.id}*" for o in orgs]
        patterns += [f"*cap:s:{s.id}:*" for s in subs] + [f"*rl:s:{s.id}*" for s in subs]
        patterns += [f"*cap:k:{k.key_id}:*" for k in keys] + [f"*rl:k:{k.key_id}*" for k in keys]
        for pattern in patterns:
            for name in client.scan_iter(pattern, count=1000):
                client.delete(name)
    finally:
        client.close()


@transaction.atomic
def create(node_urls: list[str], *, prepaid_balance: int) -> Scenario:
    seed_catalog()
    run = secrets.token_hex(3)
    orgs = {
        "a": Organization.objects.create(name=f"Soak A {run}", slug=f"soak-a-{run}"),
        "b": Organization.objects.create(
            name=f"Soak B {run}", slug=f"soak-b-{run}", billing_mode=BillingMode.PREPAID
        ),
        "c": Organization.objects.create(name=f"Soak C {run}", slug=f"soak-c-{run}"),
    }
    actors = {label: _owner(org) for label, org in orgs.items()}
    a, b, c = actors["a"], actors["b"], actors["c"]
    subs = {
        "a-team-1": sub_account_create(actor=a, name="team-1"),
        "a-team-2": sub_account_create(actor=a, name="team-2"),
        "b-main": sub_account_create(actor=b, name="main"),
        "c-capped": sub_account_create(actor=c, name="capped", spend_cap_daily=20_000),
    }
    loopback = ["127.0.0.1/32", "::1/128"]
    p = SYSTEM_PROMPTS
    keys = [
        _key(a, "a-plain", "a", weight=14, system=p[0], sub_account_id=subs["a-team-1"].id),
        _key(a, "a-allowlist", "a", weight=10, system=p[0], sub_account_id=subs["a-team-2"].id,
             ip_allowlist=loopback),
        _key(a, "a-rpm", "a", weight=6, system=p[1], rpm_limit=120),
        _key(a, "a-wrong-ip", "a", weight=1, system=p[1], ip_allowlist=["192.0.2.0/24"]),
        _key(a, "a-revoked", "a", weight=6, system=p[2]),
        _key(b, "b-prepaid", "b", weight=14, system=p[2], sub_account_id=subs["b-main"].id),
        _key(c, "c-daily", "c", weight=10, system=p[3], sub_account_id=subs["c-capped"].id),
        _key(c, "c-monthly", "c", weight=8, system=p[3], spend_cap_monthly=150_000,
             model="sim-chat-large"),
        _key(c, "c-burst", "c", weight=0, system=p[3], spend_cap_lifetime=BURST_CAP),
    ]  # fmt: skip
    ledger_entry_create(
        organization_id=orgs["b"].id,
        kind=LedgerKind.GRANT,
        amount=prepaid_balance,
        reference=f"soak-{run}",
        reason="soak opening balance",
    )
    _clear_limit_state(orgs.values(), subs.values(), keys)
    flooder_org = Organization.objects.create(name=f"Soak D {run}", slug=f"soak-d-{run}")
    flooder = _key(_owner(flooder_org), "d-flood", "d", weight=0, system="")
    return Scenario(
        run=run,
        orgs=orgs,
        subs=subs,
        keys={k.label: k for k in keys},
        actors=actors,
        prepaid_balance=prepaid_balance,
        node_ids=register_nodes(node_urls),
        flooder=flooder,
    )

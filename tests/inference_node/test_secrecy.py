"""No page or API answer ever shows a node token or an API key, and the
database never holds one in clear.

Given a tenant's vendor channel with a key and a token, changed every way the
console allows (so the audit log has an event of each kind), and a shared
channel with its own key, an owner, an org admin and the platform's staff walk
every page and API answer they can reach for them; the secrets appear in none.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.urls import reverse

from accounts.models import Role, User
from inference_node import services
from inference_node.facade import credential_refused
from inference_node.models import Credential, Node
from tests.factories import MembershipFactory
from tests.inference_node.vendor_helpers import FakeVendor

pytestmark = pytest.mark.django_db

TOKEN = "node-token-SECRET-0f0f0f0f0f"
KEY = "sk-SECRET-first-key-1a2b3c4d"
KEY2 = "sk-SECRET-second-key-5e6f7a8b"
SHARED_KEY = "sk-SECRET-platform-key-9c0d1e2f"
SECRETS = (TOKEN, KEY, KEY2, SHARED_KEY)


@pytest.fixture
def vendor():
    fake = FakeVendor("openai", KEY)
    yield fake
    fake.stop()


@pytest.fixture
def setup(org, owner, actor_for, vendor):
    actor = actor_for(owner)
    node = services.node_create(
        actor=actor,
        name="openai-byok",
        kind="openai",
        base_url=vendor.url,
        token=TOKEN,
        health_check="models",
        credentials=[{"secret": KEY, "label": "main"}],
        models=[
            {
                "public_name": "gpt-4.1",
                "cost_currency": "USD",
                "cost_input_per_mtok": 2,
                "cost_output_per_mtok": 8,
            }
        ],
    )
    second = services.credential_add(actor=actor, node_id=node.pk, secret=KEY2)
    services.credential_update(actor=actor, credential_id=second.pk, label="spare")
    services.credential_set_status(actor=actor, credential_id=second.pk, status="disabled")
    services.credential_set_status(actor=actor, credential_id=second.pk, status="active")
    services.node_update(actor=actor, node_id=node.pk, token=TOKEN + "x")
    services.node_update(actor=actor, node_id=node.pk, token=TOKEN)
    services.node_test(actor=actor, node_id=node.pk)
    credential_refused(credential_id=second.pk, status=401, message=f"Incorrect API key {KEY2}")
    shared = Node.objects.create(
        name="platform-openai", kind="openai", base_url="https://api.openai.com",
        health_check="models",
    )  # fmt: skip
    Credential.objects.create(node=shared, secret=SHARED_KEY, secret_hint="…1e2f")
    return node, second, shared


def _assert_clean(response, where):
    assert response.status_code in (200, 204), (where, response.status_code)
    body = response.content.decode()
    for secret in SECRETS:
        assert secret not in body, (where, secret[:12])
    return body


def _console_pages(node, key, shared):
    return [
        reverse("inference_node:nodes"),
        reverse("inference_node:node_create"),
        reverse("inference_node:node_detail", args=[node.pk]),  # with the edit form
        reverse("inference_node:node_detail", args=[shared.pk]),
        reverse("inference_node:credential_add", args=[node.pk]),
        reverse("inference_node:credential_edit", args=[node.pk, key.pk]),
        reverse("accounts:audit"),
        "/api/v1/nodes/",
        f"/api/v1/nodes/{node.pk}/",
        f"/api/v1/nodes/{node.pk}/credentials/",
        f"/api/v1/nodes/{shared.pk}/",
    ]


@pytest.mark.parametrize("role", [Role.OWNER, Role.ADMIN])
def test_no_page_or_api_answer_shows_a_secret(client, org, owner, setup, role):
    node, key, shared = setup
    member = owner if role == Role.OWNER else MembershipFactory(organization=org, role=role)
    client.force_login(member.user)
    for url in _console_pages(node, key, shared):
        body = _assert_clean(client.get(url), url)
        if url == reverse("accounts:audit"):
            assert "credential.disable" in body and "…7a8b" in body  # the hint is shown
    # What managers post back is answered without secrets too.
    _assert_clean(
        client.post(reverse("inference_node:node_test", args=[node.pk]), HTTP_HX_REQUEST="true"),
        "test now",
    )
    _assert_clean(
        client.post(f"/api/v1/nodes/{node.pk}/test/", content_type="application/json"), "api test"
    )
    _assert_clean(
        client.post(
            f"/api/v1/nodes/{node.pk}/credentials/{key.pk}/enable/",
            content_type="application/json",
        ),
        "api enable",
    )
    # A form sent back with errors does not echo the key typed into it.
    bad = client.post(
        reverse("inference_node:node_create"),
        {
            "name": "openai-byok",
            "preset": "openai",
            "credentials": KEY,
            "token": TOKEN,
            "weight": "1",
            "max_concurrency": "8",
        },
    )
    assert "already exists" in _assert_clean(bad, "create form with errors")


def test_the_platform_staff_admin_shows_no_secret(client, setup):
    node, _key, shared = setup
    staff = User.objects.create_superuser("staff@example.com", "staff-pass-123456")
    client.force_login(staff)
    for url in [
        reverse("admin:inference_node_node_changelist"),
        reverse("admin:inference_node_node_change", args=[node.pk]),
        reverse("admin:inference_node_node_change", args=[shared.pk]),
        reverse("admin:inference_node_node_add"),
        reverse("admin:accounts_auditevent_changelist"),
    ]:
        _assert_clean(client.get(url), url)
    change = client.get(reverse("admin:inference_node_node_change", args=[shared.pk]))
    assert "…1e2f" in change.content.decode()


def test_the_database_holds_no_secret_in_clear(setup):
    with connection.cursor() as cursor:
        cursor.execute("SELECT token FROM inference_node_node")
        tokens = [row[0] for row in cursor.fetchall()]
        cursor.execute("SELECT secret, secret_hint FROM inference_node_credential")
        keys = cursor.fetchall()
        cursor.execute("SELECT params, target_label FROM accounts_auditevent")
        audit = " ".join(f"{p} {t}" for p, t in cursor.fetchall())
    stored = " ".join(tokens + [f"{s} {h}" for s, h in keys])
    for secret in SECRETS:
        assert secret not in stored and secret not in audit, secret[:12]
    assert all(t.startswith("gAAAAA") for t in tokens if t)
    assert len(keys) == 3 and all(s.startswith("gAAAAA") for s, _ in keys)
    # …and the application still reads them back.
    assert {c.secret for c in Credential.objects.all()} == {KEY, KEY2, SHARED_KEY}

"""Console pages and REST API of the outbound webhooks: the signing secret
shown once, the URL masked, address rules as form errors, the role matrix,
send test, replay, and tenant isolation on every object route."""

from __future__ import annotations

import socket
from unittest import mock

import pytest
from django.urls import reverse

from accounts.models import Role
from console.features.webhooks.models import Delivery, DeliveryStatus, Destination, OutboundEvent
from console.features.webhooks.services import destination_create
from tests.factories import MembershipFactory, OrganizationFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(receiver):
    out = {}
    for tag in ("a", "b"):
        org = OrganizationFactory(name=f"Org {tag.upper()}")
        members = {role: MembershipFactory(organization=org, role=role) for role in Role.values}
        destination = Destination.objects.create(
            organization=org,
            name=f"hook-{tag}",
            kind="webhook",
            url=f"{receiver.url}&org={tag}",
            secret=f"whsec_{tag}_not_shown_0123456789",
            events=["all"],
        )
        event = OutboundEvent.objects.create(
            organization=org, event_id=f"evt-{tag}", type="invoice.paid", data={"number": tag}
        )
        delivery = Delivery.objects.create(
            event=event, destination=destination, status=DeliveryStatus.ABANDONED
        )
        out[tag] = {
            "org": org,
            "members": members,
            "destination": destination,
            "event": event,
            "delivery": delivery,
        }
    return out


def _login(client, membership):
    client.force_login(membership.user)
    return client


OBJECT_ROUTES = {
    "webhooks:destination_edit": lambda w: [w["destination"].pk],
    "webhooks:destination_delete": lambda w: [w["destination"].pk],
    "webhooks:destination_rotate": lambda w: [w["destination"].pk],
    "webhooks:destination_test": lambda w: [w["destination"].pk],
    "webhooks:delivery_replay": lambda w: [w["delivery"].pk],
}
API_OBJECT_ROUTES = {
    "webhook-destination-detail": lambda w: [w["destination"].pk],
    "webhook-destination-rotate-secret": lambda w: [w["destination"].pk],
    "webhook-destination-test": lambda w: [w["destination"].pk],
    "webhook-event-detail": lambda w: [w["event"].pk],
    "webhook-delivery-detail": lambda w: [w["delivery"].pk],
    "webhook-delivery-replay": lambda w: [w["delivery"].pk],
}
ISOLATED_ROUTES = set(OBJECT_ROUTES) | set(API_OBJECT_ROUTES)


def _state(world_tag):
    d = Destination.objects.get(pk=world_tag["destination"].pk)
    return (d.name, d.url, d.secret, d.enabled, Delivery.objects.filter(destination=d).count())


@pytest.mark.parametrize("route", sorted(OBJECT_ROUTES))
@pytest.mark.parametrize("method", ["get", "post"])
def test_another_orgs_owner_cannot_reach_console_objects(client, world, receiver, route, method):
    c = _login(client, world["b"]["members"][Role.OWNER])
    before = _state(world["a"])
    url = reverse(route, args=OBJECT_ROUTES[route](world["a"]))
    response = getattr(c, method)(url, {"name": "hijacked", "url": "http://x.example/"})
    assert response.status_code in (404, 405)
    assert _state(world["a"]) == before
    assert receiver.requests == []


@pytest.mark.parametrize("route", sorted(API_OBJECT_ROUTES))
@pytest.mark.parametrize("method", ["get", "post", "patch", "delete"])
def test_another_orgs_owner_cannot_reach_api_objects(client, world, receiver, route, method):
    c = _login(client, world["b"]["members"][Role.OWNER])
    before = _state(world["a"])
    url = reverse(route, args=API_OBJECT_ROUTES[route](world["a"]))
    response = getattr(c, method)(url, {"name": "hijacked"}, content_type="application/json")
    assert response.status_code in (404, 405)
    assert _state(world["a"]) == before
    assert receiver.requests == []


def test_lists_show_only_the_callers_organization(client, world):
    c = _login(client, world["a"]["members"][Role.FINANCE])
    names = [d["name"] for d in c.get("/api/v1/webhooks/destinations/").json()["results"]]
    events = [e["event_id"] for e in c.get("/api/v1/webhooks/events/").json()["results"]]
    deliveries = c.get("/api/v1/webhooks/deliveries/").json()["results"]
    assert names == ["hook-a"] and events == ["evt-a"]
    assert [d["event"]["event_id"] for d in deliveries] == ["evt-a"]
    page = c.get(reverse("webhooks:deliveries")).content.decode()
    assert "evt-a" in page and "evt-b" not in page


def test_the_signing_secret_is_shown_once_and_never_in_lists_or_reads(client, world, receiver):
    c = _login(client, world["a"]["members"][Role.ADMIN])
    created = c.post(
        "/api/v1/webhooks/destinations/",
        {"name": "Ours", "kind": "webhook", "url": receiver.url, "events": ["invoice.paid"]},
        content_type="application/json",
    )
    assert created.status_code == 201
    secret = created.json()["secret"]
    assert secret.startswith("whsec_")
    # The URL is shown as its scheme and host only.
    assert created.json()["url_display"] == f"http://127.0.0.1:{receiver.port}/…"
    pk = created.json()["id"]
    for body in (
        c.get("/api/v1/webhooks/destinations/").content,
        c.get(f"/api/v1/webhooks/destinations/{pk}/").content,
        c.get(reverse("webhooks:destinations")).content,
        c.get(reverse("webhooks:destination_edit", args=[pk])).content,
    ):
        assert secret.encode() not in body
        assert b"token=abc" not in body and b"hooks/inbound" not in body
    # Rotating shows the new one, once; deliveries are signed with it.
    rotated = c.post(f"/api/v1/webhooks/destinations/{pk}/rotate-secret/").json()["secret"]
    assert rotated != secret
    receiver.secret = rotated
    result = c.post(f"/api/v1/webhooks/destinations/{pk}/test/").json()
    assert result["status"] == "succeeded" and receiver.requests[-1]["verified"]


def _create(c, receiver, name: str):
    """The console's new-destination form, posted: a signed webhook to ``receiver``."""
    return c.post(
        reverse("webhooks:destination_create"),
        {"name": name, "kind": "webhook", "url": receiver.url, "events": ["all"], "language": "en"},
    )


def test_the_console_create_page_shows_the_secret_once(client, world, receiver):
    c = _login(client, world["a"]["members"][Role.OWNER])
    response = _create(c, receiver, "Mine")
    destination = Destination.objects.get(name="Mine")
    assert response.status_code == 200
    assert destination.secret in response.content.decode()
    assert destination.secret not in c.get(reverse("webhooks:destinations")).content.decode()


def _never_stored(response) -> bool:
    return response.get("Cache-Control") == "no-store"


def test_the_signing_secret_pages_are_never_stored_the_destination_pages_are_ordinary(
    client, world, receiver
):
    c = _login(client, world["a"]["members"][Role.OWNER])
    created = _create(c, receiver, "Kept")
    destination = Destination.objects.get(name="Kept")
    assert destination.secret in created.content.decode() and _never_stored(created)
    rotated = c.post(reverse("webhooks:destination_rotate", args=[destination.pk]))
    destination.refresh_from_db()
    assert destination.secret in rotated.content.decode() and _never_stored(rotated)
    for ordinary in (
        c.get(reverse("webhooks:destinations")),
        c.get(reverse("webhooks:destination_create")),
        c.get(reverse("webhooks:destination_edit", args=[destination.pk])),
    ):
        assert ordinary.status_code == 200 and not _never_stored(ordinary)


def test_api_answers_with_a_signing_secret_are_never_stored_reads_are_ordinary(
    client, world, receiver
):
    c = _login(client, world["a"]["members"][Role.ADMIN])
    created = c.post(
        "/api/v1/webhooks/destinations/",
        {"name": "Api", "kind": "webhook", "url": receiver.url, "events": ["all"]},
        content_type="application/json",
    )
    assert created.status_code == 201 and created.json()["secret"] and _never_stored(created)
    pk = created.json()["id"]
    rotated = c.post(f"/api/v1/webhooks/destinations/{pk}/rotate-secret/")
    assert rotated.status_code == 200 and rotated.json()["secret"] and _never_stored(rotated)
    for ordinary in (
        c.get("/api/v1/webhooks/destinations/"),
        c.get(f"/api/v1/webhooks/destinations/{pk}/"),
    ):
        assert ordinary.status_code == 200 and not _never_stored(ordinary)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://10.1.2.3/hook", "private"),
        ("http://169.254.169.254/latest", "metadata"),
        ("http://[::1]:8080/", "loopback"),
        ("http://localhost:9000/", "this machine"),
        ("https://hooks.internal-name.example/x", "127.0.0.1"),
        ("ftp://hooks.example.com/", "http://"),
    ],
)
def test_a_url_at_a_non_public_address_is_a_form_error(client, world, settings, url, says):
    settings.NODE_ALLOW_PRIVATE_URLS = False
    c = _login(client, world["a"]["members"][Role.OWNER])
    # The name resolves (mocked: nothing is looked up or connected to) to loopback.
    fake = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]
    with mock.patch("socket.getaddrinfo", return_value=fake):
        response = c.post(
            reverse("webhooks:destination_create"),
            {"name": "Bad", "kind": "slack", "url": url, "events": ["all"], "language": "en"},
        )
        api = c.post(
            "/api/v1/webhooks/destinations/",
            {"name": "Bad", "kind": "slack", "url": url, "events": ["all"]},
            content_type="application/json",
        )
    assert response.status_code == 200
    assert says in response.context["form"].errors["url"][0]
    assert api.status_code == 400 and not Destination.objects.filter(name="Bad").exists()


def test_a_public_name_is_accepted_and_rechecked_at_connect_time(
    client, world, settings, owner_actor_a
):
    settings.NODE_ALLOW_PRIVATE_URLS = False
    public = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 0))]
    with mock.patch("socket.getaddrinfo", return_value=public):
        destination, _ = destination_create(
            actor=owner_actor_a,
            name="Public",
            kind="webhook",
            url="https://hooks.example.com/in",
            events=["all"],
        )
    # Later the name points at loopback (DNS rebinding): the delivery is refused
    # before any connection, with the reason.
    rebound = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]
    with mock.patch("socket.getaddrinfo", return_value=rebound):
        result = client_post_test(client, world, destination)
    assert result["status"] == "failed"
    assert "non-public" in result["last_error"]


def client_post_test(client, world, destination):
    c = _login(client, world["a"]["members"][Role.OWNER])
    return c.post(f"/api/v1/webhooks/destinations/{destination.pk}/test/").json()


@pytest.fixture
def owner_actor_a(world, actor_for):
    return actor_for(world["a"]["members"][Role.OWNER])


def test_finance_reads_the_log_but_cannot_manage_destinations(client, world, receiver):
    c = _login(client, world["a"]["members"][Role.FINANCE])
    assert c.get(reverse("webhooks:destinations")).status_code == 200
    assert c.get(reverse("webhooks:deliveries")).status_code == 200
    assert c.get(reverse("webhooks:destination_create")).status_code == 403
    pk = world["a"]["delivery"].pk
    assert c.post(f"/api/v1/webhooks/deliveries/{pk}/replay/").status_code == 403
    assert (
        c.post(
            "/api/v1/webhooks/destinations/",
            {"name": "F", "kind": "webhook", "url": receiver.url, "events": ["all"]},
            content_type="application/json",
        ).status_code
        == 403
    )
    developer = _login(client, world["a"]["members"][Role.DEVELOPER])
    assert developer.get(reverse("webhooks:deliveries")).status_code == 403
    assert developer.get("/api/v1/webhooks/deliveries/").status_code == 403


def test_replay_makes_a_new_attempt_now_and_the_log_shows_it(client, world, receiver):
    receiver.secret = world["a"]["destination"].secret
    c = _login(client, world["a"]["members"][Role.OWNER])
    delivery = world["a"]["delivery"]
    response = c.post(reverse("webhooks:delivery_replay", args=[delivery.pk]))
    assert response.status_code == 302
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SUCCEEDED
    assert [r["verified"] for r in receiver.requests] == ["evt-a"]
    page = c.get(reverse("webhooks:deliveries"), {"status": "succeeded"}).content.decode()
    assert "HTTP 200" in page and "evt-a" in page
    assert (
        "evt-a" not in c.get(reverse("webhooks:deliveries"), {"status": "failed"}).content.decode()
    )


def test_send_test_page_shows_the_result(client, world, receiver):
    c = _login(client, world["a"]["members"][Role.OWNER])
    receiver.mode = "500"
    page = c.post(reverse("webhooks:destination_test", args=[world["a"]["destination"].pk]))
    assert page.status_code == 200 and "Not delivered: HTTP 500" in page.content.decode()


def test_a_bad_api_filter_is_a_400(client, world):
    c = _login(client, world["a"]["members"][Role.OWNER])
    assert c.get("/api/v1/webhooks/deliveries/", {"status": "nope"}).status_code == 400
    assert c.get("/api/v1/webhooks/deliveries/", {"destination": "x"}).status_code == 400


def test_an_out_of_range_destination_filter_is_an_empty_list(client, world):
    c = _login(client, world["a"]["members"][Role.OWNER])
    for value in ("-5", "99999999999999999999999"):
        response = c.get("/api/v1/webhooks/deliveries/", {"destination": value})
        assert response.status_code == 200 and response.json()["results"] == []

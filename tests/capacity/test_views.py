"""The capacity planning pages: who may start, see and cancel a load test,
its bounds, one run at a time per organization, and another organization's
tests out of reach."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from unittest import mock

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.actors import Actor
from console.features.capacity.models import LoadTest, LoadTestStep, Status
from tests.factories import issue_key
from usage.seed import seed_catalog

# The object routes tests/test_route_isolation.py expects a tenant case for.
ISOLATED_ROUTES = {
    "capacity:detail",
    "capacity:progress",
    "capacity:cancel",
    "load-test-detail",
    "load-test-cancel",
}

FORM = {
    "model": "sim-chat-small",
    "input_tokens": "256",
    "output_tokens": "32",
    "prefix_share": "50",
    "steps": "50, 100, 200, 400",
    "step_seconds": "30",
    "budget": "2.50",
}


@pytest.fixture(autouse=True)
def _catalog(db):
    seed_catalog()


def _client(client, membership):
    client.force_login(membership.user)
    return client


def _test(org, membership, **fields) -> LoadTest:
    values = {
        "organization": org, "started_by": membership, "model": "sim-chat-small",
        "input_tokens": 64, "output_tokens": 8, "prefix_share": 0, "steps": [2, 4, 8, 16],
        "step_seconds": 5, "budget": 1_000_000, **fields,
    }  # fmt: skip
    return LoadTest.objects.create(**values)


def test_an_owner_starts_a_test_on_the_load_test_queue(
    client, owner, settings, django_capture_on_commit_callbacks
):
    settings.CAPACITY_QUEUE = "loadtests"
    with (
        mock.patch("console.features.capacity.services.registered_task") as task,
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = _client(client, owner).post(reverse("capacity:list"), FORM)
    test = LoadTest.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("capacity:detail", args=[test.pk])
    assert (test.status, test.steps, test.budget) == (Status.QUEUED, [50, 100, 200, 400], 2_500_000)
    assert (test.started_by, test.prefix_share, test.step_seconds) == (owner, 50, 30)
    task.assert_called_once_with("capacity.run_load_test")
    task.return_value.apply_async.assert_called_once_with(args=[test.pk], queue="loadtests")

    assert "Budget (USD)" in client.get(reverse("capacity:list")).content.decode()
    page = client.get(response["Location"])
    assert page.status_code == 200
    assert b'id="load-test-progress"' in page.content
    assert b'hx-trigger="every 1s"' in page.content
    assert b'id="load-test-cancel"' in page.content


def test_a_second_test_in_the_same_organization_is_refused(client, owner, admin):
    _test(owner.organization, owner, status=Status.RUNNING)
    response = _client(client, admin).post(reverse("capacity:list"), FORM)
    assert response.status_code == 200
    assert b"A load test is already running in this organization" in response.content
    assert LoadTest.objects.count() == 1


def test_an_ended_test_does_not_block_the_next(client, owner):
    _test(owner.organization, owner, status=Status.DONE)
    _test(owner.organization, owner, status=Status.CANCELLED)
    with mock.patch("console.features.capacity.services.registered_task"):
        response = _client(client, owner).post(reverse("capacity:list"), FORM)
    assert response.status_code == 302
    assert LoadTest.objects.filter(status=Status.QUEUED).count() == 1


def test_a_test_another_organization_runs_blocks_nobody_here(client, owner, other_owner):
    _test(other_owner.organization, other_owner, status=Status.RUNNING)
    with mock.patch("console.features.capacity.services.registered_task"):
        response = _client(client, owner).post(reverse("capacity:list"), FORM)
    assert response.status_code == 302


def test_a_run_whose_worker_died_stops_blocking(client, owner):
    long_ago = timezone.now() - timedelta(hours=1)
    key, _raw = issue_key(Actor(owner, "127.0.0.1"), name="load test #1")
    stale = _test(
        owner.organization, owner, status=Status.RUNNING, started_at=long_ago, api_key_id=key.pk
    )
    with mock.patch("console.features.capacity.services.registered_task"):
        response = _client(client, owner).post(reverse("capacity:list"), FORM)
    assert response.status_code == 302
    stale.refresh_from_db()
    assert stale.status == Status.FAILED
    key.refresh_from_db()
    assert key.status == "revoked"  # its key with it


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"steps": "50, 100, 5000"}, "steps", b"between 1 and 400 concurrent clients"),
        ({"steps": "fifty"}, "steps", b"whole numbers separated by commas"),
        ({"steps": ", ,"}, "steps", b"at least one step"),
        ({"step_seconds": "2"}, "step_seconds", b"greater than or equal to 5"),
        ({"step_seconds": "121"}, "step_seconds", b"less than or equal to 120"),
        ({"steps": "1,2,3,4,5,6", "step_seconds": "120"}, "step_seconds", b"at most 600 seconds"),
        ({"prefix_share": "101"}, "prefix_share", b"less than or equal to 100"),
        ({"budget": "0"}, "budget", b"budget above zero"),
        ({"model": "no-such-model"}, "model", b"Select a valid choice"),
    ],
)
def test_bounds_are_form_errors(client, owner, change, field, message):
    response = _client(client, owner).post(reverse("capacity:list"), {**FORM, **change})
    assert response.status_code == 200
    assert f'id="field-{field}"'.encode() in response.content
    assert message in response.content
    assert not LoadTest.objects.exists()


@pytest.mark.parametrize("role", ["finance", "viewer"])
def test_members_who_are_not_owners_or_admins_see_results_but_cannot_start(
    client, request, owner, role
):
    member = request.getfixturevalue(role)
    test = _test(owner.organization, owner, status=Status.RUNNING)
    c = _client(client, member)
    page = c.get(reverse("capacity:list"))
    assert page.status_code == 200
    assert b'id="load-test-form"' not in page.content
    assert f'data-load-test="{test.pk}"'.encode() in page.content
    assert c.post(reverse("capacity:list"), FORM).status_code == 403
    assert c.post(reverse("capacity:cancel", args=[test.pk])).status_code == 403
    assert b'id="load-test-cancel"' not in c.get(reverse("capacity:detail", args=[test.pk])).content
    assert LoadTest.objects.count() == 1


def test_a_developer_cannot_open_the_pages(client, owner, developer):
    test = _test(owner.organization, owner)
    c = _client(client, developer)
    assert c.get(reverse("capacity:list")).status_code == 403
    assert c.get(reverse("capacity:detail", args=[test.pk])).status_code == 403


def test_another_organization_cannot_see_or_cancel_a_test(client, owner, other_owner):
    test = _test(owner.organization, owner, status=Status.RUNNING)
    c = _client(client, other_owner)
    assert (
        test.pk
        and f'data-load-test="{test.pk}"'.encode() not in c.get(reverse("capacity:list")).content
    )
    for name in ("capacity:detail", "capacity:progress"):
        assert c.get(reverse(name, args=[test.pk])).status_code == 404
    assert c.post(reverse("capacity:cancel", args=[test.pk])).status_code == 404
    test.refresh_from_db()
    assert (test.status, test.cancel_requested) == (Status.RUNNING, False)


def test_cancel_asks_a_running_test_to_stop_and_ends_a_queued_one(client, owner, admin):
    running = _test(owner.organization, owner, status=Status.RUNNING)
    response = _client(client, admin).post(
        reverse("capacity:cancel", args=[running.pk]), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    running.refresh_from_db()
    assert running.cancel_requested and running.status == Status.RUNNING  # the job ends it
    running.status = Status.DONE
    running.save()
    queued = _test(owner.organization, owner)
    client.post(reverse("capacity:cancel", args=[queued.pk]))
    queued.refresh_from_db()
    assert queued.status == Status.CANCELLED and queued.finished_at is not None
    # Cancelling an ended test changes nothing and is no error page.
    again = client.post(reverse("capacity:cancel", args=[queued.pk]))
    assert again.status_code == 302


def test_the_result_page_draws_qps_against_p99_and_marks_the_knee(client, owner):
    test = _test(owner.organization, owner, status=Status.DONE, knee_step=3)
    figures = [(2, 20.0, 131.0), (4, 40.0, 120.0), (8, 60.0, 191.0), (16, 60.0, 287.0)]
    for i, (clients, qps, p99) in enumerate(figures):
        LoadTestStep.objects.create(
            load_test=test, index=i, concurrency=clients, seconds=1.0, requests=int(qps),
            ok=int(qps), errors=0, requests_per_second=qps, output_tokens_per_second=qps * 8,
            ttft_p50_ms=60.0, ttft_p99_ms=70.0, ttft_p999_ms=71.0, latency_p50_ms=p99 - 30,
            latency_p99_ms=p99, latency_p999_ms=p99 + 1,
        )  # fmt: skip
    page = _client(client, owner).get(reverse("capacity:detail", args=[test.pk]))
    html = page.content.decode()
    assert 'id="plot-qps-p99"' in html
    assert "Knee: step 4 (16 clients)." in html
    assert 'hx-trigger="every 1s"' not in html  # an ended test is not polled
    assert 'id="load-test-cancel"' not in html
    assert '<tr data-step="3" class="knee">' in html
    figure = json.loads(re.search(r'class="js-figure"[^>]*>(.*?)</script>', html, re.S)[1])
    line, knee = figure["data"]
    assert line["x"] == [20.0, 40.0, 60.0, 60.0]
    assert line["y"] == [131.0, 120.0, 191.0, 287.0]
    assert (knee["x"], knee["y"]) == ([60.0], [287.0])


API = "/api/v1/load-tests/"
API_BODY = {
    "model": "sim-chat-small",
    "input_tokens": 128,
    "output_tokens": 16,
    "prefix_share": 25,
    "steps": [2, 4],
    "step_seconds": 5,
    "budget": 1_000_000,
}


def test_the_api_starts_reads_and_cancels_a_test(client, owner):
    c = _client(client, owner)
    with mock.patch("console.features.capacity.services.registered_task"):
        created = c.post(API, API_BODY, content_type="application/json")
    assert created.status_code == 201
    body = created.json()
    assert (body["status"], body["steps"], body["budget"], body["progress"]) == (
        "queued",
        [2, 4],
        1_000_000,
        0,
    )
    again = c.post(API, API_BODY, content_type="application/json")
    assert again.status_code == 409  # one at a time
    assert "already running" in again.content.decode()

    test = LoadTest.objects.get(pk=body["id"])
    test.status, test.knee_step = Status.DONE, 1
    test.save()
    for i, (clients, qps, p99) in enumerate([(2, 20.0, 100.0), (4, 21.0, 200.0)]):
        LoadTestStep.objects.create(
            load_test=test, index=i, concurrency=clients, seconds=5.0, requests=10, ok=9,
            errors=1, requests_per_second=qps, output_tokens_per_second=qps * 16,
            latency_p99_ms=p99,
        )  # fmt: skip
    detail = c.get(f"{API}{test.pk}/").json()
    assert detail["knee_concurrency"] == 4
    assert [r["concurrency"] for r in detail["results"]] == [2, 4]
    assert detail["results"][0]["error_rate"] == 0.1
    assert [t["id"] for t in c.get(API).json()["results"]] == [test.pk]
    ended = c.post(f"{API}{test.pk}/cancel/")
    assert ended.status_code == 409


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"steps": [2, 5000]}, "steps"),
        ({"steps": []}, "steps"),
        ({"step_seconds": 1}, "step_seconds"),
        ({"budget": 0}, "budget"),
        ({"model": "no-such-model"}, "model"),
        ({"steps": [1] * 10, "step_seconds": 120}, "step_seconds"),  # 1200 s > 600 s
        ({"billing": "free"}, "billing"),
    ],
)
def test_the_api_answers_bad_input_with_field_errors(client, owner, change, field):
    response = _client(client, owner).post(
        API, {**API_BODY, **change}, content_type="application/json"
    )
    assert response.status_code == 400
    assert field in response.content.decode()
    assert not LoadTest.objects.exists()


def test_the_api_keeps_tests_to_their_organization_and_roles(client, owner, viewer, other_owner):
    test = _test(owner.organization, owner, status=Status.RUNNING)
    c = _client(client, other_owner)
    assert c.get(f"{API}{test.pk}/").status_code == 404
    assert c.post(f"{API}{test.pk}/cancel/").status_code == 404
    assert c.get(API).json()["results"] == []
    c = _client(client, viewer)
    assert c.get(f"{API}{test.pk}/").status_code == 200
    assert c.post(f"{API}{test.pk}/cancel/").status_code == 403
    assert c.post(API, API_BODY, content_type="application/json").status_code == 403
    test.refresh_from_db()
    assert not test.cancel_requested


def test_an_owner_may_mark_a_test_as_not_billed_and_its_pages_say_so(client, owner):
    c = _client(client, owner)
    with mock.patch("console.features.capacity.services.registered_task"):
        response = c.post(reverse("capacity:list"), {**FORM, "billing": "test"})
    test = LoadTest.objects.get()
    assert response.status_code == 302
    assert test.billing == "test"
    page = c.get(response["Location"]).content.decode()
    assert 'data-billing="test"' in page and "not billed" in page
    assert "Test, not billed" in c.get(reverse("capacity:list")).content.decode()
    form = c.get(reverse("capacity:list")).content.decode()
    assert 'name="billing" value="billed"' in form and 'name="billing" value="test"' in form


def test_a_test_started_without_a_billing_choice_is_billed(client, owner):
    c = _client(client, owner)
    with mock.patch("console.features.capacity.services.registered_task"):
        c.post(reverse("capacity:list"), FORM)
        created = c.post(API, {**API_BODY, "steps": [2]}, content_type="application/json")
    assert LoadTest.objects.get().billing == "billed"
    assert created.status_code == 409  # the first still runs; its billing was the default


def test_the_api_starts_a_test_marked_as_not_billed(client, owner):
    with mock.patch("console.features.capacity.services.registered_task"):
        created = _client(client, owner).post(
            API, {**API_BODY, "billing": "test"}, content_type="application/json"
        )
    assert created.status_code == 201
    assert created.json()["billing"] == "test"
    assert LoadTest.objects.get().billing == "test"

"""What a load test's pages and API say about it: the knee named one way on
the list, the page, the chart and the API; the status right after Cancel,
without a reload."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from console.features.capacity.models import LoadTest, LoadTestStep, Status
from usage.seed import seed_catalog

API = "/api/v1/load-tests/"


@pytest.fixture(autouse=True)
def _catalog(db):
    seed_catalog()


def _test(membership, **fields) -> LoadTest:
    values = {
        "organization": membership.organization, "started_by": membership,
        "model": "sim-chat-small", "input_tokens": 64, "output_tokens": 8, "prefix_share": 0,
        "steps": [2, 4, 8], "step_seconds": 5, "budget": 1_000_000, **fields,
    }  # fmt: skip
    return LoadTest.objects.create(**values)


def _steps(test: LoadTest, figures) -> None:
    for i, (clients, qps, p99) in enumerate(figures):
        LoadTestStep.objects.create(
            load_test=test, index=i, concurrency=clients, seconds=5.0, requests=int(qps * 5),
            cut_off=clients, ok=int(qps * 5), errors=0, requests_per_second=qps,
            output_tokens_per_second=qps * 8, latency_p99_ms=p99,
        )  # fmt: skip


def test_the_knee_is_named_the_same_on_the_list_the_page_the_chart_and_the_api(client, owner):
    # The second step (4 clients, index 1) is the knee.
    test = _test(owner, status=Status.DONE, knee_step=1)
    _steps(test, [(2, 20.0, 100.0), (4, 21.0, 200.0), (8, 21.0, 400.0)])
    client.force_login(owner.user)

    row = client.get(reverse("capacity:list")).content.decode()
    row = row.split(f'data-load-test="{test.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "step 2 (4 clients)" in row

    page = client.get(reverse("capacity:detail", args=[test.pk])).content.decode()
    assert "Knee: step 2 (4 clients)." in page
    knee_row = re.search(r'<tr data-step="1" class="knee">(.*?)</tr>', page, re.S)[1]
    assert re.findall(r'<td class="num">(\d+)', knee_row)[:2] == ["2", "4"]  # step, clients
    figure = json.loads(re.search(r'class="js-figure"[^>]*>(.*?)</script>', page, re.S)[1])
    assert figure["data"][1]["text"] == ["knee: step 2 (4 clients)"]

    body = client.get(f"{API}{test.pk}/").json()
    assert (body["knee_step_number"], body["knee_concurrency"]) == (2, 4)
    assert body["knee_step"] == 1  # the index, as before
    knee = body["results"][body["knee_step"]]
    assert (knee["number"], knee["concurrency"]) == (body["knee_step_number"], 4)


def test_a_run_without_a_knee_says_so_everywhere(client, owner):
    test = _test(owner, status=Status.DONE)
    _steps(test, [(2, 20.0, 100.0), (4, 40.0, 100.0), (8, 80.0, 100.0)])
    client.force_login(owner.user)
    row = client.get(reverse("capacity:list")).content.decode()
    assert "—" in row.split(f'data-load-test="{test.pk}"', 1)[1].split("</tr>", 1)[0]
    assert (
        "No knee in these steps."
        in client.get(reverse("capacity:detail", args=[test.pk])).content.decode()
    )
    body = client.get(f"{API}{test.pk}/").json()
    assert (body["knee_step"], body["knee_step_number"], body["knee_concurrency"]) == (
        None,
        None,
        None,
    )


def _status(html: str) -> str:
    return re.search(r'<strong id="load-test-status">(.*?)</strong>', html)[1]


def test_after_cancel_the_page_says_cancelling_then_cancelled_without_a_reload(client, owner):
    test = _test(owner, status=Status.RUNNING, api_key_id=None)
    client.force_login(owner.user)
    assert _status(client.get(reverse("capacity:detail", args=[test.pk])).content.decode()) == (
        "Running"
    )

    # The cancel's own answer (htmx swaps it in) ...
    answer = client.post(reverse("capacity:cancel", args=[test.pk]), HTTP_HX_REQUEST="true")
    html = answer.content.decode()
    assert _status(html) == "Cancelling"
    assert 'id="load-test-cancel"' not in html  # asked once
    assert 'hx-trigger="every 1s"' in html  # still polled until the run stops
    # ... and each poll until the worker has stopped say so; the list too.
    progress = reverse("capacity:progress", args=[test.pk])
    assert _status(client.get(progress).content.decode()) == "Cancelling"
    listed = client.get(reverse("capacity:list")).content.decode()
    assert "Cancelling" in listed.split(f'data-load-test="{test.pk}"', 1)[1].split("</tr>")[0]
    assert client.get(f"{API}{test.pk}/").json()["cancel_requested"] is True

    # The worker stops it: the next poll says so, and is the last.
    LoadTest.objects.filter(pk=test.pk).update(status=Status.CANCELLED)
    html = client.get(progress).content.decode()
    assert _status(html) == "Cancelled"
    assert "Running" not in html and 'hx-trigger="every 1s"' not in html

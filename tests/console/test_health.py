"""``/healthz`` (liveness) and ``/readyz`` (readiness: database, shared cache,
broker): what they answer, within their deadline, by IP over plain HTTP
(console.kernel.probes)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from django.db import OperationalError
from django.test import AsyncClient

from console.kernel import probes
from console.kernel.celery import app as celery_app

pytestmark = pytest.mark.django_db


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_healthz_answers(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_answers_200_naming_each_check(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == set(probes.configured_checks())
    assert {"database", "broker"} <= set(body["checks"])
    assert all(check["ok"] for check in body["checks"].values())
    assert response["Cache-Control"] == "no-store"


def test_readyz_checks_the_cache_only_when_it_is_shared(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert "cache" not in probes.configured_checks()
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:6379/15",
        }
    }
    assert "cache" in probes.configured_checks()


def test_readyz_503_names_the_database_when_it_is_unreachable(client, monkeypatch):
    def unreachable():
        raise OperationalError("connection to server at 10.0.0.5, port 5432 failed")

    monkeypatch.setitem(probes.CHECKS, "database", unreachable)
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"]["ok"] is False
    assert body["checks"]["database"]["error"] == "OperationalError"
    assert body["checks"]["broker"]["ok"] is True
    # The class only: the public answer names no host, user or password.
    assert "10.0.0.5" not in response.content.decode()


@pytest.fixture
def broker_down():
    """The Celery app's broker: a closed port on this machine (refused at once)."""
    keys = ("broker_url", "broker_write_url", "broker_transport_options")
    saved = {key: celery_app.conf[key] for key in keys}
    celery_app.conf.update(
        broker_url=f"amqp://guest@127.0.0.1:{closed_port()}//",
        broker_write_url=None,
        broker_transport_options={},
    )
    yield
    celery_app.conf.update(saved)


def test_readyz_503_names_the_broker_when_it_is_unreachable(client, broker_down):
    # A real kombu connection, refused.
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["broker"]["ok"] is False
    assert checks["broker"]["error"]  # kombu's OperationalError, or a timeout
    assert checks["database"]["ok"] is True


def test_readyz_gives_up_on_a_hung_check_at_its_deadline(client, monkeypatch, settings):
    settings.CONSOLE_READYZ_TIMEOUT_SECONDS = 0.3
    release = threading.Event()
    calls = []

    def hung():
        calls.append(1)
        release.wait(10)

    monkeypatch.setitem(probes.CHECKS, "database", hung)
    try:
        started = time.monotonic()
        first = client.get("/readyz")
        second = client.get("/readyz")
        elapsed = time.monotonic() - started
    finally:
        release.set()
    assert first.status_code == second.status_code == 503
    assert first.json()["checks"]["database"] == {"ok": False, "ms": 300.0, "error": "timeout"}
    assert elapsed < 3, elapsed
    # The second probe waited on the first one's run: a hung database never
    # holds more than one thread.
    assert calls == [1]


def test_probes_answer_by_ip_over_plain_http(client, settings):
    """A load balancer probes the process by its address, over HTTP: no 400
    for the host, no redirect to https (both hold for every other page)."""
    settings.ALLOWED_HOSTS = ["console.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/login/", HTTP_HOST="10.0.3.7:8000").status_code == 400
    redirected = client.get("/login/", HTTP_HOST="console.example.com")
    assert redirected.status_code == 301
    assert redirected["Location"].startswith("https://console.example.com/")
    for path in ("/healthz", "/readyz"):
        response = client.get(path, HTTP_HOST="10.0.3.7:8000")
        assert response.status_code == 200, (path, response.content)
        assert client.head(path, HTTP_HOST="10.0.3.7:8000").status_code == 200


def test_probes_answer_through_the_asgi_handler(settings):
    # The server runs Django under ASGI: the middleware's async path, and the
    # async readiness view awaited, not run on the pages' thread.
    settings.ALLOWED_HOSTS = ["console.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    client = AsyncClient(headers={"host": "10.0.3.7:8000"})
    ready = async_to_sync(client.get)("/readyz")
    assert ready.status_code == 200, ready.content
    assert set(ready.json()["checks"]) == set(probes.configured_checks())
    assert async_to_sync(client.get)("/healthz").status_code == 200
    assert async_to_sync(client.get)("/login/").status_code == 400

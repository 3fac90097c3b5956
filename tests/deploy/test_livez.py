"""``/livez``: the liveness probe of deploy/k8s answers 200 without touching the
database (a database outage takes pods out of rotation through ``/readyz``; it
must not restart them all), by IP over plain HTTP in production settings, like
the other probes (console.kernel.probes.ProbeMiddleware)."""

from __future__ import annotations

import pytest
from django.urls import resolve

pytestmark = pytest.mark.engine_independent


def test_livez_is_routed_in_the_console_namespace():
    match = resolve("/livez")
    assert (match.namespace, match.url_name) == ("console", "livez")


def test_livez_answers_with_the_database_blocked(client):
    # No django_db mark: pytest-django blocks every database access (a query, even a
    # connection, raises RuntimeError), so this proves no query, without the
    # cost of a test database.
    response = client.get("/livez")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_livez_answers_by_ip_over_plain_http_in_production(client, settings):
    # A kubelet probes the pod's IP over HTTP: before the host check and the redirect.
    settings.ALLOWED_HOSTS = ["console.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    response = client.get("/livez", HTTP_HOST="10.0.3.7:8000")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_the_database_block_is_real(client):
    """The control of the test above: /healthz, which queries, fails under the block."""
    with pytest.raises(RuntimeError, match="Database access not allowed"):
        client.get("/healthz")

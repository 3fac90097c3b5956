"""The ingest task retries what a database restart throws, whichever layer
throws it: Django's wrapped errors and psycopg's own from the raw COPY cursor."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError

from usage.ingest import IngestResult
from usage.tasks import ingest_batch


def flaky(monkeypatch, error, failures: int) -> list:
    calls = []

    def ingest(events):
        calls.append(1)
        if len(calls) <= failures:
            raise error
        return IngestResult(accepted=len(events), duplicates=0, dead_lettered=0)

    monkeypatch.setattr("usage.ingest.ingest_events", ingest)
    return calls


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("server closed the connection"),
        psycopg.OperationalError("consuming input failed: server closed the connection"),
        psycopg.InterfaceError("the connection is closed"),
    ],
)
def test_a_database_restart_is_retried_not_dropped(monkeypatch, error):
    calls = flaky(monkeypatch, error, failures=2)
    result = ingest_batch.apply(args=[[]])
    assert result.state == "SUCCESS" and len(calls) == 3


def test_a_bug_is_not_retried(monkeypatch):
    calls = flaky(monkeypatch, ValueError("a bug"), failures=1)
    result = ingest_batch.apply(args=[[]])
    assert result.state == "FAILURE" and len(calls) == 1

"""Reads that may go to a read replica (``DATABASE_REPLICA_URL``).

The per-call logs, the analytics pages and the CSV exports are the heavy
reads: they scan call records and rollups. Where a replica is configured,
they read from it (alias ``replica``) and leave the primary to ingest and the
console's own writes. Everything else, and every write, stays on ``default``.

A view opts in with ``@replica_reads`` (its queries run while it runs); a
streamed response's rows opt in with ``on_replica(rows)`` (each chunk is read
inside its own ``next``, so the choice never leaks into the server's code that
writes the chunk, whichever thread or context it runs in). Without a replica
both are no-ops. A replica lags its primary by a moment: the opted-in pages
show calls ingested a second ago a second later, which is why no page that
writes, or that shows what its user has just changed, opts in.

``ReplicaRouter`` (``DATABASE_ROUTERS``) sends writes to ``default`` always
(an object read from the replica and saved again is saved on the primary) and
migrations to ``default`` only.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

REPLICA = "replica"

_replica_ok: contextvars.ContextVar[bool] = contextvars.ContextVar("replica_ok", default=False)


def replica_configured() -> bool:
    return bool(getattr(settings, "DATABASE_REPLICA_URL", "")) and REPLICA in settings.DATABASES


def read_alias() -> str:
    """The alias this code's reads go to now."""
    return REPLICA if _replica_ok.get() and replica_configured() else DEFAULT_DB_ALIAS


def replica_reads(view: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``view``'s queries on the replica, where there is one."""

    @functools.wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        token = _replica_ok.set(True)
        try:
            return view(*args, **kwargs)
        finally:
            _replica_ok.reset(token)

    return wrapped


def on_replica(rows: Iterable) -> Iterator:
    """``rows``, each produced with its queries on the replica."""
    return _OnReplica(rows)


class _OnReplica(Iterator):
    def __init__(self, rows: Iterable):
        self._rows = iter(rows)

    def __next__(self):
        token = _replica_ok.set(True)
        try:
            return next(self._rows)
        finally:
            _replica_ok.reset(token)


class ReplicaRouter:
    def db_for_read(self, model, **hints):
        return read_alias()

    def db_for_write(self, model, **hints):
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints):
        # The replica holds the primary's rows: an object read from either may
        # point at one read from the other.
        if {obj1._state.db, obj2._state.db} <= {DEFAULT_DB_ALIAS, REPLICA, None}:
            return True
        return None

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return db == DEFAULT_DB_ALIAS

"""Exactly one Celery beat: a lock beat takes before it reads its schedule.

Beat sends every periodic task (node probes, key expiry, retention, invoice
drafts); two beats would send each one twice. Celery's own ``--pidfile``
guards one machine only, so beat's scheduler (``LockedScheduler``, set as
``CELERY_BEAT_SCHEDULER``) takes a deployment-wide lock first, and a second
beat refuses to start::

    beat: refusing to start: another Celery beat holds the beat lock
    (console-beat host-a pid 4242). Run exactly one beat per deployment; ...

Where the lock lives follows the database, the one thing every process of a
deployment shares:

* **PostgreSQL**: a session advisory lock (``pg_try_advisory_lock``) on a
  connection of beat's own (not Django's pool), named
  ``console-beat <host> pid <pid>`` in ``pg_stat_activity``. PostgreSQL
  releases it when that session ends: beat exits, is killed, or its machine
  is gone (once the server drops the dead connection). It needs a real
  session: point ``DATABASE_URL`` past a transaction-pooling PgBouncer for
  beat (or set ``CONSOLE_BEAT_LOCK=false`` and keep to one beat by hand).
* **SQLite** (embedded, one machine): an exclusive ``flock`` on
  ``<CONSOLE_VAR_DIR>/celerybeat.lock``, released by the kernel when the
  process ends.

Every ``LOCK_CHECK_SECONDS`` beat checks that it still holds the lock (a
PostgreSQL restart ends the session and with it the lock): it takes it again,
or stops when another beat took it meanwhile; while the database does not
answer it carries on (no other beat can take the lock then either).

Why the scheduler and not Celery's ``beat_init`` signal: Celery sends
``beat_init`` after the scheduler has opened (and written) its schedule file,
so a second beat on the same machine would have touched the first one's file
before refusing; and an exception in a signal handler is only logged.

A standby beat is then just a second beat whose supervisor restarts it (the
systemd example's ``Restart=always``): it refuses until the first is gone,
then takes over.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import time
from datetime import UTC, datetime
from pathlib import Path

from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import connections

logger = logging.getLogger(__name__)

LOCK_NAME = "console.kernel.celery-beat"
# The advisory lock's key: 64 bits of a hash of the name (stable across releases).
LOCK_KEY = int.from_bytes(hashlib.sha256(LOCK_NAME.encode()).digest()[:8], "big", signed=True)
LOCK_CHECK_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 10


class BeatLockHeld(RuntimeError):
    """Another beat holds the lock."""

    def __init__(self, holder: str):
        self.holder = holder or "holder unknown"
        super().__init__(
            f"another Celery beat holds the beat lock ({self.holder}). Run exactly one beat "
            "per deployment: a second one would send every periodic task twice. "
            "This one starts once that one has stopped."
        )


def whoami() -> str:
    return f"console-beat {socket.gethostname()} pid {os.getpid()}"


class FileBeatLock:
    """An exclusive ``flock`` on a file: one machine (the embedded setup)."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def describe(self) -> str:
        return f"file lock {self.path}"

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self.path.read_text(errors="replace").strip()
            os.close(fd)
            raise BeatLockHeld(holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{whoami()}, since {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC\n".encode())
        self._fd = fd

    def still_held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


class PostgresBeatLock:
    """A session advisory lock on a connection of its own."""

    _MINE = (
        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND pid = pg_backend_pid() AND classid::bigint = %s AND objid::bigint = %s"
        " AND objsubid = 1"
    )
    _HOLDER = (
        "SELECT a.application_name, host(a.client_addr), a.backend_start"
        " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = %s"
        " AND l.objid::bigint = %s AND l.objsubid = 1"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )

    def __init__(self, connection_params: dict):
        self.params = connection_params
        self._conn = None
        # pg_locks shows a bigint key as two oids: its high and low 32 bits.
        unsigned = LOCK_KEY & 0xFFFF_FFFF_FFFF_FFFF
        self._halves = (unsigned >> 32, unsigned & 0xFFFF_FFFF)

    def describe(self) -> str:
        return f"PostgreSQL advisory lock {LOCK_KEY} in database {self.params.get('dbname')}"

    def _connect(self):
        # deferred: psycopg (and libpq) load only where PostgreSQL is the database
        import psycopg

        params = {"connect_timeout": CONNECT_TIMEOUT_SECONDS, **self.params}
        params["application_name"] = whoami()
        return psycopg.connect(**params, autocommit=True)

    def acquire(self) -> None:
        conn = self._connect()
        try:
            got = conn.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY]).fetchone()[0]
            if not got:
                raise BeatLockHeld(self._holder(conn))
        except BaseException:
            conn.close()
            raise
        self._close()
        self._conn = conn

    def _holder(self, conn) -> str:
        row = conn.execute(self._HOLDER, list(self._halves)).fetchone()
        if row is None:
            return ""
        name, address, since = row
        where = f" at {address}" if address else ""
        return f"{name or 'a session'}{where}, connected since {since:%Y-%m-%d %H:%M:%S %Z}"

    def still_held(self) -> bool:
        if self._conn is None:
            return False
        try:
            return self._conn.execute(self._MINE, list(self._halves)).fetchone() is not None
        except Exception:  # the session is gone (a restart, a failover): so is the lock
            self._close()
            return False

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def release(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
        self._close()


def beat_lock() -> FileBeatLock | PostgresBeatLock | None:
    """The lock for this deployment's settings (``None``: turned off)."""
    if not settings.CONSOLE_BEAT_LOCK:
        return None
    connection = connections["default"]
    if connection.vendor == "postgresql":
        return PostgresBeatLock(connection.get_connection_params())
    return FileBeatLock(Path(settings.VAR_DIR) / "celerybeat.lock")


class LockedScheduler(PersistentScheduler):
    """Celery's default scheduler, run only while this beat holds the beat lock."""

    _beat_lock: FileBeatLock | PostgresBeatLock | None = None
    _lock_checked = 0.0

    def setup_schedule(self):
        lock = beat_lock()
        if lock is not None:
            try:
                lock.acquire()
            except BeatLockHeld as refused:
                logger.critical("beat: refusing to start: %s", refused)
                raise SystemExit(f"beat: refusing to start: {refused}") from None
            logger.info("beat: holding the beat lock (%s)", lock.describe())
            self._beat_lock = lock
            self._lock_checked = time.monotonic()
        return super().setup_schedule()

    def tick(self, *args, **kwargs):
        self._check_lock()
        return super().tick(*args, **kwargs)

    def _check_lock(self) -> None:
        lock = self._beat_lock
        if lock is None or time.monotonic() - self._lock_checked < LOCK_CHECK_SECONDS:
            return
        self._lock_checked = time.monotonic()
        if lock.still_held():
            return
        try:
            lock.acquire()
        except BeatLockHeld as refused:
            logger.critical("beat: lost the beat lock and stops: %s", refused)
            raise SystemExit(f"beat: lost the beat lock: {refused}") from None
        except Exception as exc:
            logger.warning("beat: cannot take the beat lock again yet (%s); carrying on", exc)
            return
        logger.warning("beat: took the beat lock again (%s)", lock.describe())

    def close(self):
        try:
            super().close()
        finally:
            if self._beat_lock is not None:
                self._beat_lock.release()
                self._beat_lock = None

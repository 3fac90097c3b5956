"""Batching usage events from the gateway to the ingest worker.

``UsageEmitter.emit`` appends to an in-memory deque and returns: no lock
held, no I/O, safe on an asyncio event loop. One background thread cuts
batches (``max_batch`` events, or whatever is queued ``max_delay`` seconds
after the first event), publishes each with ``send`` and, when ``send``
raises, writes the batch to the durable ``Spool`` instead.

Ordering: while the spool holds batches, new batches go to the spool too,
and the spool is replayed (in order) every ``replay_interval`` seconds
before any live batch is sent. Ingest is idempotent and keyed by
``request_id``, so order does not matter for correctness; this keeps the
spool bounded once the broker is back, and it means a broker outage costs
one failed publish per interval, not one per batch.

Crash safety: with a ``journal`` (``gateway_bridge.journal``), ``emit`` also
appends the event to a per-process file with one unbuffered write, and the
thread retires those files as batches are delivered; a SIGKILLed process's
queued events are recovered from them by the next process on its spool slot.

Encoding: the queue holds ``usage.facade.UsageEvent`` objects as the gateway
built them; a batch is encoded once, when it is published, by orjson
(dataclasses and datetimes natively), as the body of a standard JSON Celery
message that any worker reads with kombu's own JSON decoder. A batch going
to the spool is written as wire dicts (``to_wire``), and batches replayed
from it (wire dicts, maybe written by an older process) publish the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kombu import serialization

from gateway_bridge.spool import Spool
from usage.facade import UsageEvent, encode, to_wire

if TYPE_CHECKING:
    from gateway_bridge.journal import Journal

logger = logging.getLogger(__name__)

Send = Callable[[list[Any]], object]

AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})

# The Celery serializer of published batches: JSON written by orjson (the
# usage contract's ``encode``), the same content type as kombu's "json", so
# workers decode it as any JSON message. Registered for encoding only; the
# content type keeps naming kombu's "json" for everything that decodes.
SERIALIZER = "usage-orjson"
serialization.register(  # type: ignore[no-untyped-call]  # kombu has no annotations
    SERIALIZER, encode, None, content_type="application/json", content_encoding="utf-8"
)
serialization.registry.type_to_name["application/json"] = "json"


class CelerySend:
    """Publishes a batch as one Celery task (``usage.ingest_batch`` unless
    told otherwise), with no retry and short timeouts, so a broker outage
    fails fast into the caller's fallback (the spool). Not thread-safe: one
    per sending thread.

    On RabbitMQ (``amqp://``) the publish is confirmed: it returns once the
    broker has the message and raises when it nacks it, returns it as
    unroutable (published ``mandatory``: no queue would get it, e.g. the queue
    was deleted) or does not confirm within ``confirm_timeout`` seconds. Any
    of those is a failed publish: the caller spools the batch and replays it
    later. A batch the broker took but confirmed too late may so arrive twice;
    ingest is idempotent on the request id, so it is stored once."""

    def __init__(
        self,
        connect_timeout: float = 2.0,
        broker_url: str | None = None,
        task: str = "usage.ingest_batch",
        serializer: str = SERIALIZER,
        confirm_timeout: float = 5.0,
        queue: str | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.confirm_timeout = confirm_timeout
        self.broker_url = broker_url  # None: the configured broker
        self.task = task
        self.serializer = serializer
        self.queue = queue  # None: the default queue (CELERY_QUEUE)
        self._conn: Any = None  # kombu's connection, made on first use

    def _url(self) -> str:
        # deferred: the Celery app is needed only once a batch goes to the
        # broker (the tests and benchmarks pass their own ``send``)
        from console.kernel.celery import app

        return self.broker_url or app.conf.broker_write_url or app.conf.broker_url or ""

    @property
    def confirms(self) -> bool:
        """Whether the broker confirms each publish (RabbitMQ)."""
        return urlsplit(self._url()).scheme in AMQP_SCHEMES

    def _connection(self) -> Any:
        if self._conn is None:
            # deferred: as in ``_url``, the Celery app only when publishing
            from console.kernel.celery import app

            # The configured broker's options, unless told another broker.
            options = dict(app.conf.broker_transport_options or {}) if not self.broker_url else {}
            if self.confirms:
                options.update(
                    confirm_publish=True,
                    # A broker that stops reading (a memory or disk alarm blocks
                    # publishers) fails the publish instead of hanging the thread.
                    read_timeout=self.confirm_timeout,
                    write_timeout=self.confirm_timeout,
                )
            else:
                # Redis reads these; other transports ignore unknown options.
                options.update(
                    socket_connect_timeout=self.connect_timeout,
                    socket_timeout=self.connect_timeout,
                )
            self._conn = app.connection_for_write(
                url=self.broker_url,
                connect_timeout=self.connect_timeout,
                transport_options=options,
            )
        return self._conn

    def __call__(self, batch: list[Any]) -> None:
        # deferred: as in ``_url``, the Celery app only when publishing
        from console.kernel.celery import app

        extra: dict[str, Any] = {}
        if self.confirms:
            extra = {"confirm_timeout": self.confirm_timeout, "mandatory": True}
        if self.queue:
            extra["queue"] = self.queue
        try:
            app.send_task(
                self.task,
                args=[batch],
                retry=False,
                connection=self._connection(),
                serializer=self.serializer,
                **extra,
            )
        except Exception:
            self.close()  # reconnect next time
            raise

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.release()
            except Exception:  # a broken connection may fail to close, too
                logger.debug("usage emitter: error releasing the broker connection", exc_info=True)


class UsageEmitter:
    """Counters (read them for metrics): ``emitted``, ``sent_batches``,
    ``spooled_batches``, ``replayed_batches``, ``spool_pending``,
    ``dropped_batches`` (neither the broker nor the disk took them)."""

    def __init__(
        self,
        send: Send | None,
        spool: Spool,
        *,
        max_batch: int = 500,
        max_delay: float = 0.25,
        replay_interval: float = 2.0,
        journal: Journal | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if max_delay <= 0 or replay_interval <= 0:
            raise ValueError("max_delay and replay_interval must be positive")
        self.send = send if send is not None else CelerySend()
        self.spool = spool
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.replay_interval = replay_interval
        self.sent_batches = 0
        self.spooled_batches = 0
        self.replayed_batches = 0
        self.dropped_batches = 0
        self.journal = journal  # gateway_bridge.journal.Journal, or None
        self._drained = 0
        self._delivered = 0  # events sent or spooled (journal files retire by it)
        self._queue: deque[UsageEvent] = deque()
        self._wake = threading.Event()
        self._closing = False
        self._next_replay = 0.0  # replay at once if a previous run left a spool
        self._thread = threading.Thread(target=self._run, name="usage-emitter", daemon=True)
        self._thread.start()

    # --- caller side (the event loop) ----------------------------------

    def emit(self, event: UsageEvent) -> None:
        """Queue one event (a wire dict is taken too). O(1), no I/O."""
        if self._closing:
            raise RuntimeError("UsageEmitter is closed")
        q = self._queue
        q.append(event)
        n = len(q)
        # After the append: a file the thread retires holds only events it
        # has delivered (see _tick); a line written late is a harmless duplicate.
        if self.journal is not None:
            self.journal.write(event)
        # Wake the thread when a batch starts (to time it) or fills.
        if n == 1 or n >= self.max_batch:
            self._wake.set()

    @property
    def emitted(self) -> int:
        return self._drained + len(self._queue)

    @property
    def spool_pending(self) -> int:
        return self.spool.pending().batches

    def close(self, timeout: float | None = 10.0) -> bool:
        """Flush every queued event (to the broker or the spool) and stop the
        thread. ``True`` when it finished within ``timeout``."""
        self._closing = True
        self._wake.set()
        self._thread.join(timeout)
        finished = not self._thread.is_alive()
        if finished and isinstance(self.send, CelerySend):
            self.send.close()
        if finished and self.journal is not None:
            self.journal.close()  # everything went to the broker or the spool
        return finished

    # --- the background thread -----------------------------------------

    def _run(self) -> None:
        batch_started: float | None = None
        while True:
            now = time.monotonic()
            if self._queue:
                if batch_started is None:
                    batch_started = now
                wait: float | None = batch_started + self.max_delay - now
            elif self.spool_pending:
                wait = self._next_replay - now
            else:
                wait = None
            if not self._closing and (wait is None or wait > 0):
                self._wake.wait(wait)
                self._wake.clear()
            closing = self._closing
            now = time.monotonic()
            due = batch_started is not None and now - batch_started >= self.max_delay
            try:
                flushed = self._tick(closing, due)
            except Exception:  # never let the thread die: events would pile up unseen
                logger.exception("usage emitter: unexpected error")
                flushed = 1
            if flushed or not self._queue:
                # What is left arrived during the flush: its own clock starts now.
                batch_started = time.monotonic() if self._queue else None
            if closing and not self._queue:
                if self.spool_pending:
                    self._replay(force=True)
                return

    def _tick(self, closing: bool, due: bool) -> int:
        q = self._queue
        flushed = 0
        while len(q) >= self.max_batch or (q and (due or closing)):
            n = min(len(q), self.max_batch)
            batch = [q.popleft() for _ in range(n)]
            self._drained += n
            self._deliver(batch)
            self._delivered += n
            flushed += 1
            due = False  # a partial batch only once per wake-up
        if self.journal is not None:
            if flushed:
                # Every event queued until now is in the files before this one.
                self.journal.rotate(self._drained + len(q))
            self.journal.retire(self._delivered)
        if self.spool_pending and time.monotonic() >= self._next_replay:
            self._replay()
        return flushed

    def _deliver(self, batch: list[Any]) -> None:
        if self.spool_pending and not self._replay():
            self._to_spool(batch)
            return
        try:
            self.send(batch)
        except Exception as exc:
            logger.warning(
                "usage emitter: publish failed (%s); spooling %d events", exc, len(batch)
            )
            self._next_replay = time.monotonic() + self.replay_interval
            self._to_spool(batch)
        else:
            self.sent_batches += 1

    def _to_spool(self, batch: list[Any]) -> None:
        try:
            self.spool.append(to_wire(batch))
        except Exception:
            self.dropped_batches += 1
            logger.exception("usage emitter: could not spool %d events; they are lost", len(batch))
        else:
            self.spooled_batches += 1

    def _replay(self, force: bool = False) -> bool:
        """Try the spool now if due (or ``force``); ``True`` if it is empty after."""
        if not force and time.monotonic() < self._next_replay:
            return False
        counted = 0

        def send(batch: list[dict[str, Any]]) -> None:
            nonlocal counted
            self.send(batch)
            counted += 1

        try:
            self.spool.replay(send)
        except Exception as exc:
            logger.warning("usage emitter: spool replay stopped (%s)", exc)
            self._next_replay = time.monotonic() + self.replay_interval
            return False
        finally:
            self.replayed_batches += counted
        if self.spool_pending:  # e.g. batches appended by another process meanwhile
            self._next_replay = time.monotonic() + self.replay_interval
            return False
        return True

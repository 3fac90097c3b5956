"""Circuit-breaker transitions, from the router to the audit trail.

The router calls ``report`` on the event loop when a node's circuit opens or
closes. A thread of the loop's default executor publishes what is pending as
one ``inference_node.record_circuit_events`` task, so the hot path never
touches the broker. Transitions are rare (a few per node per incident): while
the broker is unreachable they wait in memory, at most ``max_pending`` of them
(the oldest go first), and are sent again every ``retry_seconds``. Each carries
an id, so a batch that reaches the worker twice is recorded once.

The Errors page draws them; ``/metrics`` keeps the live counters.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway_bridge.breaker import Breaker
    from inference_node.facade import RoutableNode

logger = logging.getLogger(__name__)

TASK = "inference_node.record_circuit_events"


def gateway_name() -> str:
    """Which gateway process saw it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


class CircuitReporter:
    """Counters: ``reported``, ``sent``, ``dropped`` (pushed out while the
    broker stayed away)."""

    def __init__(
        self,
        send: Callable[[list[dict[str, Any]]], object] | None = None,
        *,
        gateway: str | None = None,
        retry_seconds: float = 5.0,
        max_pending: int = 1000,
    ) -> None:
        if send is None:
            # deferred: the emitter imports kombu, needed only to publish
            from gateway_bridge.emitter import CelerySend

            send = CelerySend(task=TASK)
        self.send = send
        self.gateway = gateway or gateway_name()
        self.retry_seconds = retry_seconds
        self.pending: deque[dict[str, Any]] = deque()
        self.max_pending = max_pending
        self.reported = self.sent = self.dropped = 0
        self._busy = False
        self._retry: asyncio.TimerHandle | None = None

    def report(self, node: RoutableNode, breaker: Breaker) -> None:
        """Called on the event loop by the router: queue and schedule, no I/O."""
        opened = breaker.state == "open"
        self.pending.append(
            {
                "id": uuid.uuid4().hex,
                "node_id": node.node_id,
                "node": node.name,
                "state": "open" if opened else "closed",
                "reason": breaker.opened_reason if opened else "probe_succeeded",
                "calls": breaker.opened_calls if opened else 0,
                "errors": breaker.opened_errors if opened else 0,
                "gateway": self.gateway,
                "at": time.time(),
            }
        )
        self.reported += 1
        while len(self.pending) > self.max_pending:
            self.pending.popleft()
            self.dropped += 1
        self._schedule()

    def _schedule(self) -> None:
        if self._busy or not self.pending:
            return
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        loop = asyncio.get_running_loop()
        self._busy = True
        loop.run_in_executor(None, self._flush).add_done_callback(self._flushed)

    def _flush(self) -> bool:
        """In an executor thread: send what is pending, or put it back."""
        batch = []
        while self.pending:
            batch.append(self.pending.popleft())
        if not batch:
            return True
        try:
            self.send(batch)
        except Exception as exc:
            self.pending.extendleft(reversed(batch))
            logger.warning("circuit transitions not sent (%s); retrying", exc)
            return False
        self.sent += len(batch)
        return True

    def _flushed(self, future: asyncio.Future[bool]) -> None:
        """Back on the loop."""
        self._busy = False
        if future.cancelled() or future.exception() is not None or not future.result():
            loop = asyncio.get_running_loop()
            self._retry = loop.call_later(self.retry_seconds, self._schedule)
        elif self.pending:
            self._schedule()

    def close(self) -> None:
        """A last synchronous attempt (on shutdown, off the loop)."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self.pending:
            self._flush()
        close = getattr(self.send, "close", None)
        if close is not None:
            close()

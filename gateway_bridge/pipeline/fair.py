"""Stage 3a, fair admission of large bodies: one tenant's big requests cannot
stall everyone else's calls.

Parsing and validating a body runs on the event loop every call shares, and
orjson holds the GIL while it parses (a thread would not free the loop): a
3.5 MB body of 100,000 messages costs the loop about 0.1 s. So a body of at
least ``GATEWAY_LARGE_BODY_BYTES`` (known from ``Content-Length`` before the
body is read, or counted as a chunked one arrives):

* takes one of its organization's ``GATEWAY_LARGE_BODY_CONCURRENCY`` slots,
  checked after the key is known and *before* the body is read or parsed;
  with none free the call is answered 429 (``large_requests_in_flight``,
  ``Retry-After: 1``) and the rest of the body is never read;
* is parsed and validated first in a separate process
  (``GATEWAY_PARSE_WORKERS`` of them, shared by the process's calls): a body
  that fails (bad JSON, a bad message) is refused from there, having cost
  the loop only the hand-over of its bytes. A valid one is then parsed on
  the loop as any other (the call goes on to the node and is billed; at
  most the slots' worth per organization at once).

``GATEWAY_PARSE_WORKERS=0`` parses every body on the loop (the slots still
hold). Smaller bodies skip both: parsing them costs the loop less than
handing them over would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from gateway_bridge.pipeline import body
from gateway_bridge.pipeline.adapters import ADAPTERS, parser
from gateway_bridge.pipeline.call import Call, safe_model
from gateway_bridge.protocols.base import RATE_LIMIT, GatewayError

if TYPE_CHECKING:
    from gateway_bridge.asgi import Scope
    from gateway_bridge.state import KeyEntry

logger = logging.getLogger(__name__)


# A refusal as a worker sends it back: (kind, code, message, param, status, headers).
Refusal = tuple[str, str, str, str | None, int, list[tuple[str, str]]]


def validate(
    protocol: str,
    endpoint: str,
    raw: bytes,
    path_model: str | None,
    query: bytes,
    headers: dict[str, str],
) -> tuple[str | None, Refusal | None]:
    """In a parse worker: ``(model named in the body or None, the refusal as a
    tuple or None)``."""
    model: str | None = None
    try:
        data = body.loads(raw)
        if isinstance(data, dict) and isinstance(data.get("model"), str):
            model = data["model"]
        parser(protocol, endpoint).parse_call(
            endpoint, data, path_model=path_model, query=query, headers=headers
        )
    except GatewayError as err:
        return model, (err.kind, err.code, err.message, err.param, err.status, err.headers)
    except Exception:  # the loop's own parse will say what it is
        return model, None
    return model, None


def count(
    protocol: str, raw: bytes, path_model: str | None
) -> tuple[str | None, bytes | None, Refusal | None]:
    """In a parse worker: ``(the model counted for, the answer's bytes or None,
    the refusal as a tuple or None)`` of a token count."""
    try:
        data = body.loads(raw)
        adapter = ADAPTERS[protocol]
        return adapter.count_model(data, path_model), adapter.count_body(data, path_model), None
    except GatewayError as err:
        return None, None, (err.kind, err.code, err.message, err.param, err.status, err.headers)


def _ready() -> bool:
    return True


def _yield_to_the_loop() -> None:
    """A parse worker runs below the gateway's priority: on a busy machine the
    event loop gets the CPU first, a large body's validation waits."""
    with contextlib.suppress(OSError):
        os.nice(10)


class Ticket:
    """One call's claim on its organization's large-body slots."""

    __slots__ = ("claimed", "gate", "org")

    def __init__(self, gate: LargeBodies, org: int) -> None:
        self.gate = gate
        self.org = org
        self.claimed = False

    def claim(self) -> None:
        """Take a slot (429 when the organization has none free)."""
        if not self.claimed:
            self.gate.claim(self.org)
            self.claimed = True

    def release(self) -> None:
        if self.claimed:
            self.claimed = False
            self.gate.release(self.org)


class LargeBodies:
    """Per-organization slots for large bodies and the parse workers."""

    def __init__(self, threshold: int, per_org: int, workers: int) -> None:
        self.threshold = threshold
        self.per_org = per_org
        self.workers = workers
        self.in_flight: dict[int, int] = {}  # organization id -> large bodies being read
        self.refused = 0
        self._pool: ProcessPoolExecutor | None = None

    def ticket(self, entry: KeyEntry) -> Ticket:
        return Ticket(self, entry.auth.organization_id)

    def claim(self, org: int) -> None:
        held = self.in_flight.get(org, 0)
        if held >= self.per_org:
            self.refused += 1
            raise GatewayError(
                RATE_LIMIT,
                "large_requests_in_flight",
                f"Your organization already has {held} large requests (of "
                f"{self.threshold} bytes or more) being read; retry when one is done.",
                headers=[("retry-after", "1")],
            )
        self.in_flight[org] = held + 1

    def release(self, org: int) -> None:
        left = self.in_flight.get(org, 1) - 1
        if left > 0:
            self.in_flight[org] = left
        else:
            self.in_flight.pop(org, None)

    @property
    def pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_yield_to_the_loop,
            )
        return self._pool

    async def warm(self) -> None:
        """Start the parse workers now (a spawned worker imports for a while)."""
        if self.workers:
            await asyncio.get_running_loop().run_in_executor(self.pool, _ready)

    async def check(
        self, call: Call, raw: bytes, scope: Scope, headers: dict[str, str], path_model: str | None
    ) -> str | None:
        """Validate a large body in a parse worker: raises its refusal, else
        returns the model it names (None when it names none)."""
        if not self.workers:
            return None
        query = scope.get("query_string") or b""
        loop = asyncio.get_running_loop()
        try:
            model, refusal = await loop.run_in_executor(
                self.pool, validate, call.protocol, call.endpoint, raw, path_model, query, headers
            )
        except BrokenProcessPool:
            logger.warning("gateway: a parse worker died; starting new ones")
            self._pool = None
            return None
        if refusal is not None:
            kind, code, message, param, status, extra = refusal
            if model is not None and call.model is None:
                call.model = safe_model(model)
            raise GatewayError(kind, code, message, param=param, status=status, headers=extra)
        return model

    async def count(
        self, call: Call, raw: bytes, path_model: str | None
    ) -> tuple[str | None, bytes | None] | None:
        """A large body's token count, from a parse worker: ``(model, answer)``,
        or ``None`` to count on the loop (no workers, or they died)."""
        if not self.workers:
            return None
        loop = asyncio.get_running_loop()
        try:
            model, answer, refusal = await loop.run_in_executor(
                self.pool, count, call.protocol, raw, path_model
            )
        except BrokenProcessPool:
            logger.warning("gateway: a parse worker died; starting new ones")
            self._pool = None
            return None
        if refusal is not None:
            kind, code, message, param, status, extra = refusal
            raise GatewayError(kind, code, message, param=param, status=status, headers=extra)
        return model, answer

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

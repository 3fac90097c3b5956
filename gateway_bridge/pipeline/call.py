"""The state of one call as it goes through the stages, and the signals the
stages raise to each other.

``Call`` is filled stage by stage (route: protocol and endpoint; auth: the
key and the client's address; body and admit: model, stream, the end user
and tags; forward and relay: node, usage, timings) and is what the usage
event is built from at the end. Request ids are unique across processes
without a system call per call; trace and span ids (``console.kernel.tracing``)
need none either.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
from typing import TYPE_CHECKING, Any

from console.kernel.tracing import Trace, start_span
from gateway_bridge.protocols.base import GatewayError
from gateway_bridge.usage_mapping import TokenUsage

if TYPE_CHECKING:
    from gateway_bridge.state import KeyEntry
    from inference_node.facade import CostPrice

# No usage known (yet): the call reached no node, or the node never said.
NO_USAGE = TokenUsage()
# No tags: one shared empty mapping (a call's tags are never changed in place).
NO_TAGS: dict[str, str] = {}


# Request ids: unique across processes (a random per-process part, new in a
# forked child) without a system call per request.
_ID_PREFIX = ""
_ID_COUNTER = itertools.count()


def _new_id_space() -> None:
    global _ID_PREFIX, _ID_COUNTER
    _ID_PREFIX = secrets.token_hex(6)
    _ID_COUNTER = itertools.count(int.from_bytes(secrets.token_bytes(4), "big"))


_new_id_space()
os.register_at_fork(after_in_child=_new_id_space)


def safe_model(name: object) -> str:
    """``name`` when it is a plausible model name, else ``"(unknown)"`` (what
    a client sent is never echoed into events or metrics unchecked)."""
    if isinstance(name, str) and 0 < len(name) <= 128 and name.isprintable() and "\\" not in name:
        return name
    return "(unknown)"


class Call:
    """Per-call state, filled as the call goes; becomes the usage event."""

    __slots__ = (
        "cache_status",
        "client_headers",
        "client_ip",
        "cost_price",
        "credential_id",
        "emitted",
        "end_user",
        "endpoint",
        "entry",
        "error_type",
        "headers_out",
        "model",
        "node_id",
        "node_name",
        "protocol",
        "queue_s",
        "record",
        "request_id",
        "span",
        "started",
        "status",
        "stream",
        "t0",
        "tags",
        "trace",
        "ttft",
        "upstream_s",
        "usage",
    )

    request_id: str
    trace: Trace
    span: Any  # an OpenTelemetry span, None without an SDK
    t0: float
    started: float
    protocol: str
    endpoint: str
    # Set by the auth stage; every stage after it reads it unchecked (a call
    # that ends before auth is never recorded: ``entry is None`` there).
    entry: KeyEntry
    model: str | None
    node_id: int | None
    node_name: str | None
    credential_id: int | None
    cost_price: CostPrice | None
    stream: bool
    status: int
    error_type: str
    usage: TokenUsage
    ttft: float | None
    upstream_s: float | None
    queue_s: float
    client_ip: str | None
    client_headers: dict[str, str]
    cache_status: str
    end_user: str
    tags: dict[str, str]
    headers_out: list[tuple[bytes, bytes]]
    record: bool
    emitted: bool

    def __init__(self, protocol: str, endpoint: str, traceparent: str | None = None) -> None:
        self.request_id = f"req_{_ID_PREFIX}{next(_ID_COUNTER):012x}"
        # The caller's W3C trace continued (a valid ``traceparent``) or a new
        # one; sent on to every upstream try (forward) and in the access line.
        self.trace = Trace.incoming(traceparent)
        # The "gateway.call" OpenTelemetry span: None unless an SDK is set
        # (console.kernel.tracing); ended with the call (access_log.finish).
        self.span = start_span("gateway.call", self.trace)
        self.t0 = time.perf_counter()
        self.started = time.time()
        self.protocol = protocol
        self.endpoint = endpoint
        self.entry = None  # type: ignore[assignment]  # not yet: the auth stage sets it
        self.model = None
        self.node_id = None
        self.node_name = None
        # The key-pool credential the call went out with (None: the node's own
        # token) and what the channel's vendor charges for the model that
        # served it (inference_node's CostPrice, None: unknown).
        self.credential_id = None
        self.cost_price = None
        self.stream = False
        self.status = 200
        self.error_type = ""
        self.usage = NO_USAGE
        self.ttft = None
        self.upstream_s = None
        self.queue_s = 0.0
        self.client_ip = None
        # The client's request headers (lower-case names), for a vendor dialect
        # that passes some on (anthropic-version, anthropic-beta).
        self.client_headers = {}
        self.cache_status = "miss"
        # Cost attribution (body stage): the caller's end user ("" when none)
        # and its tags from ``x-gateway-tags`` (NO_TAGS, shared, when none;
        # never mutated).
        self.end_user = ""
        self.tags = NO_TAGS
        self.headers_out = []
        self.record = True
        self.emitted = False  # its usage event handed to the emitter (once)


class Disconnected(Exception):
    """The client went away while we were reading from or streaming to it."""


class Retry(Exception):
    """A node failure before anything reached the client: try another node."""

    def __init__(self, error: GatewayError) -> None:
        self.error = error


class StreamStarted(Exception):
    """A stream broke after bytes reached the client: no retry is possible
    (the stream already ended with an error frame, or the client left)."""

    def __init__(self, node_fault: bool) -> None:
        self.node_fault = node_fault

"""The last stage, recording: what a call leaves behind once it is answered.

``Recorder`` is made once per gateway with the gateway's metrics, its state
(the catalogue names the model label), a way to its usage emitter (made on
first use: opening it opens the spool and replays what a killed process
left) and what writes a call's access line (``gateway_bridge.access_log``'s
``finish``, which knows the call). For each call it

* hands the usage event to the emitter, once, just before the answer's last
  bytes go out (``sending``): a process killed once the client may have its
  whole answer still has the event in its journal; a call whose last bytes
  never went out (the client left) is recorded when it ends (``emit``,
  ``finish``);
* observes the call in the metrics, and writes its access line and ends its
  span (``finish``, ``gateway_bridge.access_log``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway_bridge.pipeline.usage_event import usage_event

if TYPE_CHECKING:
    from gateway_bridge.asgi import Send
    from gateway_bridge.emitter import UsageEmitter
    from gateway_bridge.metrics import GatewayMetrics
    from gateway_bridge.pipeline.call import Call
    from gateway_bridge.state import GatewayState


class Recorder:
    def __init__(
        self,
        metrics: GatewayMetrics,
        state: GatewayState,
        emitter: Callable[[], UsageEmitter],
        access_line: Callable[[Call, float, float], None],
    ) -> None:
        self.metrics = metrics
        self.state = state
        self._emitter = emitter
        self._access_line = access_line

    def sending(self, call: Call, send: Send) -> Send:
        """``send``, handing the call's usage event to the emitter (and its
        journal) just before the answer's last bytes. By then the call's
        status, tokens and cost are final."""
        emit = self.emit

        async def send_recorded(message: dict[str, Any]) -> None:
            if (
                not call.emitted
                and message["type"] == "http.response.body"
                and not message.get("more_body")
            ):
                emit(call)
            await send(message)

        return send_recorded

    def emit(self, call: Call, elapsed: float | None = None, overhead: float = 0.0) -> None:
        """The call's usage event to the emitter, once (a recorded call only)."""
        if not call.record or call.entry is None or call.emitted:
            return
        if elapsed is None:
            elapsed = time.perf_counter() - call.t0
            overhead = max(0.0, elapsed - (call.upstream_s or 0.0) - call.queue_s)
        call.emitted = True
        self._emitter().emit(usage_event(call, elapsed, overhead))

    def finish(self, call: Call) -> None:
        """The call is over: its metrics, its usage event if it is still to
        go, its access line and the end of its span."""
        elapsed = time.perf_counter() - call.t0
        upstream = call.upstream_s
        overhead = max(0.0, elapsed - (upstream or 0.0) - call.queue_s)
        metrics = self.metrics
        metrics.observe_call(
            call.protocol,
            call.endpoint,
            call.status,
            call.stream,
            elapsed,
            call.ttft,
            overhead,
            metrics.model_label(call.model, self.state.catalog),
        )
        if not call.emitted:
            self.emit(call, elapsed, overhead)
        self._access_line(call, elapsed, overhead)

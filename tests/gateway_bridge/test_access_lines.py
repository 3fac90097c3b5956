"""The gateway's access line written the fast way (the formatter's ``line``,
into a ``LineSink``) is the line the formatter's ``format`` writes for the
record, a client's hostile model name included; the sink writes every line,
in order, in batches, and what is pending when it stops."""

from __future__ import annotations

import io
import logging
import threading

import pytest

from console.kernel.logs import JsonFormatter, LineSink, PlainFormatter, line_sink
from gateway_bridge import access_log
from gateway_bridge.pipeline.call import Call

CREATED = 1_796_000_000.123456
HOSTILE = "bad\r\nmodel\x1b[31m sk-abcdef1234_SECRETsecretSECRET"


def finished_call(model: str) -> Call:
    call = Call("openai", "chat.completions", None)
    call.status = 200
    call.model = model
    call.node_name = "node-1"
    call.cache_status = "prefix_hit"
    return call


def record_of(call: Call, extra: dict) -> logging.LogRecord:
    """The record ``logger.info`` makes for the call, at ``CREATED``."""
    record = logging.getLogger("gateway_bridge.access").makeRecord(
        "gateway_bridge.access", logging.INFO, __file__, 1, "%s %s %s",
        (call.protocol, call.endpoint, call.status), None, extra=extra,
    )  # fmt: skip
    record.created = CREATED
    record.msecs = int((CREATED - int(CREATED)) * 1000)
    return record


@pytest.mark.parametrize("model", ["bench-chat", HOSTILE])
@pytest.mark.parametrize("formatter", [PlainFormatter(), JsonFormatter()])
def test_the_fast_line_is_the_formatters_line(model, formatter):
    call = finished_call(model)
    extra = access_log.fields(call, None, 0.00104, 0.00013)
    message = f"{call.protocol} {call.endpoint} {call.status}"
    fast = formatter.line(CREATED, "INFO", "gateway_bridge.access", message, extra)
    assert fast == formatter.format(record_of(call, extra))
    assert "SECRETsecret" not in fast  # masked either way
    assert "\n" not in fast and "\x1b" not in fast  # one line, no terminal escapes


def test_the_sink_writes_every_line_in_order_and_the_rest_on_stop():
    stream = io.StringIO()
    sink = LineSink(
        logging.StreamHandler(stream), PlainFormatter(), flush_seconds=0.01, max_pending=7
    )
    writers = [
        threading.Thread(target=lambda n=n: [sink.write(f"{n}-{i}") for i in range(500)])
        for n in range(4)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    sink.stop()
    lines = stream.getvalue().splitlines()
    assert sorted(lines) == sorted(f"{n}-{i}" for n in range(4) for i in range(500))
    for n in range(4):
        mine = [line for line in lines if line.startswith(f"{n}-")]
        assert mine == [f"{n}-{i}" for i in range(500)]


@pytest.fixture
def hierarchy():
    """``tests.sinkparent``, which stops propagation (the root's handlers stay
    out of it)."""
    parent = logging.getLogger("tests.sinkparent")
    parent.propagate = False
    yield parent
    for handler in list(parent.handlers):
        parent.removeHandler(handler)
    parent.propagate = True


def test_the_sink_is_used_only_for_the_settings_own_logging(hierarchy):
    name = "tests.sinkparent.access"
    # pytest adds its capture handlers to a logger that stops propagation, as
    # the test starts: only the handlers this test gives it count here.
    for capture in list(hierarchy.handlers):
        hierarchy.removeHandler(capture)
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonFormatter())
    hierarchy.addHandler(handler)
    sink = line_sink(name)
    assert sink is not None and isinstance(sink.formatter, JsonFormatter)
    sink.stop()
    handler.setFormatter(logging.Formatter("%(message)s"))  # an operator's own format
    assert line_sink(name) is None
    handler.setFormatter(PlainFormatter("%(levelname)s %(message)s"))  # ours, another format
    assert line_sink(name) is None
    handler.setFormatter(PlainFormatter())
    hierarchy.addHandler(logging.NullHandler())  # a second destination
    assert line_sink(name) is None


def test_with_the_sink_a_handler_on_the_logger_still_gets_each_record(hierarchy, monkeypatch):
    stream = io.StringIO()
    sink = LineSink(logging.StreamHandler(stream), PlainFormatter(), flush_seconds=0.01)
    monkeypatch.setattr(access_log, "_sink", sink)
    logger = logging.getLogger("gateway_bridge.access")
    got: list[logging.LogRecord] = []
    own = logging.Handler()
    own.emit = got.append  # type: ignore[method-assign]  # a recording handler
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(logger, "level", logging.INFO)
    logger.addHandler(own)
    try:
        access_log.finish(finished_call("m"), 0.002, 0.0001)
    finally:
        logger.removeHandler(own)
        sink.stop()
    assert [r.getMessage() for r in got] == ["openai chat.completions 200"]
    [written] = stream.getvalue().splitlines()
    assert "openai chat.completions 200 request_id=" in written and "model=m" in written

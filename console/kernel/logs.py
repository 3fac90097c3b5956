"""Log formats: ``LOG_FORMAT=json`` (one JSON object a line) or ``plain``.

``JsonFormatter`` writes ``ts`` (UTC, ISO 8601 with milliseconds), ``level``,
``logger``, ``message``, every field passed in ``extra=``, and ``exc`` (the
formatted traceback) when there is one. A record is masked when it is made
(``console.kernel.redact``'s record factory); the formatters mask the message, the
traceback and the extra fields once more, so a secret passed as a field, or a
record made without the factory, is masked too.

``configure_worker_logging`` is connected to Celery's ``setup_logging``
signal (``console.kernel.celery``): a worker then keeps Django's ``LOGGING`` (the
same handlers and format as the web and gateway processes) instead of
replacing the root logger's handlers with its own, and log lines written
inside a task carry ``task_id`` and ``task_name``.

``offload`` moves one logger's writes off the calling thread: the gateway
writes one access line per call from its event loop, and a write to a
stderr pipe whose reader is slow would stall every call on that loop. Its
records go through a queue to a listener thread, which formats them and hands
them to the handlers propagation would have reached.

``line_sink`` is the gateway's faster way for the same lines when logging is
configured as ``logging_config`` does it (one stream handler, one of these
formatters): the caller formats each line without a record, with the
formatter's own ``line``, and a thread writes what has gathered
every 50 ms (or at 512 lines) in one write under the handler's lock. Handing
each record to a thread cost the gateway more CPU per call than the rest of
its bookkeeping together (docs/performance.md); a batch costs one handover.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import logging
import logging.config
import logging.handlers
import queue
import threading
import time
from collections.abc import Callable

import orjson
from django.conf import settings

from console.kernel.redact import redact

# What a LogRecord has of its own: everything else came in through ``extra=``
# (uvicorn's ``color_message`` is its message again, with terminal colours).
_RESERVED = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}
_PLAIN_TYPES = (int, float, bool, type(None))
_JSON_NATIVE = frozenset(_PLAIN_TYPES)  # exactly these types (not their subclasses)


@functools.lru_cache(maxsize=4)
def _second(epoch: int) -> str:
    """``epoch`` as ISO 8601 UTC to the second (the last few remembered)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))


@functools.lru_cache(maxsize=4)
def _local_second(epoch: int) -> str:
    """``epoch`` as ``logging.Formatter`` writes ``asctime`` (local time, to the second)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def _msecs(created: float) -> int:
    """A record's ``msecs`` for ``created`` (POSIX seconds), as logging computes it."""
    return int((created - int(created)) * 1000)


def _default(value):
    return str(value)


def _field(value):
    """An extra field as JSON can hold it, masked: a string through ``redact``,
    a number as it is, anything else (a request, a dict) as its masked text or
    structure."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, _PLAIN_TYPES):
        return value
    if isinstance(value, dict | list | tuple):
        return orjson.loads(redact(orjson.dumps(value, default=_default).decode()))
    return redact(str(value))


def _extras(record: logging.LogRecord):
    for key, value in record.__dict__.items():
        if key not in _RESERVED and not key.startswith("_"):
            yield key, value


def _visible(fields: dict[str, object]):
    """``extra`` fields as a record would carry them (``_``-names are hints, not fields)."""
    return ((key, value) for key, value in fields.items() if not key.startswith("_"))


def _json_object(ts: str, level: str, name: str, message: str, extras) -> dict[str, object]:
    out: dict[str, object] = {
        "ts": ts,
        "level": level,
        "logger": name,
        "message": redact(message),
    }
    for key, value in extras:
        # Numbers and None as they are without a call (an access line has a dozen).
        out[key] = value if type(value) in _JSON_NATIVE else _field(value)
    return out


def _json_dumps(out: dict[str, object]) -> str:
    return orjson.dumps(out, default=_default, option=orjson.OPT_NON_STR_KEYS).decode()


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message, extras, exc.

    ``line`` writes the same line without a record (no traceback): for a caller
    on a hot path that formats its own lines (``LineSink``)."""

    def format(self, record: logging.LogRecord) -> str:
        ts = f"{_second(int(record.created))}.{int(record.msecs):03d}Z"
        out = _json_object(ts, record.levelname, record.name, record.getMessage(), _extras(record))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = redact(record.exc_text)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return _json_dumps(out)

    def line(
        self, created: float, level: str, name: str, message: str, fields: dict[str, object]
    ) -> str:
        ts = f"{_second(int(created))}.{_msecs(created):03d}Z"
        return _json_dumps(_json_object(ts, level, name, message, _visible(fields)))


_PLAIN_DEFAULT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _plain_extras(extras, said) -> str:
    """The fields that are strings or numbers as ``key=value``, escaped and masked
    (``said``: the fields the message already shows)."""
    parts = []
    for key, value in extras:
        if key in said or key.startswith("_"):
            continue
        if isinstance(value, str):
            if value:
                parts.append(f"{key}={_printable(value)}")
        elif isinstance(value, int | float):  # a number's text is printable (bool: True)
            parts.append(f"{key}={value!s}")
    return redact(" ".join(parts))


class PlainFormatter(logging.Formatter):
    """The plain line, then the extra fields that are strings or numbers as
    ``key=value`` (the access lines' fields; not a request object).

    ``line`` writes the same line without a record, in the default format only
    (``writes_lines``): for a caller that formats its own lines (``LineSink``)."""

    def __init__(self, fmt=None, datefmt=None, style="%", **kwargs):
        super().__init__(fmt or _PLAIN_DEFAULT, datefmt, style)
        self.writes_lines = fmt in (None, _PLAIN_DEFAULT) and datefmt is None and style == "%"

    def format(self, record: logging.LogRecord) -> str:
        # A client's path or header may carry CR, LF, ESC and the like: escaped in
        # the message and the fields, so a request can neither forge a line nor send
        # escapes to a terminal (a traceback below the line keeps its lines).
        message = record.getMessage()
        if not message.isprintable():
            record = logging.makeLogRecord({**record.__dict__, "msg": _printable(message)})
            record.args = None
        line = super().format(record)
        said = record.__dict__.get("_in_message", ())  # fields the message already shows
        extras = _plain_extras(_extras(record), said)
        if not extras:
            return line
        head, sep, tail = line.partition("\n")  # a traceback stays below the line
        return f"{head} {extras}{sep}{tail}"

    def line(
        self, created: float, level: str, name: str, message: str, fields: dict[str, object]
    ) -> str:
        asctime = f"{_local_second(int(created))},{_msecs(created):03d}"
        head = f"{asctime} {level} {name}: {_printable(message)}"
        extras = _plain_extras(fields.items(), fields.get("_in_message", ()))
        return f"{head} {extras}" if extras else head


def _printable(text: str) -> str:
    """``text`` with every non-printable character as its escape (``\\r``, ``\\x1b``)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


class TaskContextFilter(logging.Filter):
    """Adds the running Celery task's id and name to a record (a worker's handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        # deferred: Celery loads only in a worker (the settings import this module)
        from celery import current_task

        task = current_task
        if task and getattr(task, "request", None) is not None and task.request.id:
            record.__dict__.setdefault("task_id", task.request.id)
            record.__dict__.setdefault("task_name", task.name)
        return True


def configure_worker_logging(loglevel=None, **_kwargs) -> None:
    """Celery's ``setup_logging`` receiver: Django's ``LOGGING`` for the worker
    too (connecting a receiver is what stops Celery from installing its own),
    at the worker's ``--loglevel`` when it was given one."""
    logging.config.dictConfig(settings.LOGGING)
    root = logging.getLogger()
    if loglevel:
        root.setLevel(loglevel)
    task_filter = TaskContextFilter()
    for handler in root.handlers:
        if not any(isinstance(f, TaskContextFilter) for f in handler.filters):
            handler.addFilter(task_filter)


def logging_config(*, log_format: str, level: str, access_log: bool) -> dict:
    """``LOGGING`` for settings: one stderr handler in ``log_format``; the
    access loggers (``console.access``, ``gateway_bridge.access``,
    ``console.access.task``) at INFO, or off with ``access_log`` False;
    uvicorn's loggers through the same handler, its access log off (ours
    replace it)."""
    access_level = "INFO" if access_log else "WARNING"
    formatter = "json" if log_format == "json" else "plain"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "plain": {"()": "console.kernel.logs.PlainFormatter"},
            "json": {"()": "console.kernel.logs.JsonFormatter"},
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": formatter}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django.db.backends": {"level": "WARNING"},
            # fontTools reports every table it subsets into an invoice PDF at INFO.
            "fontTools": {"level": "WARNING"},
            # uvicorn installs its own handlers before Django starts: ours replace
            # them (its --log-level stays: no level here). Its access line is
            # replaced by ours, which say more (console.access, gateway_bridge.access).
            "uvicorn": {"handlers": ["console"], "propagate": False},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "console.access": {"level": access_level},
            "gateway_bridge.access": {"level": access_level},
        },
    }


class _Enqueue(logging.handlers.QueueHandler):
    """Queue the record as it is: formatting, like writing, is the listener's
    work (the access lines' fields are plain values, safe to hand over)."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


class _Propagate(logging.Handler):
    """The listener's one handler: what propagation from ``logger`` would have
    done, read when each record arrives (so handlers configured later count)."""

    def __init__(self, logger: logging.Logger):
        super().__init__()
        self._logger = logger

    def handle(self, record: logging.LogRecord) -> bool:
        parent = self._logger.parent
        while parent is not None:
            for handler in parent.handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)
            if not parent.propagate:
                break
            parent = parent.parent
        return True


_offloaded: dict[str, tuple[logging.handlers.QueueListener, _Enqueue, int]] = {}
_offload_lock = threading.Lock()


def offload(name: str) -> Callable[[], None]:
    """Write logger ``name``'s propagated records from a listener thread.

    Handlers attached to the logger itself still run in the caller's thread.
    Returns ``stop``, which writes what is queued and restores propagation;
    nested calls share one listener (the last ``stop`` ends it), and an exiting
    process writes what is left."""
    logger = logging.getLogger(name)
    with _offload_lock:
        if name in _offloaded:
            listener, enqueue, users = _offloaded[name]
            _offloaded[name] = (listener, enqueue, users + 1)
        else:
            records: queue.SimpleQueue = queue.SimpleQueue()
            listener = logging.handlers.QueueListener(records, _Propagate(logger))
            enqueue = _Enqueue(records)
            logger.addHandler(enqueue)
            logger.propagate = False
            listener.start()
            _offloaded[name] = (listener, enqueue, 1)
    stopped = False

    def stop() -> None:
        nonlocal stopped
        with _offload_lock:
            if stopped or name not in _offloaded:
                return
            stopped = True
            listener, enqueue, users = _offloaded[name]
            if users > 1:
                _offloaded[name] = (listener, enqueue, users - 1)
                return
            del _offloaded[name]
            logger.removeHandler(enqueue)
            logger.propagate = True
        listener.stop()  # writes what is queued, then ends the thread

    atexit.register(stop)
    return stop


class LineSink:
    """Finished lines for one stream handler, written by a thread in batches.

    ``write`` appends to a list (the caller's thread does nothing else); the
    thread takes the list every ``flush_seconds``, or sooner when ``max_pending``
    lines wait, and writes it in one call under the handler's lock (so the
    lines never interleave with the handler's own). ``stop`` writes what is
    left. ``formatter`` is the handler's, whose ``line`` formats a line the way
    its ``format`` would."""

    def __init__(
        self,
        handler: logging.StreamHandler,
        formatter: JsonFormatter | PlainFormatter,
        *,
        flush_seconds: float = 0.05,
        max_pending: int = 512,
    ) -> None:
        self.handler = handler
        self.formatter = formatter
        self._flush_seconds = flush_seconds
        self._max_pending = max_pending
        # A deque: append and popleft are atomic, so a line written while the
        # thread drains is either taken now or left for the next drain.
        self._pending: collections.deque[str] = collections.deque()
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="log-lines", daemon=True)
        self._thread.start()

    def write(self, line: str) -> None:
        pending = self._pending
        pending.append(line)
        if len(pending) >= self._max_pending:
            self._wake.set()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self._flush_seconds)
            self._wake.clear()
            self._drain()

    def _drain(self) -> None:
        pending = self._pending
        count = len(pending)
        if not count:
            return
        text = "\n".join([pending.popleft() for _ in range(count)]) + "\n"
        handler = self.handler
        handler.acquire()
        try:
            # A closed or broken stream loses the lines: logging never raises either.
            with contextlib.suppress(OSError, ValueError):
                handler.stream.write(text)
                handler.flush()
        finally:
            handler.release()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(5)
        self._drain()


def _reached_handlers(logger: logging.Logger) -> list[logging.Handler]:
    """The handlers propagation from ``logger`` reaches (not its own)."""
    found: list[logging.Handler] = []
    parent = logger.parent
    while parent is not None:
        found.extend(parent.handlers)
        if not parent.propagate:
            break
        parent = parent.parent
    return found


def line_sink(name: str) -> LineSink | None:
    """A ``LineSink`` for logger ``name`` when its records would reach exactly one
    handler, a plain ``StreamHandler`` with ``PlainFormatter`` or ``JsonFormatter``
    at a level that passes INFO (what ``logging_config`` sets up); else None
    (an operator's own logging: use ``offload``)."""
    logger = logging.getLogger(name)
    handlers = _reached_handlers(logger)
    if not logger.propagate or len(handlers) != 1:
        return None
    (handler,) = handlers
    if type(handler) is not logging.StreamHandler or handler.level > logging.INFO:
        return None
    if handler.filters:
        return None
    formatter = handler.formatter
    if type(formatter) is JsonFormatter or (
        type(formatter) is PlainFormatter and formatter.writes_lines
    ):
        return LineSink(handler, formatter)
    return None

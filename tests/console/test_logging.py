"""Logs and error reporting (issue 20): the JSON and plain formats, the
console's access line and request id, Celery on the same handlers, and
Sentry / OpenTelemetry set up only when configured."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import threading
import types
import weakref

import pytest
from django.urls import reverse

from console.kernel import logs, observability
from console.kernel.celery import app as celery_app
from console.kernel.request_log import request_id_from
from console.kernel.tracing import Trace, parse_traceparent
from tests.services import require

SECRET_KEY = "sk-abcdef1234_" + "s" * 43
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def record(msg="hello %s", args=("world",), exc_info=None, **extra):
    rec = logging.LogRecord("some.logger", logging.WARNING, __file__, 1, msg, args, exc_info)
    rec.__dict__.update(extra)
    return rec


# --- formats ----------------------------------------------------------------


def test_json_line_has_the_fields_extras_and_exception():
    try:
        raise ValueError("boom")
    except ValueError:
        exc = sys.exc_info()
    line = logs.JsonFormatter().format(
        record(exc_info=exc, request_id="req_1", status=200, ok=True, ratio=0.5, org=None)
    )
    assert "\n" not in line
    out = json.loads(line)
    assert out["ts"].endswith("Z") and out["ts"][10] == "T"
    assert (out["level"], out["logger"], out["message"]) == (
        "WARNING",
        "some.logger",
        "hello world",
    )
    assert (out["request_id"], out["status"], out["ok"], out["ratio"], out["org"]) == (
        "req_1", 200, True, 0.5, None,
    )  # fmt: skip
    assert "ValueError: boom" in out["exc"]
    assert "msg" not in out and "args" not in out and "_in_message" not in out


def test_json_masks_secrets_in_the_message_and_the_fields():
    rec = record(
        "called with %s",
        (SECRET_KEY,),
        key=SECRET_KEY,
        nested={"auth": SECRET_KEY},
        obj=types.SimpleNamespace(k=SECRET_KEY),
    )
    line = logs.JsonFormatter().format(rec)
    assert "s" * 43 not in line
    out = json.loads(line)
    assert out["key"] == "sk-abcdef1234_[redacted]"
    assert out["nested"] == {"auth": "sk-abcdef1234_[redacted]"}


def test_plain_line_appends_the_simple_fields():
    rec = record(
        "GET /x 200",
        (),
        request_id="req_1",
        method="GET",
        status=200,
        request=object(),
        empty="",
        _in_message=("method", "status"),
    )
    line = logs.PlainFormatter().format(rec)
    assert line.endswith("WARNING some.logger: GET /x 200 request_id=req_1")


def test_plain_line_escapes_what_a_client_sent_to_forge_lines_or_drive_a_terminal():
    # A path with CR, LF and ESC (a fuzzer sends such) stays one line, escaped.
    rec = record("%s %s", ("POST", "/api/v1/nodes/9\r\nFAKE 200\x1b[2J/"), agent="a\nb")
    line = logs.PlainFormatter().format(rec)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line.endswith("POST /api/v1/nodes/9\\r\\nFAKE 200\\x1b[2J/ agent=a\\nb")


@pytest.mark.parametrize("fmt", ["json", "plain"])
def test_logging_config_routes_every_logger_through_one_formatter(fmt):
    config = logs.logging_config(log_format=fmt, level="INFO", access_log=True)
    assert config["handlers"]["console"]["formatter"] == fmt
    assert config["root"]["handlers"] == ["console"]
    assert config["loggers"]["uvicorn"]["handlers"] == ["console"]
    assert config["loggers"]["uvicorn.access"]["handlers"] == []  # ours replace it
    assert config["loggers"]["gateway_bridge.access"]["level"] == "INFO"
    off = logs.logging_config(log_format=fmt, level="INFO", access_log=False)
    assert off["loggers"]["console.access"]["level"] == "WARNING"


# --- Celery -----------------------------------------------------------------


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


def test_celery_keeps_django_logging(settings, restore_logging):
    from celery import signals

    # A receiver of setup_logging is what stops Celery from installing its own handlers.
    receivers = [
        r() if isinstance(r, weakref.ref) else r for _, r in signals.setup_logging.receivers
    ]
    assert logs.configure_worker_logging in receivers
    settings.LOGGING = logs.logging_config(log_format="json", level="INFO", access_log=True)
    signals.setup_logging.send(
        sender=None, loglevel=logging.WARNING, logfile=None, format="", colorize=False
    )
    root = logging.getLogger()
    assert root.level == logging.WARNING
    [handler] = [h for h in root.handlers if isinstance(h.formatter, logs.JsonFormatter)]
    assert any(isinstance(f, logs.TaskContextFilter) for f in handler.filters)

    @celery_app.task(name="tests.logging_probe", bind=True)
    def probe(self):
        rec = record()
        handler.filter(rec)
        return json.loads(handler.format(rec))

    out = probe.apply(task_id="task-123").get()
    assert out["task_id"] == "task-123" and out["task_name"] == "tests.logging_probe"
    assert out["level"] == "WARNING"


def test_a_task_run_writes_one_line():
    logger = logging.getLogger("console.access.task")
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, rec):
            records.append(rec)

    handler = Collect()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:

        @celery_app.task(name="tests.logging_noop")
        def noop():
            return 1

        noop.apply(task_id="task-456")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    [rec] = records
    out = json.loads(logs.JsonFormatter().format(rec))
    assert (out["task_id"], out["task_name"], out["state"]) == (
        "task-456", "tests.logging_noop", "SUCCESS",
    )  # fmt: skip
    assert out["duration_ms"] >= 0


# --- the console's access line ------------------------------------------------


@pytest.fixture
def access_lines():
    logger = logging.getLogger("console.access")
    lines: list[dict] = []

    class Collect(logging.Handler):
        def emit(self, rec):
            lines.append(json.loads(logs.JsonFormatter().format(rec)))

    handler = Collect()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.mark.django_db
def test_console_request_line_and_request_id(client, access_lines):
    resp = client.get("/login/", HTTP_X_REQUEST_ID="abc-123", HTTP_TRACEPARENT=TRACEPARENT)
    assert resp["X-Request-Id"] == "abc-123"
    [line] = access_lines
    assert line["logger"] == "console.access"
    assert (line["request_id"], line["trace_id"]) == ("abc-123", TRACE_ID)
    assert (line["method"], line["path"], line["status"]) == ("GET", "/login/", resp.status_code)
    assert line["duration_ms"] >= 0
    assert line["organization_id"] is None and line["user_id"] is None

    resp = client.get("/login/", HTTP_X_REQUEST_ID="bad id\nwith newline", HTTP_TRACEPARENT="x")
    line = access_lines[1]
    assert line["request_id"] == resp["X-Request-Id"] and line["request_id"].startswith("req_")
    assert line["trace_id"] != TRACE_ID and len(line["trace_id"]) == 32

    # Probes (/healthz, /readyz) are answered before the access log: no line for them.
    client.get("/healthz")
    assert len(access_lines) == 2


def test_console_request_line_names_the_organization_and_user(client, owner, access_lines):
    client.force_login(owner.user)
    resp = client.get(reverse("console:overview"), HTTP_AUTHORIZATION=f"Bearer {SECRET_KEY}")
    assert resp.status_code == 200
    [line] = access_lines
    assert line["organization_id"] == owner.organization_id
    assert line["user_id"] == owner.user_id
    assert "s" * 43 not in json.dumps(line)


def test_request_id_rules():
    assert request_id_from("req_abc.1:2") == "req_abc.1:2"
    for bad in (None, "", "x" * 129, "a b", "é", "a\nb", "<script>"):
        assert request_id_from(bad).startswith("req_")


def test_traceparent_rules():
    assert parse_traceparent(f" {TRACEPARENT} ") == (TRACE_ID, "00f067aa0ba902b7", "01")
    assert parse_traceparent(f"00-{TRACE_ID}-00f067aa0ba902b7-zz") is None
    assert parse_traceparent(f"ff-{TRACE_ID}-00f067aa0ba902b7-01") is None
    assert parse_traceparent(f"00-{TRACE_ID[:-1]}-00f067aa0ba902b7-01") is None
    new = Trace.incoming(None)
    assert new.parent_id is None and new.flags == "01"
    assert parse_traceparent(new.header) == (new.trace_id, new.span_id, "01")
    assert Trace.incoming(None).trace_id != new.trace_id


# --- Sentry and OpenTelemetry ---------------------------------------------------


@pytest.fixture
def fake_sentry(monkeypatch):
    calls: list[dict] = []
    sdk = types.ModuleType("sentry_sdk")
    sdk.init = lambda **kwargs: calls.append(kwargs)
    integrations = types.ModuleType("sentry_sdk.integrations")
    django_mod = types.ModuleType("sentry_sdk.integrations.django")
    celery_mod = types.ModuleType("sentry_sdk.integrations.celery")
    django_mod.DjangoIntegration = type("DjangoIntegration", (), {})
    celery_mod.CeleryIntegration = type("CeleryIntegration", (), {})
    for name, module in {
        "sentry_sdk": sdk,
        "sentry_sdk.integrations": integrations,
        "sentry_sdk.integrations.django": django_mod,
        "sentry_sdk.integrations.celery": celery_mod,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    return calls, django_mod, celery_mod


def test_sentry_is_started_with_a_dsn(fake_sentry):
    calls, django_mod, celery_mod = fake_sentry
    assert observability.setup_sentry("https://k@sentry.example/1", environment="prod")
    [kwargs] = calls
    assert kwargs["dsn"] == "https://k@sentry.example/1"
    assert kwargs["send_default_pii"] is False
    assert kwargs["environment"] == "prod"
    assert kwargs["max_request_body_size"] == "never"
    assert kwargs["include_local_variables"] is False
    event = {"message": f"failed with {SECRET_KEY}", "extra": {"k": [SECRET_KEY]}}
    scrubbed = kwargs["before_send"](event, {})
    assert "s" * 43 not in json.dumps(scrubbed)
    assert scrubbed["extra"]["k"] == ["sk-abcdef1234_[redacted]"]
    django_integration, celery_integration = kwargs["integrations"]
    assert isinstance(django_integration, django_mod.DjangoIntegration)
    assert isinstance(celery_integration, celery_mod.CeleryIntegration)


SENTRY_CHECK = """
import django, json, os
os.environ["DJANGO_SETTINGS_MODULE"] = "console.settings"
django.setup()
import sentry_sdk
from console.kernel import observability
assert observability.setup_sentry("http://k@127.0.0.1:9/1", environment="ci")
options = sentry_sdk.get_client().options
collected = options.get("data_collection") or {}
print(json.dumps({
    "version": sentry_sdk.VERSION,
    "integrations": sorted(type(i).__name__ for i in sentry_sdk.get_client().integrations.values()),
    "pii": options.get("send_default_pii", collected.get("user_info")),
    "frame_variables": options.get("include_local_variables", collected.get("stack_frame_variables")),
    "bodies": options.get("max_request_body_size"),
}))
"""


def test_sentry_starts_with_the_sdk_the_lock_pins(tmp_path):
    """The real sentry-sdk of requirements.lock (the ``sentry`` extra) accepts
    the options, with no personal data, frame variables or bodies collected."""
    require(importlib.util.find_spec("sentry_sdk") is not None, "sentry-sdk is not installed")
    env = {**os.environ, "CONSOLE_VAR_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", SENTRY_CHECK], env=env, capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"DjangoIntegration", "CeleryIntegration"} <= set(got["integrations"])
    assert got["pii"] is False and got["frame_variables"] is False
    assert got["bodies"] == "never"


def test_sentry_is_not_started_without_a_dsn(fake_sentry):
    calls, *_ = fake_sentry
    assert not observability.setup_sentry("")
    assert calls == []


def test_a_dsn_without_sentry_sdk_warns_once(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "sentry_sdk", None)  # import fails
    with caplog.at_level(logging.WARNING, logger="console.kernel.observability"):
        assert not observability.setup_sentry("https://k@sentry.example/1")
    [warning] = caplog.records
    assert "sentry-sdk is not installed" in warning.getMessage()


def test_otel_export_needs_an_endpoint_and_the_sdk(monkeypatch, caplog):
    assert not observability.setup_otel("", service_name="x")
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter", None)
    with caplog.at_level(logging.WARNING, logger="console.kernel.observability"):
        assert not observability.setup_otel("http://127.0.0.1:4318", service_name="x")
    [warning] = caplog.records
    assert "pip install opentelemetry-sdk" in warning.getMessage()


@pytest.mark.django_db
def test_console_request_line_masks_an_invitation_token(client, access_lines):
    token = "tok" + "t" * 40
    client.get(f"/invite/{token}/")
    [line] = access_lines
    assert line["path"] == "/invite/[redacted]/"
    assert token not in json.dumps(line)


# --- off the event loop ------------------------------------------------------


class _Threads(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, str]] = []

    def emit(self, record):
        self.seen.append((record.getMessage(), threading.current_thread().name))


def test_an_offloaded_logger_writes_from_its_own_thread_and_loses_nothing(restore_logging):
    """The gateway's access lines are written by a listener thread, never by
    the event loop that served the call; stopping writes every queued line."""
    root = logging.getLogger()
    handler = _Threads()
    root.addHandler(handler)
    logger = logging.getLogger("tests.offloaded")
    logger.setLevel(logging.INFO)
    stop = logs.offload("tests.offloaded")
    stop_nested = logs.offload("tests.offloaded")  # a second Router in the process
    try:
        assert logger.propagate is False
        for i in range(500):
            logger.info("call %d", i)
        stop_nested()
        logger.info("after the nested stop")
    finally:
        stop()
    assert logger.propagate is True
    messages = [message for message, _ in handler.seen]
    assert messages == [f"call {i}" for i in range(500)] + ["after the nested stop"]
    assert {thread for _, thread in handler.seen} != {threading.current_thread().name}
    logger.info("after stop")  # back to the caller's thread
    assert handler.seen[-1] == ("after stop", threading.current_thread().name)

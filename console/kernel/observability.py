"""Error reporting and span export, each on only when configured (issue 20).

``setup`` runs once per process (``ConsoleConfig.ready``: web, gateway,
Celery worker and beat):

* ``SENTRY_DSN`` set: ``sentry_sdk.init`` with the Django and Celery
  integrations and ``send_default_pii=False`` (no user, cookie or address is
  sent), no request bodies (prompts) and no frame variables (a key or a
  vendor credential could be one); ``console.kernel.redact`` masks keys in what is
  sent (``scrub_event``). The gateway's unexpected errors reach Sentry through
  its logging integration (they are logged at ERROR). Without sentry-sdk
  installed (``pip install sentry-sdk``), one warning and nothing else.
* ``OTEL_EXPORTER_OTLP_ENDPOINT`` set: an OpenTelemetry SDK tracer provider
  exporting over OTLP/HTTP in batches, so the spans of ``console.kernel.tracing``
  ("gateway.call", "usage.ingest") are recorded. Without the SDK and exporter
  (``pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http``,
  or ``.[otel]``), one warning. A tracer provider someone else set
  (``opentelemetry-instrument``) is left alone.

Neither is needed for the JSON logs or for ``traceparent`` propagation.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import orjson
from django.conf import settings

from console.kernel.redact import redact

logger = logging.getLogger(__name__)

_done = False


def setup() -> None:
    """Start error reporting and span export as configured (idempotent)."""
    global _done
    if _done:
        return
    _done = True
    setup_sentry(
        settings.SENTRY_DSN,
        environment=settings.SENTRY_ENVIRONMENT,
        traces_sample_rate=settings.SENTRY_TRACES_SAMPLE_RATE,
    )
    setup_otel(settings.OTEL_EXPORTER_OTLP_ENDPOINT, service_name=settings.OTEL_SERVICE_NAME)


def setup_sentry(dsn: str, *, environment: str = "", traces_sample_rate: float = 0.0) -> bool:
    """``sentry_sdk.init`` with the Django and Celery integrations when ``dsn``
    is set; whether it was."""
    if not dsn:
        return False
    try:
        sentry_sdk = importlib.import_module("sentry_sdk")
        django_integration = importlib.import_module("sentry_sdk.integrations.django")
        celery_integration = importlib.import_module("sentry_sdk.integrations.celery")
    except ImportError:
        logger.warning("SENTRY_DSN is set but sentry-sdk is not installed: errors are not reported")
        return False
    options: dict[str, Any] = {
        "dsn": dsn,
        "integrations": [
            django_integration.DjangoIntegration(),
            celery_integration.CeleryIntegration(),
        ],
        "environment": environment or None,
        # Prompts are customers' data, and a frame's variables may hold a key or
        # a vendor credential: neither leaves the process.
        "max_request_body_size": "never",
        "before_send": scrub_event,
        "traces_sample_rate": traces_sample_rate,
    }
    if _major(sentry_sdk) >= 3:
        # 3.x says what is collected in one option (the 2.x flags are gone).
        options["data_collection"] = {
            "user_info": False,
            "cookies": {"mode": "off"},
            "http_bodies": [],
            "stack_frame_variables": False,
            "database_query_data": False,
        }
    else:
        options.update(
            send_default_pii=False,
            include_local_variables=False,
            before_send_transaction=scrub_event,
        )
    sentry_sdk.init(**options)
    return True


def _major(module: Any) -> int:
    version = str(getattr(module, "VERSION", "0"))
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def scrub_event(event: dict, _hint=None) -> dict:
    """The event with ``console.kernel.redact`` applied to all its text (gateway keys,
    access tokens, invitation links), whatever field they hide in."""
    try:
        return orjson.loads(redact(orjson.dumps(event, default=str).decode()))
    except (TypeError, orjson.JSONDecodeError):  # never lose the report over the mask
        return event


def setup_otel(endpoint: str, *, service_name: str) -> bool:
    """An SDK tracer provider exporting to ``endpoint`` (OTLP over HTTP) when
    it is set and the SDK is installed; whether one was set."""
    if not endpoint:
        return False
    try:
        # optional dependency, each of these (the SDK and its exporter: the otel extra)
        from opentelemetry import trace  # optional
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # optional
            OTLPSpanExporter,
        )
        from opentelemetry.sdk.resources import Resource  # optional
        from opentelemetry.sdk.trace import TracerProvider  # optional
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # optional
    except ImportError:
        logger.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed "
            "(pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http): "
            "no spans are exported"
        )
        return False
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return False  # already configured (opentelemetry-instrument, a test)
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    # The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT (and _HEADERS, ...) itself,
    # adding /v1/traces to the base address as the specification says.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True

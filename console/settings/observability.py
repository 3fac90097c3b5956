"""Logging (format, level, access log), Sentry and OpenTelemetry."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from console.kernel import config, logs
from console.settings.base import PRODUCTION

# --- observability (issue 20) -----------------------------------------------
# LOG_FORMAT: "json" (one JSON object a line, for a log pipeline) or "plain"
# (for a person at a terminal). Default: json with CONSOLE_PRODUCTION, plain
# otherwise (`manage.py up` on a laptop). The same handlers serve the web, the
# gateway and Celery (console.kernel.logs). ACCESS_LOG=false silences the per-request
# lines (console.access, gateway_bridge.access) and leaves the rest.
LOG_FORMAT = config.env_str("LOG_FORMAT", "json" if PRODUCTION else "plain").lower()
if LOG_FORMAT not in ("json", "plain"):
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r} is not one of: json, plain")
LOG_LEVEL = config.env_str("LOG_LEVEL", "INFO").upper()
ACCESS_LOG = config.env_bool("ACCESS_LOG", True)
LOGGING = logs.logging_config(log_format=LOG_FORMAT, level=LOG_LEVEL, access_log=ACCESS_LOG)
# Error reporting: with SENTRY_DSN set and sentry-sdk installed, errors go to
# Sentry (Django and Celery integrations, no personal data); console.kernel.observability.
SENTRY_DSN = config.env_str("SENTRY_DSN")
SENTRY_ENVIRONMENT = config.env_str("SENTRY_ENVIRONMENT", "production" if PRODUCTION else "local")
SENTRY_TRACES_SAMPLE_RATE = config.env_float("SENTRY_TRACES_SAMPLE_RATE", 0.0, minimum=0.0)
# OpenTelemetry: with OTEL_EXPORTER_OTLP_ENDPOINT set and the SDK installed
# (pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http), spans
# of each gateway call and usage ingest are exported over OTLP/HTTP. The SDK
# reads the other OTEL_* variables itself (headers, sampler, resource).
OTEL_EXPORTER_OTLP_ENDPOINT = config.env_str("OTEL_EXPORTER_OTLP_ENDPOINT")
OTEL_SERVICE_NAME = config.env_str("OTEL_SERVICE_NAME", "token-billing-console")

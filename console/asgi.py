"""ASGI entry point: one port for the console, its API and the gateway bridge.
The gateway owns the model-protocol paths (/v1/..., /v1beta/..., /metrics);
Django answers the rest (see gateway_bridge.app), behind a byte limit on
request bodies (console.body_limit). Serve it with console.server's protocol
(``up`` does) for the header, body and keep-alive timeouts and the
per-address connection cap."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_application = get_asgi_application()

from console.body_limit import BodyLimit  # noqa: E402 - needs Django set up first
from gateway_bridge.facade import Router  # noqa: E402

application = Router(BodyLimit(django_application))

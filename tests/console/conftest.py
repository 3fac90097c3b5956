"""The gateway fixtures (a simulator node, a tenant with a key, a running
gateway) for the console tests that call through one: ``manage.py up``'s
readiness check."""

from tests.gateway_bridge.conftest import (  # noqa: F401 - fixtures
    gateway_settings,
    gw,
    sim,
    start_gateway,
    tenant,
)

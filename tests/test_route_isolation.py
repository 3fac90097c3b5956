"""Every console or API route that takes an object id must be proven
unreachable from another organization. Each app's ``tests/<app>/test_views.py``
declares the routes it covers in ``ISOLATED_ROUTES``; a new object route with
no case fails here."""

import importlib

from django.urls import get_resolver

APP_TEST_MODULES = [
    "tests.accounts.test_views",
    "tests.inference_node.test_views",
    "tests.usage.test_views",
    "tests.invoicing.test_views",
    "tests.webhooks.test_views",
    "tests.capacity.test_views",
    "tests.alerts.test_views",
]


def _object_routes(patterns, ns=None):
    for pattern in patterns:
        sub = getattr(pattern, "url_patterns", None)
        if sub is not None:
            inner = getattr(pattern, "namespace", None) or ns
            if inner == "admin":  # Django admin: platform staff only
                continue
            yield from _object_routes(sub, inner)
        elif "<" in str(pattern.pattern):
            yield f"{ns}:{pattern.name}" if ns else pattern.name


def test_every_object_route_is_covered_by_the_isolation_tests():
    covered: set[str] = set()
    for name in APP_TEST_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        covered |= set(getattr(module, "ISOLATED_ROUTES", ()))
    missing = set(_object_routes(get_resolver().url_patterns)) - covered
    assert missing == set(), f"new object routes need a tenant-isolation case: {sorted(missing)}"

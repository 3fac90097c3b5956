"""Liveness and readiness probes for load balancers and orchestrators.

* ``GET /livez`` (liveness without dependencies, ``console.views.livez``): the
  process answers; nothing else is touched. A Kubernetes liveness probe
  (deploy/k8s, docs/deployment.md): a database outage must not restart pods.
* ``GET /healthz`` (liveness, ``console.views.health``): the process answers
  and reaches its database. Restart the process when it fails.
* ``GET /readyz`` (readiness, ``console.views.readyz``): every service this
  process needs answers, each within ``CONSOLE_READYZ_TIMEOUT_SECONDS``: the
  database; the shared cache (Redis) when one is configured; the Celery broker
  (the filesystem broker: its folders are there and writable). ``200`` when
  all do, ``503`` when one does not; the JSON body names each check::

      {"status": "unavailable",
       "checks": {"database": {"ok": true, "ms": 1.2},
                  "broker": {"ok": false, "ms": 2000.0, "error": "timeout"}}}

  Take the process out of rotation while it fails; do not restart it (a
  restart does not bring a database back). An error is named by its class
  only (``OperationalError``, ``timeout``): the probe is public, the detail
  goes to the log (logger ``console.kernel.probes``).

Both are answered by ``ProbeMiddleware``, first in ``MIDDLEWARE``: before
``SecurityMiddleware``'s HTTPS redirect and ``CommonMiddleware``'s
``ALLOWED_HOSTS`` check. A load balancer or kubelet probes the process by its
own address over plain HTTP (``Host: 10.0.3.7:8000``), which would otherwise
get a 400 (``DisallowedHost``) or a 301 to ``https://``. They are still routed
by the URL configuration (``console:health``, ``console:readyz``); the
middleware only calls them early.

Each check runs on a daemon thread of its own, at most one run of each at a
time: a probe that arrives while the last run of a check still waits (a
database that stopped answering) shares that run's outcome instead of
starting another, so a hung service never piles up threads, and never holds
up the process's exit. An async view awaits them, so a slow check never
holds the thread that serves the console's other (synchronous) pages.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.db import connections
from django.urls import Resolver404, resolve

logger = logging.getLogger(__name__)

PROBE_PATHS = frozenset({"/livez", "/healthz", "/readyz"})
LOCAL_CACHES = ("LocMemCache", "DummyCache")


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    ms: float
    error: str = ""  # the exception's class name, or "timeout"

    def as_json(self) -> dict:
        out: dict = {"ok": self.ok, "ms": round(self.ms, 1)}
        if self.error:
            out["error"] = self.error
        return out


# --- the checks: each raises when its service does not answer ----------------


def check_database() -> None:
    connection = connections["default"]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connection.close()  # this pool thread's connection (pooled: back to the pool)


def check_cache() -> None:
    cache.get("console:readyz")


def check_broker() -> None:
    # deferred: the Celery app and its broker transport load only when /readyz asks
    from console.kernel.celery import app

    timeout = settings.CONSOLE_READYZ_TIMEOUT_SECONDS
    with app.connection_for_write(connect_timeout=timeout) as connection:
        if connection.transport_cls == "filesystem":
            options = connection.transport_options
            for key in ("data_folder_in", "data_folder_out", "control_folder"):
                folder = options.get(key)
                if folder and not os.access(folder, os.W_OK | os.X_OK):
                    raise FileNotFoundError(f"the broker folder {folder} is not writable")
            return
        connection.ensure_connection(max_retries=0)


CHECKS: dict[str, Callable[[], None]] = {
    "database": check_database,
    "cache": check_cache,
    "broker": check_broker,
}


def configured_checks() -> list[str]:
    """The checks this process's settings call for: the cache only when it is
    shared (Redis), not an in-process one."""
    names = ["database"]
    backend = settings.CACHES["default"]["BACKEND"]
    if not backend.endswith(LOCAL_CACHES):
        names.append("cache")
    names.append("broker")
    return names


# --- running them: one run of each at a time, each on a daemon thread --------

_in_flight: dict[str, Future] = {}
_in_flight_lock = threading.Lock()


def _run(name: str) -> CheckResult:
    started = time.monotonic()
    try:
        CHECKS[name]()
    except Exception as exc:
        logger.warning("readiness check %s failed: %s: %s", name, exc.__class__.__name__, exc)
        return CheckResult(False, (time.monotonic() - started) * 1000, exc.__class__.__name__)
    return CheckResult(True, (time.monotonic() - started) * 1000)


def _submit(name: str) -> Future:
    with _in_flight_lock:
        running = _in_flight.get(name)
        if running is None or running.done():
            running = _in_flight[name] = Future()
            threading.Thread(
                target=lambda: running.set_result(_run(name)), name=f"readyz-{name}", daemon=True
            ).start()
        return running


def _report(names: list[str], futures: list[Future], timeout: float) -> tuple[int, dict]:
    checks = {}
    for name, future in zip(names, futures, strict=True):
        if future.done():
            checks[name] = future.result().as_json()
        else:
            logger.warning("readiness check %s did not answer within %ss", name, timeout)
            checks[name] = CheckResult(False, timeout * 1000, "timeout").as_json()
    ok = all(c["ok"] for c in checks.values())
    return (200 if ok else 503), {"status": "ok" if ok else "unavailable", "checks": checks}


async def readiness() -> tuple[int, dict]:
    """The HTTP status and JSON body of ``/readyz``."""
    timeout = settings.CONSOLE_READYZ_TIMEOUT_SECONDS
    names = configured_checks()
    futures = [_submit(name) for name in names]
    await asyncio.wait([asyncio.wrap_future(f) for f in futures], timeout=timeout)
    return _report(names, futures, timeout)


# --- answered before the host check and the HTTPS redirect -------------------


class ProbeMiddleware:
    """Answer ``GET``/``HEAD /livez``, ``/healthz`` and ``/readyz`` before every other
    middleware (see the module docstring); pass everything else on."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    @staticmethod
    def _probe_view(request):
        if request.method not in ("GET", "HEAD") or request.path_info not in PROBE_PATHS:
            return None
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return None
        if match.namespace != "console" or match.url_name not in ("livez", "health", "readyz"):
            return None
        return match.func

    def __call__(self, request):
        if self.is_async:
            return self.__acall__(request)
        view = self._probe_view(request)
        if view is None:
            return self.get_response(request)
        return async_to_sync(view)(request) if iscoroutinefunction(view) else view(request)

    async def __acall__(self, request):
        view = self._probe_view(request)
        if view is None:
            return await self.get_response(request)
        if iscoroutinefunction(view):
            return await view(request)
        return await sync_to_async(view)(request)

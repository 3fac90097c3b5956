"""Which real services a test may use, and the rule for when they are missing:
skip with a reason locally, fail under CI (``CI=true``), where they must run."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
CHROMIUM = "/usr/bin/chromium"


def require(condition: bool, reason: str) -> None:
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required under CI: {reason}")
    pytest.skip(reason)


REDIS_ROLES = (
    "REDIS_URL",
    "CACHE_REDIS_URL",
    "PUBSUB_REDIS_URL",
    "GATEWAY_LIMITS_REDIS_URL",
    "GATEWAY_RESPONSES_REDIS_URL",
)


def use_redis(settings, url: str) -> None:
    """Every Redis role of this process on ``url`` (as ``REDIS_URL`` alone sets them)."""
    for name in REDIS_ROLES:
        setattr(settings, name, url)


def require_chromium() -> None:
    require(os.path.exists(CHROMIUM), f"{CHROMIUM} is not installed (apt-get install chromium)")


def clear_cache() -> None:
    """Empty Django's default cache. In Redis only the cache's own keys go:
    the same database may hold the Celery broker's queues and bindings."""
    from django.conf import settings
    from django.core.cache import cache

    if not settings.CACHES["default"]["BACKEND"].endswith("RedisCache"):
        cache.clear()
        return
    import redis

    prefix = settings.CACHES["default"].get("KEY_PREFIX", "")
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        names = list(client.scan_iter(f"{prefix}:*", count=1000))
        if names:
            client.delete(*names)
    finally:
        client.close()


def database_url_for_children() -> str:
    """The test database as a DATABASE_URL, for worker processes a test starts."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def start_celery_worker(root, **extra_env: str):
    """A real Celery worker (solo pool) on the configured broker and the test
    database. The caller terminates it."""
    import subprocess
    import sys

    from django.conf import settings

    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_children(),
        "DATABASE_POOL": "0",
        "CONSOLE_VAR_DIR": str(settings.VAR_DIR),
        "API_KEY_PEPPER": settings.API_KEY_PEPPER,
        "CONSOLE_SECRET_KEYS": ",".join(settings.CONSOLE_SECRET_KEYS),
        **extra_env,
    }
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "console", "worker", "-l", "info", "--pool", "solo",
         "-Q", extra_env.get("CELERY_QUEUE", settings.CELERY_TASK_DEFAULT_QUEUE), "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")


def broker_is_rabbitmq() -> bool:
    from urllib.parse import urlsplit

    from django.conf import settings

    return urlsplit(settings.CELERY_BROKER_URL).scheme in AMQP_SCHEMES


def require_broker() -> None:
    """The configured broker answers, when it is a server of its own
    (RabbitMQ: ``CELERY_BROKER_URL=amqp://...``); skip locally, fail under CI."""
    if not broker_is_rabbitmq():
        return
    from django.conf import settings
    from kombu import Connection

    try:
        with Connection(settings.CELERY_BROKER_URL, connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1, timeout=3)
    except Exception as exc:
        require(False, f"RabbitMQ is not reachable at CELERY_BROKER_URL ({exc})")


def chromium_page():
    """A headless Chromium page (``/usr/bin/chromium``, driven by Playwright)
    and the list its JavaScript errors collect in. A generator for fixtures."""
    require_chromium()
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API runs a loop
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        context = browser.new_context()
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
        yield page, errors
        context.close()
        browser.close()


BROWSER_PASSWORD = "browser-pass-phrase-42"  # a test user's


def sign_in(page, base_url: str, user, password: str = BROWSER_PASSWORD) -> None:
    """Give ``user`` this password and sign in through the login form, as a
    person would; returns on the overview page."""
    user.set_password(password)
    user.save()
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", user.email)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")


def wait_for_worker(proc, condition, what: str, timeout: float = 45.0) -> None:
    """Poll ``condition`` until it holds; fail with the worker's output if the
    worker process dies, or after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"worker exited early:\n{proc.stdout.read()}")
        if condition():
            return
        time.sleep(0.25)
    pytest.fail(f"the worker did not {what} within {timeout:.0f} s")

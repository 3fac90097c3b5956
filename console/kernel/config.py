"""Reading configuration from the environment: the one place that does it.

Every function here is pure (environment in, Python values out) and raises
``ImproperlyConfigured`` with a message naming the variable when a value is
malformed, so a typo fails the process at start instead of at first use.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from console.kernel import redis_url

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use 1/0, true/false, yes/no")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below its minimum of {minimum}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below its minimum of {minimum}")
    return value


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def read_or_create_secret(path: Path, *, nbytes: int = 48) -> str:
    """Return the secret stored at ``path``, creating it (mode 0600) on first use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        value = path.read_text().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    value = secrets.token_urlsafe(nbytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    os.chmod(path, 0o600)
    return value


def read_or_create_fernet_key(path: Path) -> str:
    """A Fernet key stored at ``path`` (mode 0600), created on first use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        value = path.read_text().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    value = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    os.chmod(path, 0o600)
    return value


def parse_database_url(
    url: str, *, pool: bool, pool_max_size: int, name: str = "DATABASE_URL"
) -> dict:
    """Turn ``DATABASE_URL`` into a Django ``DATABASES['default']`` entry.

    Supported: ``postgres://`` / ``postgresql://`` (psycopg 3, pooled unless
    ``pool`` is false) and ``sqlite:///relative.db`` / ``sqlite:////abs.db``.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in {"postgres", "postgresql", "pgsql"}:
        db_name = unquote(parts.path.lstrip("/"))
        if not db_name:
            raise ImproperlyConfigured(f"{name} names no database: {_redact(url)!r}")
        try:
            port = parts.port
        except ValueError:
            raise ImproperlyConfigured(f"{name} has an invalid port: {_redact(url)!r}") from None
        options: dict = {}
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        for key in ("sslmode", "sslrootcert", "application_name", "connect_timeout"):
            if key in query:
                options[key] = query.pop(key)
        if query:
            raise ImproperlyConfigured(f"{name} has unknown options: {', '.join(sorted(query))}")
        if pool:
            options["pool"] = {"min_size": 1, "max_size": pool_max_size, "timeout": 10}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": db_name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 0 if pool else 60,
            # Pooled: psycopg's pool checks a connection before handing it out (so a
            # PostgreSQL restart or failover costs no request a dead connection);
            # unpooled: Django checks a persistent connection before reusing it.
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    if scheme == "sqlite":
        path = unquote(parts.path)
        if url.startswith("sqlite:////"):
            path = "/" + path.lstrip("/")  # sqlite:////abs.db: the path is "//abs.db"
        elif path.startswith("/"):
            path = path[1:]  # sqlite:///relative.db
        if not path:
            raise ImproperlyConfigured(f"{name} names no SQLite file: {url!r}")
        return sqlite_database(Path(path))
    raise ImproperlyConfigured(
        f"{name} has unsupported scheme {scheme!r}; use postgres://user@host:5432/db "
        "or sqlite:////absolute/path.db"
    )


def sqlite_database(path: Path) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            # WAL lets the web server, the worker and beat read while one writes.
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"
            ),
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        },
        "TEST": {"NAME": str(path.with_name(path.stem + "-test.sqlite3"))},
    }


def parse_redis_url(url: str, name: str = "REDIS_URL") -> str:
    """``url`` if it is a Redis URL ``console.kernel.redis_url`` accepts (one Redis,
    Sentinel or Cluster), else ``ImproperlyConfigured`` naming the forms."""
    try:
        redis_url.parse(url, name)
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc).replace(url, _redact(url))) from None
    return url


def parse_broker_url(url: str) -> str:
    """``url`` if Celery can use it as its broker, else ``ImproperlyConfigured``
    (a Redis URL is checked by ``broker_url``: a Cluster URL is refused)."""
    broker_url(url)
    return url


def broker_url(url: str) -> tuple[str, dict]:
    """The broker URL Celery is given and its transport options: a Redis URL
    through ``console.kernel.redis_url.broker`` (Sentinel becomes kombu's
    ``sentinel://`` transport with ``master_name``; Cluster is refused),
    RabbitMQ and the local transports as they are."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in {"redis", "rediss", "redis+sentinel", "sentinel", "redis+cluster"}:
        try:
            return redis_url.broker(url)
        except ValueError as exc:
            raise ImproperlyConfigured(str(exc).replace(url, _redact(url))) from None
    allowed = {"redis", "rediss", "redis+sentinel", "sentinel", "amqp", "amqps", "pyamqp"}
    allowed |= {"filesystem", "memory"}
    if scheme not in allowed:
        raise ImproperlyConfigured(
            f"CELERY_BROKER_URL has unsupported scheme {scheme!r}; "
            f"use one of {', '.join(sorted(allowed))}"
        )
    return url, {}


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url

from __future__ import annotations

import stat

import pytest
from django.core.exceptions import ImproperlyConfigured

from console.kernel import config


def test_postgres_url_pooled():
    db = config.parse_database_url(
        "postgres://app:s%40cret@db.internal:6543/billing?sslmode=require&application_name=console",
        pool=True,
        pool_max_size=7,
    )
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert db["NAME"] == "billing"
    assert db["USER"] == "app"
    assert db["PASSWORD"] == "s@cret"
    assert db["HOST"] == "db.internal"
    assert db["PORT"] == "6543"
    assert db["CONN_MAX_AGE"] == 0
    assert db["CONN_HEALTH_CHECKS"] is True  # the pool checks connections
    assert db["OPTIONS"] == {
        "sslmode": "require",
        "application_name": "console",
        "pool": {"min_size": 1, "max_size": 7, "timeout": 10},
    }


def test_postgresql_url_unpooled_without_port():
    db = config.parse_database_url(
        "postgresql://app@localhost/billing", pool=False, pool_max_size=5
    )
    assert db["PORT"] == ""
    assert db["PASSWORD"] == ""
    assert db["CONN_MAX_AGE"] == 60
    assert db["CONN_HEALTH_CHECKS"] is True
    assert "pool" not in db["OPTIONS"]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgres://app:pw@localhost:notaport/db", "invalid port"),
        ("postgres://app:pw@localhost:99999/db", "invalid port"),
        ("postgres://app:pw@localhost:5432/", "names no database"),
        ("postgres://app:pw@localhost/db?sslmode=require&bogus=1", "unknown options: bogus"),
        ("mysql://app:pw@localhost/db", "unsupported scheme 'mysql'"),
        ("db.sqlite3", "unsupported scheme ''"),
        ("sqlite://", "names no SQLite file"),
    ],
)
def test_bad_database_urls(url, message):
    with pytest.raises(ImproperlyConfigured, match=message) as exc:
        config.parse_database_url(url, pool=True, pool_max_size=5)
    assert "DATABASE_URL" in str(exc.value)


def test_bad_port_message_hides_the_password():
    with pytest.raises(ImproperlyConfigured) as exc:
        config.parse_database_url("postgres://app:hunter2@h:x/db", pool=True, pool_max_size=5)
    assert "hunter2" not in str(exc.value)
    assert ":***@" in str(exc.value)


def test_sqlite_absolute_url(tmp_path):
    target = tmp_path / "sub" / "console.db"
    db = config.parse_database_url(f"sqlite:///{target}", pool=True, pool_max_size=5)
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(target)
    assert db["TEST"]["NAME"] == str(target.with_name("console-test.sqlite3"))
    assert target.parent.is_dir()


def test_sqlite_relative_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = config.parse_database_url("sqlite:///data/relative.db", pool=True, pool_max_size=5)
    assert db["NAME"] == "data/relative.db"
    assert (tmp_path / "data").is_dir()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("TRUE", True),
        (" yes ", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        ("", False),
    ],
)
def test_env_bool(monkeypatch, raw, expected):
    monkeypatch.setenv("CONSOLE_TEST_FLAG", raw)
    assert config.env_bool("CONSOLE_TEST_FLAG", default=not expected) is expected


def test_env_bool_default_and_error(monkeypatch):
    monkeypatch.delenv("CONSOLE_TEST_FLAG", raising=False)
    assert config.env_bool("CONSOLE_TEST_FLAG", True) is True
    monkeypatch.setenv("CONSOLE_TEST_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match=r"CONSOLE_TEST_FLAG='maybe' is not a boolean"):
        config.env_bool("CONSOLE_TEST_FLAG")


def test_env_int(monkeypatch):
    monkeypatch.delenv("CONSOLE_TEST_INT", raising=False)
    assert config.env_int("CONSOLE_TEST_INT", 5) == 5
    monkeypatch.setenv("CONSOLE_TEST_INT", "  ")
    assert config.env_int("CONSOLE_TEST_INT", 5) == 5
    monkeypatch.setenv("CONSOLE_TEST_INT", " 42 ")
    assert config.env_int("CONSOLE_TEST_INT", 5, minimum=1) == 42
    monkeypatch.setenv("CONSOLE_TEST_INT", "4.2")
    with pytest.raises(ImproperlyConfigured, match=r"CONSOLE_TEST_INT='4.2' is not an integer"):
        config.env_int("CONSOLE_TEST_INT", 5)
    monkeypatch.setenv("CONSOLE_TEST_INT", "0")
    with pytest.raises(ImproperlyConfigured, match="CONSOLE_TEST_INT=0 is below its minimum of 1"):
        config.env_int("CONSOLE_TEST_INT", 5, minimum=1)


def test_env_str_and_list(monkeypatch):
    monkeypatch.setenv("CONSOLE_TEST_STR", "  value ")
    assert config.env_str("CONSOLE_TEST_STR") == "value"
    monkeypatch.setenv("CONSOLE_TEST_LIST", "a, b,,c ")
    assert config.env_list("CONSOLE_TEST_LIST") == ["a", "b", "c"]
    monkeypatch.delenv("CONSOLE_TEST_LIST")
    assert config.env_list("CONSOLE_TEST_LIST", ["x"]) == ["x"]


def test_read_or_create_secret(tmp_path):
    path = tmp_path / "nested" / "secret"
    value = config.read_or_create_secret(path)
    assert len(value) >= 48
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == value + "\n"
    assert config.read_or_create_secret(path) == value


def test_read_or_create_secret_replaces_empty_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text("\n")
    path.chmod(0o644)
    value = config.read_or_create_secret(path)
    assert value
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_redis_and_broker_urls():
    assert config.parse_redis_url("redis://localhost:6379/0") == "redis://localhost:6379/0"
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL has unsupported scheme"):
        config.parse_redis_url("http://localhost")
    with pytest.raises(ImproperlyConfigured, match="invalid port"):
        config.parse_redis_url("redis://localhost:port/0")
    assert config.parse_broker_url("filesystem://") == "filesystem://"
    with pytest.raises(ImproperlyConfigured, match="CELERY_BROKER_URL"):
        config.parse_broker_url("kafka://x")

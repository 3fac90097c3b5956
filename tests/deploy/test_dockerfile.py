"""The Dockerfile and .dockerignore, read as text (no image is built here): two
python:3.11-slim stages, the lock as constraints, static files collected at build
without baking a secret, a non-root user, the entrypoint; every path the build
copies exists and is not ignored, and no local state or secret enters the context."""

from __future__ import annotations

import fnmatch
import re

import pytest

from tests.deploy.product import ENTRYPOINT, ROOT

# Files and parsers only: the same on every engine (CI's embedded pass leaves it out).
pytestmark = pytest.mark.engine_independent

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def ignored() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def is_ignored(path: str) -> bool:
    """As Docker reads .dockerignore: patterns from the context's root (``**/``
    at any depth); a folder's exclusion excludes what it holds."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    patterns = [p for pattern in ignored() for p in (pattern, pattern.removeprefix("**/"))]
    return any(fnmatch.fnmatchcase(p, pattern) for pattern in patterns for p in prefixes)


def test_two_stages_on_python_3_11_slim():
    froms = [rest for word, rest in instructions() if word == "FROM"]
    assert froms == ["python:3.11-slim AS build", "python:3.11-slim"]


def test_the_build_installs_with_the_lock():
    runs = [rest for word, rest in instructions() if word == "RUN"]
    # The lock's pins, with the optional span export and error reporting (off
    # until OTEL_EXPORTER_OTLP_ENDPOINT or SENTRY_DSN is set) and no test extra.
    assert "pip install -c requirements.lock '.[otel,sentry]'" in runs
    assert "tests" not in " ".join(runs) and "test]" not in " ".join(runs)


def test_static_files_are_collected_at_build_without_keeping_a_secret():
    (collect,) = [
        rest for word, rest in instructions() if word == "RUN" and "collectstatic" in rest
    ]
    assert "python manage.py collectstatic --noinput" in collect
    scratch = re.search(r"CONSOLE_VAR_DIR=(\S+) python manage.py collectstatic", collect).group(1)
    assert f"rm -rf {scratch}" in collect  # the generated secret_key and pepper go with it
    assert "ENV" in DOCKERFILE and "CONSOLE_STATIC_ROOT=/app/staticfiles" in DOCKERFILE


def test_the_final_stage_runs_as_a_non_root_user_through_the_entrypoint():
    final = instructions()[[w for w, _ in instructions()].index("FROM", 1) :]
    users = [rest for word, rest in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    entry = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert entry == ['["/app/deploy/docker/entrypoint.sh"]']
    assert ("CMD", '["web"]') in final
    assert ENTRYPOINT.exists()


def test_every_copied_path_exists_and_enters_the_context():
    for word, rest in instructions():
        if word != "COPY" or "--from=" in rest:
            continue
        sources = [s for s in rest.split()[:-1] if not s.startswith("--")]
        for source in sources:
            if source == ".":
                continue
            assert (ROOT / source).exists(), source
            assert not is_ignored(source), source


def test_what_the_processes_need_is_not_ignored():
    for path in (
        "manage.py",
        "requirements.lock",
        "pyproject.toml",
        "README.md",
        "static/vendor",
        "templates",
        "locale",
        "deploy/docker/entrypoint.sh",
        "console/settings/base.py",
        "tooling/simulator/app.py",
    ):
        assert not is_ignored(path), path


def test_local_state_and_secrets_stay_out_of_the_context():
    for path in (
        ".git",
        ".venv",
        "var",
        "var/secret_key",
        "console/__pycache__",
        ".env",
        "deploy/compose/.env",
    ):
        assert is_ignored(path), path


def test_the_processes_import_the_source_tree_not_the_wheel():
    """The installed wheel carries no templates, static files or locale (BASE_DIR
    is three levels above console/settings/base.py): the processes import /app."""
    final = instructions()[[w for w, _ in instructions()].index("FROM", 1) :]
    assert ("WORKDIR", "/app") in final
    env = " ".join(rest for word, rest in final if word == "ENV")
    assert "PYTHONPATH=/app" in env.split()
    assert (ROOT / "console" / "settings" / "base.py").exists()

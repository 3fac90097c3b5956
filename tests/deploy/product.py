"""What the deployment files (Dockerfile, deploy/docker, deploy/compose, deploy/k8s)
may name, read from the product itself: the entrypoint's commands (run dry), the
programs and flags they resolve to, the environment variables the product reads,
the probe paths it routes and the ports its processes listen on."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "deploy" / "docker" / "entrypoint.sh"
IMAGE = "token-billing-console"
PRODUCT_PACKAGES = ("console", "gateway_bridge", "accounts", "usage", "invoicing", "inference_node")
# Read by the entrypoint (the Procfile's names), not by the console: processes and ports.
ENTRYPOINT_ONLY = {"CONSOLE_ENTRYPOINT_DRY_RUN"}
# Read by Django, Python and uvicorn themselves (set in the image).
RUNTIME = {
    "DJANGO_SETTINGS_MODULE",
    "PYTHONPATH",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
    "PATH",
}
ENV_READ = re.compile(
    r"""(?:env_(?:str|bool|int|float|list)\(\s*|os\.environ\.get\(\s*|os\.environ\[\s*|getenv\(\s*)"([A-Z][A-Z0-9_]+)\""""
)


def kubectl() -> str | None:
    """kubectl on this machine; missing, the test is skipped, except under CI
    (``CI`` set), where it fails: CI must render the manifests."""
    found = shutil.which("kubectl")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is required under CI to render deploy/k8s")
        pytest.skip("kubectl is not installed (CI installs it)")
    return found


def kubernetes_validate():
    """The kubernetes-validate package (the test extra; its Kubernetes JSON schemas
    are bundled, so it validates offline); missing, the test is skipped, except
    under CI, where it fails."""
    try:
        import kubernetes_validate
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("kubernetes-validate is required under CI (pip install -e '.[test]')")
        pytest.skip("kubernetes-validate is not installed (the test extra)")
    return kubernetes_validate


@cache
def entrypoint_variables() -> frozenset[str]:
    """The variables the entrypoint reads: ``${NAME:-default}``."""
    return frozenset(re.findall(r"\$\{([A-Z][A-Z0-9_]*)(?::-[^}]*)?\}", ENTRYPOINT.read_text()))


@cache
def documented_variables() -> frozenset[str]:
    """The first column of docs/configuration.md's table."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    return frozenset(re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", text, flags=re.MULTILINE))


@cache
def read_variables() -> frozenset[str]:
    """Every variable the product's code reads (console.kernel.config's env_*
    helpers, os.environ)."""
    names = set()
    for package in PRODUCT_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            names.update(ENV_READ.findall(path.read_text()))
    return frozenset(names)


def allowed_variables() -> frozenset[str]:
    return read_variables() | entrypoint_variables() | ENTRYPOINT_ONLY | RUNTIME


def unknown_variables(names) -> list[str]:
    allowed = allowed_variables()
    return sorted(n for n in names if n not in allowed)


def entrypoint(*args: str, env: dict[str, str] | None = None) -> list[str]:
    """The command the entrypoint would run for these arguments: its dry run."""
    environment = {"PATH": os.environ["PATH"], "CONSOLE_ENTRYPOINT_DRY_RUN": "1", **(env or {})}
    out = subprocess.run(
        [str(ENTRYPOINT), *args],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    return out.splitlines()


# --- a command resolves: the program, its module and flags exist ----------------


def check_command(argv: list[str]) -> str:
    """Assert that the product can run ``argv`` (as the entrypoint runs it, from
    the repository root); return what it runs: web, worker, beat, simulator,
    manage:<command>."""
    program, args = argv[0], argv[1:]
    if program == "uvicorn":
        return _check_uvicorn(args)
    if program == "celery":
        return _check_celery(args)
    if program == "python" and args[:1] == ["-m"]:
        return _check_module(args[1], args[2:])
    if program == "python" and args[:1] == ["manage.py"]:
        return _check_manage(args[1:])
    if program == "sh" and args[:1] == ["-c"]:
        inner = re.search(r"until (python manage\.py [^;>]+)", args[1])
        assert inner, f"a shell command the tests do not know: {args[1]!r}"
        return "await:" + _check_manage(shlex.split(inner.group(1))[2:])
    raise AssertionError(f"a program the product does not run: {argv!r}")


def _check_uvicorn(args: list[str]) -> str:
    from uvicorn.importer import import_from_string
    from uvicorn.main import main

    params = main.make_context("uvicorn", list(args)).params
    assert params["app"] == "console.asgi:application"
    assert import_from_string(params["app"]) is not None
    assert import_from_string(params["http"]).__name__ == "GuardedHttpProtocol"
    assert params["lifespan"] == "on"
    assert params["proxy_headers"] is False  # GATEWAY_TRUSTED_PROXIES decides
    return "web"


def _check_celery(args: list[str]) -> str:
    import click
    from celery.app.utils import find_app
    from celery.bin.base import CLIContext
    from celery.bin.celery import celery

    assert args[:2] == ["-A", "console"], args
    app = find_app("console")
    assert app.main == "console"
    sub, rest = args[2], args[3:]
    assert sub in celery.commands, sub
    parent = click.Context(celery, obj=CLIContext(app=app, no_color=True, workdir=None, quiet=True))
    params = celery.commands[sub].make_context(sub, list(rest), parent=parent).params
    if sub == "worker" and params.get("queues"):
        return "loadtests"
    return sub


def _check_module(module: str, args: list[str]) -> str:
    assert importlib.util.find_spec(module) is not None, module
    assert module == "tooling.simulator", module
    from tooling.simulator.config import add_node_arguments

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_node_arguments(parser)
    parser.parse_args(args)
    return "simulator"


def _check_manage(args: list[str]) -> str:
    from django.core.management import get_commands, load_command_class

    name, rest = args[0], args[1:]
    commands = get_commands()
    assert name in commands, f"manage.py {name}: no such command"
    command = load_command_class(commands[name], name)
    command.create_parser("manage.py", name).parse_args(rest)
    return f"manage:{name}"


def listen_port(argv: list[str]) -> int:
    """The port the command's process listens on."""
    return int(argv[argv.index("--port") + 1])


# --- probe paths are routed -----------------------------------------------------


def check_probe_path(kind: str, path: str) -> None:
    """A probe path the process of ``kind`` answers: the console's probes for web and
    gateway (the same ASGI app: gateway_bridge.app sends every path it does not own
    to Django), /health for the simulator."""
    if kind == "simulator":
        assert path in simulator_paths(), path
        return
    from django.urls import resolve

    from gateway_bridge.app import owns

    assert not owns(path), f"{path} would go to the gateway's hot path, not to the probes"
    match = resolve(path)
    assert match.namespace == "console" and match.url_name in ("livez", "health", "readyz"), path


@cache
def simulator_paths() -> frozenset[str]:
    source = (ROOT / "tooling" / "simulator" / "app.py").read_text()
    return frozenset(re.findall(r'^\s+"(/[a-z/]*)": \{"GET"', source, flags=re.MULTILINE))


def url_path(url: str) -> str:
    return urlsplit(url).path

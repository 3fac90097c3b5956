"""The process examples (``Procfile``, ``deploy/systemd/*``) run what they say:
the process kinds, the same server flags in both, and flags the
programs accept (uvicorn's and the simulator's parsers read them)."""

from __future__ import annotations

import argparse
import configparser
import re
import shlex

import pytest

from tests.console.up_process import ROOT

SYSTEMD = ROOT / "deploy" / "systemd"
UNITS = {
    "web": "console-web.service",
    "worker": "console-worker@.service",
    "beat": "console-beat.service",
    "loadtests": "console-loadtests.service",
    "node": "console-node.service",
}
PROGRAMS = {
    "web": "uvicorn",
    "worker": "celery",
    "beat": "celery",
    "loadtests": "celery",
    "node": "python",
}


def procfile() -> dict[str, list[str]]:
    found = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, _, command = line.partition(":")
        assert kind not in found, f"{kind} twice in the Procfile"
        found[kind] = shlex.split(command)
    return found


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string((SYSTEMD / name).read_text().replace("\\\n", " "))
    return parser


def exec_start(name: str) -> list[str]:
    return shlex.split(unit(name)["Service"]["ExecStart"])


def flags(args: list[str]) -> list[str]:
    return [a for a in args if a.startswith("-")]


def concrete(args: list[str]) -> list[str]:
    """The arguments with environment references and systemd specifiers filled in."""
    out = []
    for a in args:
        a = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", a)  # ${PORT:-8000}: its default
        a = re.sub(r"\$\{[A-Z_]+\}", "4", a)  # ${CONSOLE_WEB_WORKERS}: a count
        out.append(a.replace("%i", "1").replace("%H", "host"))
    return out


def test_the_procfile_and_the_units_run_the_same_processes():
    assert set(procfile()) == set(UNITS)
    for kind, name in UNITS.items():
        service = unit(name)
        assert service["Unit"]["PartOf"] == "console.target"
        assert service["Install"]["WantedBy"] == "console.target"
        program = exec_start(name)[0]
        assert program.startswith("/srv/console/.venv/bin/")
        assert program.rsplit("/", 1)[1] == procfile()[kind][0] == PROGRAMS[kind]
    assert (SYSTEMD / "console.target").exists()


def test_the_same_flags_in_both():
    for kind, name in UNITS.items():
        in_procfile = flags(procfile()[kind])
        in_unit = flags(exec_start(name))
        if kind == "worker":  # the unit names each instance: worker1@host
            in_unit.remove("-n")
        assert in_unit == in_procfile, kind


def test_beat_runs_once_with_the_locking_scheduler():
    from django.conf import settings

    for args in (procfile()["beat"], exec_start(UNITS["beat"])):
        assert args[1:] == ["-A", "console", "beat", "-l", "info"]
        assert "-S" not in args and "--scheduler" not in args  # the lock is the scheduler's
    assert settings.CELERY_BEAT_SCHEDULER == "console.kernel.beat_lock:LockedScheduler"
    assert unit(UNITS["beat"])["Service"]["Restart"] == "always"  # a standby keeps trying


@pytest.mark.parametrize("source", ["Procfile", "unit"])
def test_the_web_flags_are_uvicorn_s(source):
    from uvicorn.importer import import_from_string
    from uvicorn.main import main

    args = procfile()["web"] if source == "Procfile" else exec_start(UNITS["web"])
    params = main.make_context("uvicorn", concrete(args[1:])).params
    assert params["app"] == "console.asgi:application"
    assert params["workers"] == 4
    assert params["lifespan"] == "on"
    assert params["proxy_headers"] is False  # GATEWAY_TRUSTED_PROXIES decides
    protocol = import_from_string(params["http"])
    assert protocol.__name__ == "GuardedHttpProtocol"


@pytest.mark.parametrize("source", ["Procfile", "unit"])
def test_the_node_flags_are_the_simulator_s(source):
    from tooling.simulator.config import add_node_arguments

    args = procfile()["node"] if source == "Procfile" else exec_start(UNITS["node"])
    assert args[1:3] == ["-m", "tooling.simulator"]
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_node_arguments(parser)
    options = parser.parse_args(concrete(args[3:]))
    assert (options.host, options.port, options.profile) == ("127.0.0.1", 9001, "realistic")


def test_the_environment_example_names_real_settings():
    """Every variable of console.env.example but the units' own is one the
    console reads (docs/configuration.md)."""
    text = (SYSTEMD / "console.env.example").read_text()
    names = re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", text, flags=re.MULTILINE)
    settings_source = "".join(p.read_text() for p in (ROOT / "console" / "settings").glob("*.py"))
    units_own = {"CONSOLE_WEB_WORKERS", "CONSOLE_WORKER_CONCURRENCY", "CAPACITY_WORKER_CONCURRENCY"}
    unknown = [n for n in names if n not in units_own and f'"{n}"' not in settings_source]
    assert unknown == []
    for name in units_own:
        assert any(f"${{{name}}}" in (SYSTEMD / u).read_text() for u in UNITS.values()), name

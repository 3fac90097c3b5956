"""deploy/docker/entrypoint.sh, run outside a container: each process kind runs
the Procfile's command (its defaults, the same flags; the simulator on every
address, as a container must), every command resolves in the product, the port
variables are the Procfile's, and a real run execs the program itself."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.deploy.product import ENTRYPOINT, check_command, entrypoint, listen_port
from tests.test_deploy_examples import concrete, procfile

# Files and parsers only: the same on every engine (CI's embedded pass leaves it out).
pytestmark = pytest.mark.engine_independent

KINDS = {
    "web": "web",
    "gateway": "web",
    "worker": "worker",
    "loadtests": "loadtests",
    "beat": "beat",
    "simulator": "simulator",
    "node": "simulator",
    "migrate": "manage:migrate",
    "await-migrations": "await:manage:migrate",
}
PROCFILE_KIND = {
    "web": "web",
    "gateway": "web",
    "worker": "worker",
    "loadtests": "loadtests",
    "beat": "beat",
}


def test_the_script_is_executable_and_posix():
    assert os.access(ENTRYPOINT, os.X_OK)
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=True)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_runs_a_command_the_product_has(kind):
    assert check_command(entrypoint(kind)) == KINDS[kind]


@pytest.mark.parametrize("kind", sorted(PROCFILE_KIND))
def test_each_process_kind_runs_the_procfile_command(kind):
    assert entrypoint(kind) == concrete(procfile()[PROCFILE_KIND[kind]])


def without_host(argv: list[str]) -> tuple[list[str], str]:
    at = argv.index("--host")
    return argv[:at] + argv[at + 2 :], argv[at + 1]


def test_the_simulator_runs_the_procfile_command_on_every_address():
    ours, host = without_host(entrypoint("simulator"))
    theirs, _ = without_host(concrete(procfile()["node"]))
    assert ours == theirs
    assert host == "0.0.0.0"  # noqa: S104 - reachable from the other containers


def test_no_argument_is_the_web():
    assert entrypoint() == entrypoint("web")


@pytest.mark.parametrize(
    ("kind", "env", "flag", "value"),
    [
        ("web", {"PORT": "9000"}, "--port", "9000"),
        ("gateway", {"WEB_CONCURRENCY": "7"}, "--workers", "7"),
        ("worker", {"CELERY_CONCURRENCY": "3"}, "--concurrency", "3"),
        ("loadtests", {"CAPACITY_QUEUE": "lt2"}, "-Q", "lt2"),
        ("loadtests", {"CAPACITY_WORKER_CONCURRENCY": "2"}, "--concurrency", "2"),
        ("simulator", {"NODE_PORT": "9100"}, "--port", "9100"),
    ],
)
def test_the_procfile_s_variables_set_the_flags(kind, env, flag, value):
    argv = entrypoint(kind, env=env)
    assert argv[argv.index(flag) + 1] == value
    check_command(argv)


def test_the_default_ports_are_the_documented_ones():
    assert listen_port(entrypoint("web")) == listen_port(entrypoint("gateway")) == 8000
    assert listen_port(entrypoint("simulator")) == 9001


def test_manage_passes_its_arguments_to_manage_py():
    argv = entrypoint("manage", "check", "--deploy")
    assert argv == ["python", "manage.py", "check", "--deploy"]
    assert check_command(argv) == "manage:check"


def test_extra_arguments_reach_the_program():
    assert entrypoint("worker", "-n", "w1@%h")[-2:] == ["-n", "w1@%h"]


def test_anything_else_runs_as_given():
    assert entrypoint("sh", "-c", "echo hi") == ["sh", "-c", "echo hi"]


def test_a_real_run_execs_the_program(tmp_path):
    """Without the dry run the script execs the program (PID kept: signals reach
    uvicorn and Celery directly): here a fake uvicorn first on PATH."""
    fake = tmp_path / "uvicorn"
    fake.write_text('#!/bin/sh\necho "pid $$"\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    script = f'echo "pid $$"; exec {ENTRYPOINT} gateway'
    out = subprocess.run(
        ["sh", "-c", script],
        env={"PATH": f"{tmp_path}:{os.environ['PATH']}", "PORT": "8123"},
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout.splitlines()
    assert out[0] == out[1]  # one process: the shell, the entrypoint, the program
    assert out[2:] == entrypoint("gateway", env={"PORT": "8123"})[1:]  # its arguments

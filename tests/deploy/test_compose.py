"""deploy/compose/compose.yaml, parsed with PyYAML: every console service runs a
command of the product through the image's entrypoint, a one-shot migrate runs
first, health checks ask routed paths on the ports the processes listen on, every
variable set is one the product reads, the spool is on a named volume where the
settings look, and no secret is written in the file."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.deploy.product import (
    IMAGE,
    ROOT,
    check_command,
    check_probe_path,
    documented_variables,
    entrypoint,
    entrypoint_variables,
    listen_port,
    unknown_variables,
    url_path,
)

COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"
CONSOLE = {
    "migrate": "manage:migrate",
    "web": "web",
    "gateway": "web",
    "worker": "worker",
    "loadtests": "loadtests",
    "beat": "beat",
    "simulator": "simulator",
}
SERVICES = {"postgres", "redis", "rabbitmq", *CONSOLE}
SECRETS = (
    "DJANGO_SECRET_KEY",
    "API_KEY_PEPPER",
    "CONSOLE_SECRET_KEYS",
    "POSTGRES_PASSWORD",
    "RABBITMQ_PASSWORD",
)

# Files and parsers only: the same on every engine (CI's embedded pass leaves it out).
pytestmark = pytest.mark.engine_independent


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def environment(service: dict) -> dict[str, str]:
    return {k: str(v) for k, v in service.get("environment", {}).items()}


def test_the_services(compose):
    assert set(compose["services"]) == SERVICES
    for name in CONSOLE:
        service = compose["services"][name]
        assert service["image"].split(":")[0] == IMAGE
        assert service["build"]["context"] == "../.."
        assert (
            COMPOSE.parent / service["build"]["context"] / service["build"]["dockerfile"]
        ).exists()


@pytest.mark.parametrize("name", sorted(CONSOLE))
def test_each_console_service_runs_a_command_of_the_product(compose, name):
    service = compose["services"][name]
    assert "entrypoint" not in service
    env = {k: v for k, v in environment(service).items() if k in entrypoint_variables()}
    assert check_command(entrypoint(*service["command"], env=env)) == CONSOLE[name]


def test_migrate_runs_once_before_the_others(compose):
    services = compose["services"]
    assert services["migrate"]["restart"] == "no"
    for name in set(CONSOLE) - {"migrate", "simulator"}:
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
    for dependency in ("postgres", "redis", "rabbitmq"):
        assert services["migrate"]["depends_on"][dependency] == {"condition": "service_healthy"}


def test_every_service_but_beat_has_a_health_check(compose):
    for name, service in compose["services"].items():
        if name in ("beat", "migrate"):
            assert "healthcheck" not in service, name  # beat answers nothing; migrate exits
            continue
        assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name


def test_health_checks_ask_routed_paths_on_the_listening_port(compose):
    for name in ("web", "gateway", "simulator"):
        service = compose["services"][name]
        env = {k: v for k, v in environment(service).items() if k in entrypoint_variables()}
        port = listen_port(entrypoint(*service["command"], env=env))
        (url,) = re.findall(
            r"http://127\.0\.0\.1:\d+/\S*?(?=')", " ".join(service["healthcheck"]["test"])
        )
        assert url.startswith(f"http://127.0.0.1:{port}/"), name
        check_probe_path("simulator" if name == "simulator" else "console", url_path(url))
        for published in service.get("ports", []):
            assert published.rsplit(":", 1)[1] == str(port), name


def test_the_worker_health_check_is_celery_s(compose):
    for name in ("worker", "loadtests"):
        command = compose["services"][name]["healthcheck"]["test"][1]
        assert command.startswith("celery -A console inspect ping -d celery@$$HOSTNAME")
        check_command(["celery", "-A", "console", "inspect", "ping", "--timeout", "10"])


def test_every_variable_set_is_one_the_product_reads(compose):
    names = set()
    for name in CONSOLE:
        names |= set(environment(compose["services"][name]))
    assert unknown_variables(names) == []
    assert sorted(names - documented_variables() - entrypoint_variables()) == []


def test_no_secret_is_written_in_the_file(compose):
    for service in compose["services"].values():
        for key, value in environment(service).items():
            if key in SECRETS:
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]*\}", value), key
            for secret in SECRETS:
                if f"${{{secret}" in value:
                    assert f"${{{secret}:?" in value, (key, secret)
    env = environment(compose["services"]["web"])
    assert "${POSTGRES_PASSWORD:?" in env["DATABASE_URL"]
    assert "${RABBITMQ_PASSWORD:?" in env["CELERY_BROKER_URL"]


def test_the_spool_is_a_named_volume_where_the_settings_look(compose):
    assert "spool" in compose["volumes"]
    for name in ("web", "gateway"):
        service = compose["services"][name]
        spool_dir = environment(service)["GATEWAY_SPOOL_DIR"]
        assert f"spool:{spool_dir}" in service["volumes"], name
        assert spool_dir.startswith(environment(service)["CONSOLE_VAR_DIR"] + "/")


def test_the_image_s_defaults_match(compose):
    """The Dockerfile's ENV names the same var dir and spool as compose and k8s."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    env = environment(compose["services"]["gateway"])
    assert f"CONSOLE_VAR_DIR={env['CONSOLE_VAR_DIR']}" in dockerfile
    assert f"GATEWAY_SPOOL_DIR={env['GATEWAY_SPOOL_DIR']}" in dockerfile

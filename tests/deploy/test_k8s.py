"""deploy/k8s: each overlay renders (kubectl kustomize), every object is valid
against the Kubernetes JSON schemas (kubernetes-validate, offline: its bundled
schemas, with the network blocked), and every command, port, probe path and
environment variable the manifests name exists in the product."""

from __future__ import annotations

import ipaddress
import socket
import subprocess

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
    kubectl,
    kubernetes_validate,
    listen_port,
    unknown_variables,
)

# Files and parsers only: the same on every engine (CI's embedded pass leaves it out).
pytestmark = pytest.mark.engine_independent

OVERLAYS = ("embedded-demo", "production")
KUBERNETES_VERSION = "1.37.0"
WORKLOADS = ("Deployment", "StatefulSet", "Job")
SECRET_NAMES = {
    "DJANGO_SECRET_KEY",
    "API_KEY_PEPPER",
    "CONSOLE_SECRET_KEYS",
    "DATABASE_URL",
    "DATABASE_REPLICA_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "POSTGRES_PASSWORD",
    "GATEWAY_METRICS_TOKEN",
    "STRIPE_SECRET_KEY",
    "STRIPE_WEBHOOK_SECRET",
}
# What each console process kind runs (the entrypoint's first argument).
KIND_RUNS = {
    "web": "web",
    "gateway": "web",
    "worker": "worker",
    "loadtests": "loadtests",
    "beat": "beat",
}


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request) -> tuple[str, list[dict]]:
    out = subprocess.run(
        [kubectl(), "kustomize", str(ROOT / "deploy" / "k8s" / "overlays" / request.param)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return request.param, [doc for doc in yaml.safe_load_all(out) if doc]


def objects(rendered, kind=None):
    return [o for o in rendered[1] if kind is None or o["kind"] == kind]


def named(rendered, kind, name):
    found = [o for o in objects(rendered, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, rendered[0])
    return found[0]


def pod_spec(obj):
    return obj["spec"]["template"]["spec"]


def console_containers(rendered):
    """(workload, container) for every container running the console's image."""
    for obj in objects(rendered):
        if obj["kind"] not in WORKLOADS:
            continue
        spec = pod_spec(obj)
        for container in spec.get("initContainers", []) + spec["containers"]:
            if container["image"].split("/")[-1].split(":")[0] == IMAGE:
                yield obj, container


def config_map(rendered):
    (found,) = [
        o
        for o in objects(rendered, "ConfigMap")
        if o["metadata"]["name"].startswith("console-config")
    ]
    return found


def environment(rendered, container) -> dict[str, object]:
    """The container's variables: its env entries over its config maps'."""
    values: dict[str, object] = {}
    for source in container.get("envFrom", []):
        ref = source["configMapRef"]["name"]
        values.update(named(rendered, "ConfigMap", ref)["data"])
    for entry in container.get("env", []):
        values[entry["name"]] = entry.get("value", entry.get("valueFrom"))
    return values


def blocked_network(*args, **kwargs):
    raise OSError("the schema check must not use the network")


def test_every_object_is_valid_against_the_kubernetes_schemas_offline(rendered, monkeypatch):
    validator = kubernetes_validate()
    assert objects(rendered)
    # The block ends with the check: the suite's own fixtures (the cache flush in
    # Redis) run after it and may use the loopback network.
    with monkeypatch.context() as blocked:
        blocked.setattr(socket.socket, "connect", blocked_network)
        blocked.setattr(socket, "create_connection", blocked_network)
        for obj in objects(rendered):
            validator.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_catches_a_wrong_field(monkeypatch):
    validator = kubernetes_validate()
    bad = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "x"}}
    bad["spec"] = {"minAvailable": 1, "selectr": {}}
    with monkeypatch.context() as blocked:
        blocked.setattr(socket.socket, "connect", blocked_network)
        blocked.setattr(socket, "create_connection", blocked_network)
        with pytest.raises(validator.ValidationError):
            validator.validate(bad, KUBERNETES_VERSION, strict=True)


def test_the_workloads(rendered):
    deployments = {o["metadata"]["name"] for o in objects(rendered, "Deployment")}
    assert {"console-web", "console-worker", "console-loadtests", "console-beat"} <= deployments
    assert named(rendered, "StatefulSet", "console-gateway")
    assert named(rendered, "Job", "console-migrate")
    if rendered[0] == "embedded-demo":
        assert {"simulator"} <= deployments
        assert {"postgres", "redis"} <= {
            o["metadata"]["name"] for o in objects(rendered, "StatefulSet")
        }


def test_every_console_container_runs_a_command_of_the_product(rendered):
    seen = set()
    for obj, container in console_containers(rendered):
        args = container.get("args", [])
        assert "command" not in container, "the image's entrypoint picks the command"
        runs = check_command(entrypoint(*args))
        seen.add(runs)
        if obj["kind"] == "Job":
            assert runs == "manage:migrate"
        elif container in pod_spec(obj).get("initContainers", []):
            assert runs == "await:manage:migrate"
        elif obj["metadata"]["name"] == "simulator":
            assert runs == "simulator"
        else:
            component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
            assert runs == KIND_RUNS[component], obj["metadata"]["name"]
    assert {"web", "worker", "loadtests", "beat", "manage:migrate", "await:manage:migrate"} <= seen


def test_every_console_pod_waits_for_the_migrations(rendered):
    for obj in objects(rendered):
        if (
            obj["kind"] in ("Deployment", "StatefulSet")
            and obj["metadata"]["labels"].get("app.kubernetes.io/component") in KIND_RUNS
        ):
            inits = pod_spec(obj).get("initContainers", [])
            assert [c["args"] for c in inits] == [["await-migrations"]], obj["metadata"]["name"]


def test_every_port_is_the_one_the_process_listens_on(rendered):
    for obj, container in console_containers(rendered):
        if container in pod_spec(obj).get("initContainers", []) or obj["kind"] == "Job":
            assert "ports" not in container
            continue
        if not container.get("ports"):
            continue
        env = {k: v for k, v in environment(rendered, container).items() if isinstance(v, str)}
        argv = entrypoint(
            *container["args"], env={k: v for k, v in env.items() if k in entrypoint_variables()}
        )
        assert [p["containerPort"] for p in container["ports"]] == [listen_port(argv)], obj[
            "metadata"
        ]["name"]


def test_every_service_reaches_a_named_port_of_its_pods(rendered):
    pods = [o for o in objects(rendered) if o["kind"] in ("Deployment", "StatefulSet")]
    for service in objects(rendered, "Service"):
        selector = service["spec"]["selector"]
        targets = [
            p
            for p in pods
            if selector.items() <= p["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert targets, service["metadata"]["name"]
        for port in service["spec"]["ports"]:
            for target in targets:
                names = {
                    p.get("name")
                    for c in pod_spec(target)["containers"]
                    for p in c.get("ports", [])
                }
                assert port["targetPort"] in names, (service["metadata"]["name"], port)


def test_every_probe_path_is_routed(rendered):
    for _obj, container in console_containers(rendered):
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            if probe not in container:
                continue
            path = container[probe]["httpGet"]["path"]
            kind = "simulator" if container["args"] == ["simulator"] else "console"
            check_probe_path(kind, path)
            ports = {p["name"] for p in container["ports"]}
            assert container[probe]["httpGet"]["port"] in ports


def test_liveness_never_needs_the_database_readiness_does(rendered):
    for name, kind in (("console-web", "Deployment"), ("console-gateway", "StatefulSet")):
        (container,) = pod_spec(named(rendered, kind, name))["containers"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
        assert container["startupProbe"]["httpGet"]["path"] == "/livez"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_every_variable_set_is_one_the_product_reads(rendered):
    names = set(config_map(rendered)["data"])
    for _obj, container in console_containers(rendered):
        names |= set(environment(rendered, container))
    assert unknown_variables(names) == []
    # ... and documented (docs/configuration.md), or one of the Procfile's.
    assert sorted(names - documented_variables() - entrypoint_variables()) == []


def test_secrets_only_by_reference(rendered):
    assert objects(rendered, "Secret") == [], "the operator creates the Secret"
    assert not SECRET_NAMES & set(config_map(rendered)["data"])
    for obj in objects(rendered):
        if obj["kind"] not in WORKLOADS:
            continue
        spec = pod_spec(obj)
        for container in spec.get("initContainers", []) + spec["containers"]:
            for entry in container.get("env", []):
                if entry["name"] in SECRET_NAMES:
                    ref = entry["valueFrom"]["secretKeyRef"]
                    assert ref["name"] == "console-secrets" and ref["key"] == entry["name"]
                    assert "value" not in entry


def test_the_gateway_spool_is_on_a_claim_where_the_settings_look(rendered):
    gateway = named(rendered, "StatefulSet", "console-gateway")
    (container,) = pod_spec(gateway)["containers"]
    spool_dir = environment(rendered, container)["GATEWAY_SPOOL_DIR"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claim = mounts[spool_dir]
    assert claim in {t["metadata"]["name"] for t in gateway["spec"]["volumeClaimTemplates"]}
    assert claim not in {v["name"] for v in pod_spec(gateway).get("volumes", [])}  # not an emptyDir
    assert gateway["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Retain"
    # The settings: GATEWAY_SPOOL_DIR under the var dir the image and the map name.
    var_dir = environment(rendered, container)["CONSOLE_VAR_DIR"]
    assert spool_dir.startswith(var_dir + "/")


def test_beat_is_a_singleton(rendered):
    beat = named(rendered, "Deployment", "console-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert not [
        p for p in objects(rendered, "PodDisruptionBudget") if "beat" in p["metadata"]["name"]
    ]
    assert not [h for h in objects(rendered, "HorizontalPodAutoscaler") if "beat" in str(h["spec"])]


def test_web_and_gateway_scale_apart(rendered):
    targets = {
        h["spec"]["scaleTargetRef"]["name"]: h["spec"]["scaleTargetRef"]["kind"]
        for h in objects(rendered, "HorizontalPodAutoscaler")
    }
    assert targets == {"console-web": "Deployment", "console-gateway": "StatefulSet"}
    for name, kind in targets.items():
        workload = named(rendered, kind, name)
        (container,) = pod_spec(workload)["containers"]
        assert container["resources"]["requests"]["cpu"]  # what Utilization is of


def test_disruption_budgets_select_workloads(rendered):
    budgets = objects(rendered, "PodDisruptionBudget")
    if rendered[0] == "embedded-demo":
        assert budgets == []  # one pod each: a budget would block every drain
        return
    assert {b["metadata"]["name"] for b in budgets} >= {"console-web", "console-gateway"}
    pods = [o for o in objects(rendered) if o["kind"] in ("Deployment", "StatefulSet")]
    for budget in budgets:
        selector = budget["spec"]["selector"]["matchLabels"]
        assert any(
            selector.items() <= p["spec"]["template"]["metadata"]["labels"].items() for p in pods
        )


def test_the_ingress_splits_the_gateway_s_paths_from_the_console_s(rendered):
    from gateway_bridge.app import owns

    (ingress,) = objects(rendered, "Ingress")
    services = {s["metadata"]["name"] for s in objects(rendered, "Service")}
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]["name"]
            assert backend in services
            samples = (
                [path["path"]]
                if path["pathType"] == "Exact"
                else [path["path"], path["path"] + "/x"]
            )
            for sample in samples:
                if sample in ("/", "//x"):
                    continue
                assert owns(sample) == (backend == "console-gateway"), sample
    backends = {
        p["path"]: p["backend"]["service"]["name"]
        for p in ingress["spec"]["rules"][0]["http"]["paths"]
    }
    assert backends["/"] == "console-web"
    assert backends["/v1"] == backends["/v1beta"] == "console-gateway"


def test_the_ingress_s_forwarded_address_is_trusted(rendered):
    proxies = config_map(rendered)["data"]["GATEWAY_TRUSTED_PROXIES"]
    networks = [ipaddress.ip_network(p.strip()) for p in proxies.split(",")]
    assert networks
    assert not any(n.prefixlen == 0 for n in networks), "never trust every address"


def test_the_pods_run_as_the_image_s_non_root_user(rendered):
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile
    for obj, container in console_containers(rendered):
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
        if container["securityContext"].get("readOnlyRootFilesystem"):
            assert "/tmp" in mounts
            if container["args"] != ["simulator"]:
                assert "/var/lib/console" in mounts  # the var dir: beat schedule, metrics

"""Server-side request forgery: with ``NODE_ALLOW_PRIVATE_URLS`` off (the
default), a tenant's node or channel cannot point at loopback, private,
link-local, metadata, unspecified, reserved or other special-use addresses,
nor at any IPv6 form carrying an IPv4 address, whether written as a literal
or reached through DNS, when saved or when probed; "test now" relays only a
tenant node's health and model ids. DNS is mocked (``socket.getaddrinfo``);
nothing connects except to fake nodes on 127.0.0.1."""

from __future__ import annotations

import os
import socket

import pytest

from accounts.errors import ValidationFailed
from inference_node import addresses, health, services
from inference_node.models import Node
from tests.inference_node.factories import NodeFactory

pytestmark = pytest.mark.django_db

KEY = "sk-tenant-key-0000000000-1234"


@pytest.fixture
def actor(owner, actor_for):
    return actor_for(owner)


@pytest.fixture
def production(settings):
    settings.NODE_ALLOW_PRIVATE_URLS = False


# Redis and PostgreSQL: the fixtures' own connections, never a node under test.
SERVICE_PORTS = {6379, 5432, "6379", "5432"}


@pytest.fixture
def dns(monkeypatch):
    """``dns["name"] = ["addr", ...]``: what the system resolver answers."""
    answers: dict[str, list[str]] = {}
    asked: list[str] = []
    real = socket.getaddrinfo
    # The test's own services (Redis, PostgreSQL on the loopback) still resolve.
    services = {"127.0.0.1", "::1", "localhost"}

    def fake_getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if host in services and port in SERVICE_PORTS:
            return real(host, port, family, type, proto, flags)
        asked.append(host)
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        out = []
        for address in answers[host]:
            fam = socket.AF_INET6 if ":" in address else socket.AF_INET
            sockaddr = (
                (address, port or 0, 0, 0) if fam == socket.AF_INET6 else (address, port or 0)
            )
            out.append((fam, socket.SOCK_STREAM, 6, "", sockaddr))
        return out

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    answers["_asked"] = asked  # type: ignore[assignment]
    return answers


def _create(actor, base_url):
    return services.node_create(
        actor=actor,
        name="tenant-channel",
        base_url=base_url,
        health_check="models",
        credentials=[{"secret": KEY}],
    )


REFUSED_LITERALS = [
    ("http://127.0.0.1:8000", "loopback"),
    ("http://10.1.2.3", "private"),
    ("http://172.16.0.1", "private"),
    ("http://192.168.0.10", "private"),
    ("http://100.64.0.1", "carrier-grade NAT"),
    ("http://169.254.169.254", "metadata"),
    ("http://169.254.10.10", "link-local"),
    ("http://0.0.0.0:8000", "unspecified"),
    ("http://[::]:8000", "unspecified"),
    ("http://[::1]:8000", "loopback"),
    ("http://[fe80::1]", "link-local"),
    ("http://[fd00:ec2::254]", "metadata"),
    ("http://[fc00::5]", "private"),
    ("http://[::ffff:127.0.0.1]", "IPv6 form of 127.0.0.1"),
    ("http://[::127.0.0.1]", "IPv6 form of 127.0.0.1"),
    ("http://[::ffff:0:7f00:1]", "IPv6 form of 127.0.0.1"),  # IPv4-translated (SIIT)
    ("http://[::ffff:8.8.8.8]", "IPv4-mapped"),  # whatever it carries
    ("http://[64:ff9b::8.8.8.8]", "NAT64"),
    ("http://[2002:808:808::1]", "6to4"),
    ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]", "Teredo"),
    ("http://192.0.0.8", "IETF protocol"),
    ("http://192.0.0.170", "IETF protocol"),
    ("http://0.1.2.3", "this network"),
    ("http://255.255.255.255", "broadcast"),
    ("http://198.18.0.1", "benchmarking"),
    ("http://192.88.99.1", "6to4 relay"),
    ("http://[fec0::1]", "site-local"),
    ("http://[3fff::1]", "documentation"),
    ("http://[100::1]", "reserved"),
    ("http://[::ffff:a00:5]", "IPv6 form of 10.0.0.5"),
    ("http://[::10.0.0.5]", "IPv6 form of 10.0.0.5"),
    ("http://[::169.254.169.254]", "IPv6 form of 169.254.169.254"),
    ("http://[64:ff9b::10.0.0.5]", "IPv6 form of 10.0.0.5"),
    ("http://[64:ff9b::a9fe:a9fe]", "IPv6 form of 169.254.169.254"),
    ("http://[64:ff9b:1::8.8.8.8]", "local-use NAT64"),
    ("http://[2002:a00:5::1]", "IPv6 form of 10.0.0.5"),
    ("http://[2002:7f00:1::]", "IPv6 form of 127.0.0.1"),
    ("http://[ff02::1]", "multicast"),
    ("http://224.0.0.1", "multicast"),
    ("http://240.0.0.1", "reserved"),
]


@pytest.mark.parametrize(("url", "why"), REFUSED_LITERALS)
def test_non_public_literals_are_refused(actor, production, dns, url, why):
    with pytest.raises(ValidationFailed) as exc:
        _create(actor, url)
    message = exc.value.fields["base_url"][0]
    assert "public internet" in message and why in message
    assert not Node.objects.exists()
    assert dns["_asked"] == []  # a literal is judged without asking DNS


@pytest.mark.parametrize(
    "url",
    [
        "https://93.184.216.34",
        "https://93.184.216.34:8443",
        "https://[2606:2800:220:1:248:1893:25c8:1946]",
    ],
)
def test_public_literals_are_accepted(actor, production, dns, url):
    assert _create(actor, url).base_url == url


@pytest.mark.parametrize(
    ("answers", "ok"),
    [
        (["93.184.216.34"], True),
        (["93.184.216.34", "10.0.0.8"], False),  # every answer must be public
        (["127.0.0.1"], False),
        (["169.254.169.254"], False),
        (["::ffff:10.0.0.8"], False),
        (["64:ff9b::c0a8:1"], False),  # NAT64 of 192.168.0.1
        (["64:ff9b::5db8:d822"], False),  # NAT64, even of a public address
        (["2002:c0a8:1::1"], False),  # 6to4 of 192.168.0.1
        (["::ffff:0:7f00:1"], False),
        (["192.0.0.8"], False),
        (["fe80::1%eth0"], False),
        (["2606:4700::6810:84e5"], True),
    ],
)
def test_names_are_judged_by_every_address_they_resolve_to(actor, production, dns, answers, ok):
    dns["api.vendor.example"] = answers
    url = "https://api.vendor.example"
    if ok:
        assert _create(actor, url).base_url == url
    else:
        with pytest.raises(ValidationFailed) as exc:
            _create(actor, url)
        assert "public internet" in exc.value.fields["base_url"][0]
    assert "api.vendor.example" in dns["_asked"]


@pytest.mark.parametrize(
    "host", ["localhost", "db.localhost", "metadata.google.internal", "printer.local"]
)
def test_local_names_are_refused_without_asking_dns(actor, production, dns, host):
    with pytest.raises(ValidationFailed) as exc:
        _create(actor, f"http://{host}:8080")
    assert "private network" in exc.value.fields["base_url"][0]
    assert dns["_asked"] == []


def test_an_unresolvable_name_is_a_form_error(actor, production, dns):
    with pytest.raises(ValidationFailed) as exc:
        _create(actor, "https://nowhere.example")
    assert "does not resolve" in exc.value.fields["base_url"][0]


def test_private_addresses_are_allowed_when_the_operator_says_so(actor, settings, dns):
    settings.NODE_ALLOW_PRIVATE_URLS = True  # staff allow it: a simulator on loopback
    assert _create(actor, "http://127.0.0.1:9001").base_url == "http://127.0.0.1:9001"
    assert dns["_asked"] == []


def test_embedded_ipv4_reads_every_form():
    import ipaddress

    def inner(text):
        return str(addresses.embedded_ipv4(ipaddress.ip_address(text)))

    assert inner("::ffff:10.0.0.5") == "10.0.0.5"
    assert inner("::10.0.0.5") == "10.0.0.5"
    assert inner("64:ff9b::10.0.0.5") == "10.0.0.5"
    assert inner("2002:a00:5::1") == "10.0.0.5"
    assert inner("::ffff:0:7f00:1") == "127.0.0.1"
    assert inner("64:ff9b:1::a00:5") == "10.0.0.5"
    assert inner("2001:0:4136:e378:8000:63bf:3fff:fdd2") == "192.0.2.45"
    assert addresses.embedded_ipv4(ipaddress.ip_address("::1")) is None
    assert addresses.embedded_ipv4(ipaddress.ip_address("2606:4700::1")) is None


def test_the_prober_refuses_a_name_that_now_resolves_inside(org, settings, dns, fake_node):
    # Given a tenant's node saved under a public-looking name, whose DNS now
    # answers 127.0.0.1 (a rebinding), and a shared node at the same address
    settings.NODE_ALLOW_PRIVATE_URLS = False
    dns["rebind.example"] = ["127.0.0.1"]
    tenant = NodeFactory(organization=org, base_url=f"http://rebind.example:{fake_node.port}")
    shared = NodeFactory(organization=None, base_url=f"http://rebind.example:{fake_node.port}")
    # When a probe round runs
    round_ = health.probe_nodes([tenant])
    # Then the tenant's node is refused before any request reaches the address
    (result,) = round_.results
    assert not result.ok and "non-public address" in result.error
    assert "rebind.example" not in result.error and "127.0.0.1" not in result.error
    assert fake_node.seen_auth == []
    # while the platform's own shared node (staff-managed) is reached as before
    (shared_result,) = health.probe_nodes([shared]).results
    assert shared_result.ok and fake_node.seen_auth


def test_the_rule_is_on_by_default():
    import console.settings as defaults

    if "NODE_ALLOW_PRIVATE_URLS" not in os.environ:
        assert defaults.NODE_ALLOW_PRIVATE_URLS is False


@pytest.mark.parametrize(
    "address",
    [
        "192.0.0.8",  # public to Python 3.11's is_global
        "192.0.0.9",
        "192.88.99.1",
        "fec0::1",
        "3fff::1",
        "5f00::1",
        "2620:4f:8000::1",
        "2001:3::1",
        "::ffff:0:a00:5",
        "64:ff9b::808:808",
        "2002:808:808::1",
        "::808:808",
    ],
)
def test_special_use_ranges_are_refused_whatever_pythons_ipaddress_says(address):
    import ipaddress

    assert addresses.why_not_public(ipaddress.ip_address(address))


def test_the_prober_checks_an_ip_literal_again_before_each_probe(org, settings, fake_node):
    # Given a tenant's node saved at 127.0.0.1 while staff allowed private
    # addresses, and a shared node at the same address
    settings.NODE_ALLOW_PRIVATE_URLS = True
    tenant = NodeFactory(organization=org, base_url=fake_node.url)
    shared = NodeFactory(organization=None, base_url=fake_node.url)
    # When the rule is back on and a probe round runs
    settings.NODE_ALLOW_PRIVATE_URLS = False
    (result,) = health.probe_nodes([tenant]).results
    # Then the tenant's node is refused without a request, naming no address
    assert not result.ok and "not a public address" in result.error
    assert "127.0.0.1" not in result.error
    assert fake_node.paths == []
    # while the shared node is probed as before
    (shared_result,) = health.probe_nodes([shared]).results
    assert shared_result.ok and "/health" in fake_node.paths


def test_test_now_relays_only_health_and_model_ids_of_a_tenants_node(actor, settings, fake_node):
    # Given a tenant's node (on loopback: staff allowed it) whose server also
    # serves /metrics with load figures
    settings.NODE_ALLOW_PRIVATE_URLS = True
    node = services.node_create(actor=actor, name="own", base_url=fake_node.url)
    # When its owner presses "test now"
    outcome = services.node_test(actor=actor, node_id=node.pk)
    # Then the answer has its health and its model ids, and nothing else it served
    result = outcome.result
    assert result.ok and result.latency_ms is not None
    assert result.models == ({"id": "llama"},)
    assert result.load is None and result.metrics == "skipped"
    assert "/metrics" not in fake_node.paths
    node.refresh_from_db()
    assert node.running is None and not node.metrics_available


def test_test_now_of_a_tenants_node_that_now_resolves_inside_reaches_nothing(
    actor, settings, dns, fake_node
):
    # Given a tenant's node saved under a public name, which now resolves to 127.0.0.1
    settings.NODE_ALLOW_PRIVATE_URLS = False
    dns["rebind.example"] = ["93.184.216.34"]
    node = services.node_create(
        actor=actor, name="rebinding", base_url=f"http://rebind.example:{fake_node.port}"
    )
    dns["rebind.example"] = ["127.0.0.1"]
    # When its owner presses "test now"
    result = services.node_test(actor=actor, node_id=node.pk).result
    # Then nothing reached the address and nothing about it is relayed
    assert not result.ok and result.models is None and result.load is None
    assert "non-public" in result.error and "127.0.0.1" not in result.error
    assert fake_node.paths == []

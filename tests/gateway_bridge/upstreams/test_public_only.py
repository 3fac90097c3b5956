"""Server-side request forgery at connect time: a ``public_only`` request (a
tenant's node) resolves its host once, refuses it unless every address it
resolved to passes the address guard, and connects to a checked address, so
a name re-pointed after it was saved (DNS rebinding) reaches nothing. DNS is
mocked (``socket.getaddrinfo``); the only server is a raw one on 127.0.0.1."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from gateway_bridge.upstreams import UpstreamError, UpstreamPool
from inference_node.facade import why_not_public
from tests.gateway_bridge.upstreams.helpers import ok, raw_server, read_request, run


@pytest.fixture
def dns(monkeypatch):
    """``dns["name"] = [answer, answer, ...]``: each lookup of the name takes
    the next answer (a list of addresses; the last one repeats)."""
    answers: dict[str, list[list[str]]] = {}
    asked: list[str] = []
    real = socket.getaddrinfo

    def fake_getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if host not in answers:
            return real(host, port, family, type, proto, flags)
        asked.append(host)
        queue = answers[host]
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 0)))
            for address in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    answers["_asked"] = asked  # type: ignore[assignment]
    return answers


def _loopback_only(address) -> str:
    """A test guard that takes 127.0.0.1 for "public" (the test's only server)."""
    return "" if address == ipaddress.ip_address("127.0.0.1") else "not the test server"


def test_a_name_resolving_to_a_private_address_is_refused_before_connecting(dns):
    connections = []

    async def handle(reader, writer, n):
        connections.append(n)
        await read_request(reader)
        writer.write(ok())

    async def scenario():
        pool = UpstreamPool(address_guard=why_not_public)
        async with raw_server(handle) as (url, _):
            port = url.rsplit(":", 1)[1]
            dns["rebind.example"] = [["93.184.216.34", "127.0.0.1"]]  # one answer of two
            with pytest.raises(UpstreamError) as refused:
                await pool.request("GET", f"http://rebind.example:{port}", "/v1/models",
                                   public_only=True)  # fmt: skip
            assert refused.value.reason == "connect"
            assert "127.0.0.1" not in str(refused.value)
            # An IP literal is checked just the same (saved under older rules).
            with pytest.raises(UpstreamError):
                await pool.request("GET", url, "/v1/models", public_only=True)
            # The platform's own node at the same address is not limited.
            resp = await pool.request("GET", url, "/v1/models")
            assert await resp.read() == b"ok"
            await pool.close()

    run(scenario())
    assert connections == [1]  # only the unlimited request connected


def test_the_checked_address_is_the_one_connected_to(dns):
    # Given a name whose first answer passes the guard and whose later answers
    # (a rebinding after the check) would not
    heads = []

    async def handle(reader, writer, n):
        heads.append((await read_request(reader))[0])
        writer.write(ok())

    async def scenario():
        pool = UpstreamPool(address_guard=_loopback_only)
        async with raw_server(handle) as (url, _):
            port = url.rsplit(":", 1)[1]
            dns["node.tenant.example"] = [["127.0.0.1"], ["127.0.0.3"]]
            base = f"http://node.tenant.example:{port}"
            # When a public-only request connects
            resp = await pool.request("GET", base, "/v1/models", public_only=True)
            body = await resp.read()
            await pool.close()
        return body

    # Then the name was resolved once, the connection went to the checked address,
    # and the node still saw its own name in the Host header
    assert run(scenario()) == b"ok"
    assert dns["_asked"] == ["node.tenant.example"]
    assert len(heads) == 1 and "host: node.tenant.example:" in heads[0]


def test_without_an_address_guard_public_only_requests_are_refused(dns):
    async def scenario():
        pool = UpstreamPool()
        with pytest.raises(UpstreamError):
            await pool.request("GET", "http://127.0.0.1:9", "/", public_only=True)
        await pool.close()

    run(scenario())

"""Connections over their life: no leaks after aborts, errors and cancellations,
releases, aborts from another task, a closed pool, and HTTPS keep-alive."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import ipaddress
import ssl

import pytest

from gateway_bridge.upstreams import UpstreamError, UpstreamPool
from tests.gateway_bridge.upstreams.helpers import (
    CHAT,
    SSE_HEAD,
    assert_nothing_in_use,
    chat_body,
    chunk,
    collect,
    ok,
    raw_server,
    read_request,
    run,
)


def test_no_connection_leaks_after_aborts_errors_and_cancellations(node, hanging_node):
    async def garbage(reader, writer, n):
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloEXTRA")

    async def scenario():
        pool = UpstreamPool(max_connections_per_host=8)
        outcomes = {"ok": 0, "error": 0, "cancelled": 0}

        async def one(i: int, junk_url: str):
            kind = i % 6
            try:
                if kind == 0:
                    await (await pool.request("POST", node.base_url, CHAT, chat_body(2))).read()
                elif kind == 1:  # abort right after the head
                    (await pool.request("POST", node.base_url, CHAT, chat_body(50))).abort()
                elif kind == 2:  # stop iterating a stream early, then release
                    resp = await pool.request(
                        "POST", node.base_url, CHAT, chat_body(9, stream=True)
                    )
                    async for _ in resp.sse():
                        break
                    resp.release()
                elif kind == 3:  # a stream that hangs: idle timeout
                    resp = await pool.request(
                        "POST",
                        hanging_node.base_url,
                        CHAT,
                        chat_body(9, stream=True),
                        idle_timeout=0.05,
                    )
                    async for _ in resp.sse():
                        pass
                elif kind == 4:  # junk after the response: answered, then not reused
                    await (await pool.request("POST", junk_url, CHAT, b"{}")).read()
                else:  # cancelled while a hanging node streams
                    resp = await pool.request(
                        "POST", hanging_node.base_url, CHAT, chat_body(9, stream=True)
                    )
                    task = asyncio.ensure_future(_drain(resp))
                    await asyncio.sleep(0.01)
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    outcomes["cancelled"] += 1
                    return
                outcomes["ok"] += 1
            except UpstreamError:
                outcomes["error"] += 1

        async with raw_server(garbage) as (junk_url, _):
            await asyncio.gather(*(one(i, junk_url) for i in range(120)))
            stats = pool.stats()
        await pool.close()
        return outcomes, stats

    outcomes, stats = run(scenario())
    assert outcomes == {"ok": 80, "error": 20, "cancelled": 20}
    for url, host in stats.items():
        assert host["in_use"] == 0, (url, host)
        assert host["open"] == host["idle"] <= 8


def test_a_response_dropped_without_release_frees_its_connection(node):
    async def scenario():
        pool = UpstreamPool()
        resp = await pool.request("POST", node.base_url, CHAT, chat_body(2))
        in_use = pool.stats()[node.base_url]["in_use"]
        del resp
        gc.collect()
        stats = pool.stats()[node.base_url]
        await pool.close()
        return in_use, stats

    in_use, stats = run(scenario())
    assert in_use == 1
    assert (stats["in_use"], stats["open"]) == (0, 0)


def test_abort_from_another_task_wakes_the_reader(hanging_node):
    # The gateway's pattern: one task relays the stream, a watcher aborts when the
    # client goes away.
    async def scenario():
        pool = UpstreamPool()
        resp = await pool.request("POST", hanging_node.base_url, CHAT, chat_body(9, stream=True))
        relay = asyncio.ensure_future(collect(resp))
        await asyncio.sleep(0.05)  # the relay now waits on the hung stream
        resp.abort()
        events, reason = await asyncio.wait_for(relay, 2)
        assert_nothing_in_use(pool)
        await pool.close()
        return len(events), reason

    assert run(scenario()) == (4, "closed")


def test_released_right_after_done_the_connection_is_kept():
    async def handle(reader, writer, n):
        while True:
            await read_request(reader)
            writer.write(SSE_HEAD + chunk(b"data: {}\n\n") + chunk(b"data: [DONE]\n\n"))
            await writer.drain()
            await asyncio.sleep(0.05)  # the end of the chunked body comes a bit later
            writer.write(b"0\r\n\r\n")

    async def scenario():
        pool = UpstreamPool()
        reused = []
        async with raw_server(handle) as (url, writers):
            for _ in range(2):
                resp = await pool.request("POST", url, CHAT, b"{}")
                async for data in resp.sse():
                    if data == b"[DONE]":
                        break
                resp.release()
                reused.append(resp.reused)
            connections = len(writers)
        await pool.close()
        return reused, connections

    assert run(scenario()) == ([False, True], 1)


async def _drain(resp) -> None:
    async for _ in resp.sse():
        pass


def test_a_closed_pool_refuses_requests_and_fails_the_ones_in_flight(hanging_node):
    async def scenario():
        pool = UpstreamPool()
        resp = await pool.request("POST", hanging_node.base_url, CHAT, chat_body(9, stream=True))
        reader = asyncio.ensure_future(_drain(resp))
        await asyncio.sleep(0.05)
        await pool.close()
        with pytest.raises(UpstreamError) as in_flight:
            await reader
        with pytest.raises(UpstreamError) as after:
            await pool.request("GET", hanging_node.base_url, "/health", b"")
        return in_flight.value.reason, after.value.reason, pool.stats()

    in_flight, after, stats = run(scenario())
    assert (in_flight, after) == ("closed", "closed")
    assert stats[hanging_node.base_url]["open"] == 0


def self_signed_cert(directory) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, as PEM files: (cert path, key path)."""
    # cryptography comes with the dev dependencies (google-auth needs it), not on its own.
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test node")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def test_https_with_the_pools_ssl_context_and_keep_alive(tmp_path):
    cert, key = self_signed_cert(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    seen = []

    async def handle(reader, writer, n):
        while True:
            head, _ = await read_request(reader)
            seen.append(head.split("\r\n")[1])
            writer.write(ok(b"secure %d" % n))

    async def scenario():
        pool = UpstreamPool(ssl_context=ssl.create_default_context(cafile=cert))
        strict = UpstreamPool()  # the system's CAs: the self-signed node is refused
        writers = []

        async def on_connect(reader, writer):
            writers.append(writer)
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                await handle(reader, writer, len(writers))

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=server_context)
        url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        bodies = [await (await pool.request("GET", url, "/", b"")).read() for _ in range(2)]
        with pytest.raises(UpstreamError) as refused:
            await strict.request("GET", url, "/", b"")
        await pool.close()
        await strict.close()
        server.close()
        for writer in writers:
            writer.close()
        return url, bodies, refused.value.reason

    url, bodies, refused = run(scenario())
    assert bodies == [b"secure 1", b"secure 1"]  # one TLS connection, kept alive
    assert seen[0] == f"host: {url.removeprefix('https://')}"
    assert refused == "connect"

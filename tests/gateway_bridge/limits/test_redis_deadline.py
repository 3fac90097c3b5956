"""A stalled Redis (paused, overloaded, a peer that stopped answering) must
cost a call at most the limits client's deadline: the gateway answers the
documented 503 ``limits_unavailable`` instead of hanging. Redis is played by
a fake server on 127.0.0.1 that accepts connections and never answers (the
shared Redis is never paused: other tests use it)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import threading
import time

import pytest
import redis

from gateway_bridge.config import LimitsConfig
from gateway_bridge.limits import CapBucket, RedisLimitStore, build_store
from gateway_bridge.limits.resp import RespClient, encode, parse
from tests.services import use_redis

CAP = CapBucket("key_daily_cap_exceeded", "cap:k:5:d:2026-12-02", 1_000, 3600)
USD = 1_000_000
CHAT = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}


class SilentRedis:
    """A TCP server on 127.0.0.1 that accepts and reads, and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _serve(self) -> None:
        self.sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                for conn in self._conns:
                    with contextlib.suppress(OSError):  # BlockingIOError: nothing new
                        self.received += len(conn.recv(65536))
                continue
            conn.setblocking(False)
            self._conns.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for conn in self._conns:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent_redis():
    server = SilentRedis()
    yield server
    server.close()


@pytest.mark.parametrize("client", ["resp", "redis-py"])
def test_each_command_gives_up_at_the_deadline(silent_redis, client):
    async def scenario():
        store = RedisLimitStore.from_url(silent_redis.url, client=client, timeout=0.2)
        took = []
        try:
            for _ in range(2):  # the connect, then a command on the open connection
                started = time.monotonic()
                with pytest.raises((TimeoutError, redis.TimeoutError)):
                    await store.admit("a", 10, [CAP], [], 0, hold_seconds=60)
                took.append(time.monotonic() - started)
        finally:
            await store.close()
        return took

    took = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert all(t < 1.0 for t in took), took


def test_a_late_reply_is_dropped_and_later_replies_stay_in_order():
    """The first command's reply comes after its deadline: the caller has
    already given up, and the next command still gets its own reply."""

    async def scenario():
        first = asyncio.Event()

        async def serve(reader, writer):
            buf = bytearray()
            n = 0
            while data := await reader.read(65536):
                buf += data
                pos = 0
                while pos < len(buf):
                    try:
                        command, pos = parse(buf, pos)
                    except Exception:
                        break
                    n += 1
                    if n == 1:
                        await asyncio.sleep(0.4)  # past the client's deadline
                        first.set()
                    writer.write(encode(["reply", command[1]]))
                del buf[:pos]

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = RespClient("127.0.0.1", port, timeout=0.2)
        try:
            with pytest.raises(TimeoutError):
                await client.execute("ECHO", "one")
            await first.wait()
            assert await client.execute("ECHO", "two") == [b"reply", b"two"]
            assert await client.execute("ECHO", "three") == [b"reply", b"three"]
        finally:
            await client.aclose()
            server.close()

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_the_gateways_store_takes_its_deadline_from_the_settings(silent_redis, settings):
    settings.GATEWAY_LIMITS_STORE = "redis"
    use_redis(settings, silent_redis.url)
    settings.GATEWAY_LIMITS_REDIS_TIMEOUT = 0.15

    async def scenario():
        store = build_store(LimitsConfig.from_settings())
        try:
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await store.snapshot(CAP.key)
            return time.monotonic() - started
        finally:
            await store.close()

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) < 1.0


@pytest.mark.django_db(transaction=True)
def test_a_stalled_redis_answers_503_limits_unavailable_within_the_deadline(
    tenant, start_gateway, silent_redis
):
    # Given a gateway whose limits store is a Redis that never answers
    store = RedisLimitStore(RespClient.from_url(silent_redis.url, timeout=0.25))
    gw = start_gateway(limits=store)
    _, raw = tenant.new_key(spend_cap_daily=USD)
    # When a call needs its spend cap checked
    conn = http.client.HTTPConnection(gw.host, gw.port, timeout=5)
    started = time.monotonic()
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(CHAT),
            headers={"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        status, body, retry_after = (
            resp.status,
            json.loads(resp.read()),
            resp.getheader("retry-after"),
        )
    finally:
        conn.close()
    took = time.monotonic() - started
    # Then it is refused with the documented 503, in well under a second, not left hanging
    assert status == 503, body
    assert body["error"]["code"] == "limits_unavailable"
    assert retry_after == "1"
    assert took < 1.5, took
    assert silent_redis.received > 0  # the command did go to "Redis"

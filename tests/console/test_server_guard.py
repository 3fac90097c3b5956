"""The web server's guard against slow and greedy clients (issue 19): header
and body timeouts, idle keep-alive, a per-address connection cap
(console.server) and the byte limit on console request bodies
(console.body_limit), each against a real uvicorn on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import pytest
import uvicorn

from console.body_limit import BodyLimit
from console.kernel import ipnet
from console.server import GuardedHttpProtocol, ServerLimits


async def echo_app(scope, receive, send):
    """Answers with the number of body bytes it read."""
    if scope["type"] != "http":
        return
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = str(size).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


@contextlib.contextmanager
def serving(app, **limits):
    """``app`` behind uvicorn with the guarded protocol (these limits) on a free port."""
    protocol = type("TestProtocol", (GuardedHttpProtocol,), {"limits": ServerLimits(**limits)})
    protocol.open_by_address = {}
    protocol.open_total = 0
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, lifespan="off", log_level="warning", access_log=False, loop="asyncio", http=protocol
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1], protocol
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.settimeout(5)
    return s


def first_answer(s: socket.socket) -> bytes:
    """One answer of ``echo_app`` to a request without a body (its body is "0")."""
    out = b""
    while not out.endswith(b"\r\n\r\n0"):
        chunk = s.recv(65536)
        assert chunk, out
        out += chunk
    return out


def first_answer_body(s: socket.socket) -> bytes:
    """The body of ``echo_app``'s one answer (the number of body bytes it read)."""
    out = b""
    while b"\r\n\r\n" not in out or not out.split(b"\r\n\r\n", 1)[1]:
        chunk = s.recv(65536)
        assert chunk, out
        out += chunk
    return out.split(b"\r\n\r\n", 1)[1]


def read_all(s: socket.socket, timeout: float = 5.0) -> tuple[bytes, float]:
    """Everything until the server closes (and how long that took)."""
    t0 = time.monotonic()
    s.settimeout(timeout)
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    return out, time.monotonic() - t0


def test_half_a_header_is_answered_408_and_closed_after_the_header_timeout():
    with serving(echo_app, header_timeout=0.5, body_timeout=5) as (port, _):
        s = connect(port)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        out, took = read_all(s)
        assert out.startswith(b"HTTP/1.1 408")
        assert took < 2.0


def test_a_silent_connection_is_closed_after_the_header_timeout():
    with serving(echo_app, header_timeout=0.5) as (port, _):
        s = connect(port)
        out, took = read_all(s)
        assert out.startswith(b"HTTP/1.1 408")
        assert took < 2.0


def test_a_kept_alive_connection_gets_the_header_timeout_for_its_next_request():
    with serving(echo_app, header_timeout=0.5, keepalive_timeout=5) as (port, _):
        s = connect(port)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        first = first_answer(s)
        assert first.startswith(b"HTTP/1.1 200")
        time.sleep(0.8)  # longer than the header timeout, within keep-alive: still open
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # ... then half a head
        out, took = read_all(s)
        assert out.startswith(b"HTTP/1.1 408")
        assert took < 2.0


def test_an_idle_kept_alive_connection_is_closed_after_the_keep_alive_timeout():
    with serving(echo_app, keepalive_timeout=0.5) as (port, _):
        s = connect(port)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert first_answer(s).startswith(b"HTTP/1.1 200")
        out, took = read_all(s)
        assert out == b""
        assert took < 2.0


def test_a_slow_body_is_cut_off_after_the_body_timeout():
    with serving(echo_app, header_timeout=5, body_timeout=0.6) as (port, _):
        s = connect(port)
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        t0 = time.monotonic()
        closed = False
        for _ in range(40):  # a byte every 0.1 s: each read is quick, the whole is not
            try:
                s.sendall(b"x")
            except OSError:
                closed = True
                break
            time.sleep(0.1)
            s.setblocking(False)
            try:
                if s.recv(65536).startswith(b"HTTP/1.1 408"):
                    closed = True
                    break
            except BlockingIOError:
                pass
            finally:
                s.setblocking(True)
        assert closed
        assert time.monotonic() - t0 < 2.0


def test_a_request_that_arrives_in_time_is_answered():
    with serving(echo_app, header_timeout=1, body_timeout=1) as (port, _):
        s = connect(port)
        s.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
        )
        out, _ = read_all(s)
        assert out.startswith(b"HTTP/1.1 200")
        assert out.endswith(b"\r\n\r\n5")


def test_one_address_cannot_hold_more_connections_than_the_cap():
    cap = 20
    with serving(echo_app, header_timeout=30, max_per_address=cap) as (port, protocol):
        held = [connect(port, "127.0.0.2") for _ in range(cap)]
        for s in held:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # half a head, held
        extra = connect(port, "127.0.0.2")
        out, took = read_all(extra)
        assert out.startswith(b"HTTP/1.1 503")
        assert took < 1.0
        # Another address is served meanwhile.
        other = connect(port, "127.0.0.1")
        other.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert first_answer(other).startswith(b"HTTP/1.1 200")
        # Closing held connections frees their places.
        for s in held:
            s.close()
        deadline = time.monotonic() + 5
        while protocol.open_by_address.get("127.0.0.2") and time.monotonic() < deadline:
            time.sleep(0.02)
        again = connect(port, "127.0.0.2")
        again.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert first_answer(again).startswith(b"HTTP/1.1 200")


def test_many_addresses_together_cannot_hold_more_connections_than_the_overall_cap():
    with serving(echo_app, header_timeout=30, max_per_address=0, max_connections=3) as (
        port,
        protocol,
    ):
        held = [connect(port, f"127.0.0.{n}") for n in (2, 3, 4)]
        for s in held:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # half a head, held
        extra = connect(port, "127.0.0.5")
        out, took = read_all(extra)
        assert out.startswith(b"HTTP/1.1 503") and b"too many connections open" in out
        assert took < 1.0
        held.pop().close()
        deadline = time.monotonic() + 5
        while protocol.open_total >= 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        again = connect(port, "127.0.0.5")
        again.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert first_answer(again).startswith(b"HTTP/1.1 200")


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_cap():
    proxy, cap = "127.0.0.9", 2
    limits = {"header_timeout": 30, "max_per_address": cap}
    with serving(echo_app, **limits, trusted_proxies=ipnet.parse([proxy])) as (port, _):

        def in_flight(client: str) -> socket.socket:
            s = connect(port, proxy)
            s.sendall(
                b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"
                + f"X-Forwarded-For: {client}\r\n\r\n12345".encode()  # half the body
            )
            return s

        # The proxy holds more connections than the per-address cap: not capped by its address
        held = [in_flight("198.51.100.7") for _ in range(cap)]
        held += [in_flight("198.51.100.8") for _ in range(cap)]
        time.sleep(0.2)
        # A third request of one client is refused; a client behind the same proxy is served
        out, _ = read_all(in_flight("198.51.100.7"))
        assert out.startswith(b"HTTP/1.1 503") and b"from your address" in out
        other = connect(port, proxy)
        other.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.9\r\n\r\n")
        assert first_answer(other).startswith(b"HTTP/1.1 200")
        # A forged header from an untrusted peer counts against that peer
        direct = connect(port, "127.0.0.3")
        direct.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.7\r\n\r\n")
        assert first_answer(direct).startswith(b"HTTP/1.1 200")
        # A finished request frees its client's place
        held[0].sendall(b"67890")
        assert first_answer_body(held[0]) == b"10"
        out = in_flight("198.51.100.7")
        out.sendall(b"67890")
        assert first_answer_body(out) == b"10"


# --- the byte limit on console bodies -------------------------------------------------


@pytest.fixture
def console_server(db):
    from django.core.asgi import get_asgi_application

    with serving(BodyLimit(get_asgi_application(), 64 * 1024)) as (port, _):
        yield port


def send_chunked(s: socket.socket, path: str, total: int) -> tuple[bytes, int]:
    """POST ``total`` bytes chunked to ``path``; (the answer, bytes sent before it came)."""
    s.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n\r\n".encode()
    )
    chunk = b"a" * 16384
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent = 0
    s.setblocking(False)
    answer = b""
    deadline = time.monotonic() + 20
    while sent < total and time.monotonic() < deadline:
        try:
            answer += s.recv(65536)
            if answer:
                break
        except BlockingIOError:
            pass
        except OSError:
            break
        try:
            s.sendall(frame)
            sent += len(chunk)
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            break
    s.setblocking(True)
    if not answer:
        answer, _ = read_all(s)
    return answer, sent


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/login/", "/healthz"])
def test_a_huge_chunked_console_post_is_cut_off_at_the_limit_with_413(console_server, path):
    s = connect(console_server)
    answer, sent = send_chunked(s, path, 64 * 1024 * 1024)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # Cut off near the limit: not 64 MB read (and spooled) first.
    assert sent < 8 * 1024 * 1024


@pytest.mark.django_db(transaction=True)
def test_a_declared_length_over_the_limit_is_answered_413_unread(console_server):
    s = connect(console_server)
    s.sendall(
        b"POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1073741824\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n\r\n"
    )
    out, took = read_all(s)
    assert out.startswith(b"HTTP/1.1 413")
    assert took < 2.0


@pytest.mark.django_db(transaction=True)
def test_a_console_post_under_the_limit_reaches_django(console_server):
    s = connect(console_server)
    body = b"email=a%40b.example&password=x"
    s.sendall(
        b"POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        b"application/x-www-form-urlencoded\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
        + body
    )
    out, _ = read_all(s)
    assert out.startswith(b"HTTP/1.1 403")  # Django's CSRF answer: the body got through

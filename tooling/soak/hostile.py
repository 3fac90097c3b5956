"""The soak's hostile phase: what the red team did, beside normal traffic.

Runs in a process of its own, at a lower CPU priority (it stands in for
other machines: its own work must not slow the soak's measuring clients),
from other loopback addresses than the normal clients (the per-address
connection cap is per address), and prints one JSON summary:

* ``slow`` (127.0.0.2): more connections than the cap per gateway, each
  sending half a request head and waiting; those over the cap must be
  refused at once (503), the others closed by the header timeout (408).
* ``oversize`` (127.0.0.4): a 5 MB declared body on a gateway path (413 before
  it is read), and 64 MB chunked to ``/login/`` and ``/healthz`` (413 once the
  console's limit is passed, the rest never read).
* ``flood`` (127.0.0.3): a tenant's concurrent 3.5 MB bodies of 100,000
  messages that fail validation (400 or 429; a 429 sent before the body is
  read closes the connection, which the sender may see as a reset).
* ``random_keys`` (127.0.0.5): calls with made-up keys (401).

``python -m tooling.soak.hostile '<json>'`` with gateways, the flooding
tenant's key, seconds, the cap and the console's body limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import secrets
import sys
import time

import aiohttp
import orjson

# Each attack from its own loopback address (Linux routes all of 127/8 to lo).
SLOW_FROM = "127.0.0.2"
FLOOD_FROM = "127.0.0.3"
OVERSIZE_FROM = "127.0.0.4"
RANDOM_FROM = "127.0.0.5"


def _count(table: dict, name) -> None:
    table[str(name)] = table.get(str(name), 0) + 1


def _host_port(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[1]
    host, _, port = rest.partition(":")
    return host, int(port)


async def slow_clients(gateways: list[str], per_gateway: int, end: float, out: dict) -> None:
    """Hold half-sent request heads; note how each connection ended."""
    outcomes: dict = {}
    held: list[float] = []

    async def one(host: str, port: int) -> None:
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(SLOW_FROM, 0)
                )
            except OSError as exc:
                _count(outcomes, f"connect:{type(exc).__name__}")
                await asyncio.sleep(0.5)
                continue
            t0 = time.monotonic()  # held from here: a loaded backlog may delay the connect
            try:
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: soak\r\nX-Slow: ")
                await writer.drain()
                left = end - time.monotonic()
                # Past the end a held head must still be closed by the header timeout.
                answer = await asyncio.wait_for(reader.read(64), timeout=max(0.1, left) + 15)
            except (TimeoutError, OSError):
                answer = b"?"
            finally:
                writer.close()
            took = time.monotonic() - t0
            if answer.startswith(b"HTTP/1.1 503"):
                _count(outcomes, "503 over the cap")
                await asyncio.sleep(0.5)  # an attacker retries; not in a tight loop
            elif answer.startswith(b"HTTP/1.1 408"):
                _count(outcomes, "408 header timeout")
                held.append(took)
            elif answer == b"?":
                _count(outcomes, "still held at the end")
            else:
                _count(outcomes, "closed without an answer")
                held.append(took)

    tasks = []
    for url in gateways:
        host, port = _host_port(url)
        tasks += [asyncio.create_task(one(host, port)) for _ in range(per_gateway)]
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    out["slow"] = {
        "connections_per_gateway": per_gateway,
        "outcomes": outcomes,
        "held_seconds_max": round(max(held), 2) if held else None,
    }


async def _chunked(host: str, port: int, path: str) -> tuple[str, int]:
    """A chunked body of up to 64 MB to a console path: the answer's status
    (``reset``: the connection was reset, ``none``: no answer) and the bytes
    sent before it came."""
    reader, writer = await asyncio.open_connection(host, port, local_addr=(OVERSIZE_FROM, 0))
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n\r\n".encode()
    )
    chunk = b"a" * 65536
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent = 0
    answer = asyncio.create_task(reader.read(64))
    reset = False
    try:
        while sent < 64 * 1024 * 1024 and not answer.done():
            writer.write(frame)
            await asyncio.wait_for(writer.drain(), timeout=10)
            sent += len(chunk)
        head = await asyncio.wait_for(answer, timeout=10)
    except (TimeoutError, OSError) as exc:
        # The server closed on a body it will not read: its 413 may be lost in the reset.
        reset = isinstance(exc, ConnectionError)
        head = answer.result() if answer.done() and not answer.exception() else b""
    finally:
        writer.close()
        if not answer.done():
            answer.cancel()
    if head.startswith(b"HTTP/1.1"):
        return head[9:12].decode(), sent
    return ("reset" if reset else "none"), sent


async def _declared(session: aiohttp.ClientSession, url: str, key: str, statuses: dict) -> None:
    """A 5 MB body declared in its Content-Length, on a gateway path with a valid key."""
    body = b"{" + b" " * (5 * 1024 * 1024) + b"}"
    try:
        async with session.post(
            url + "/v1/chat/completions",
            data=body,
            headers={
                "authorization": f"Bearer {key}",
                "content-type": "application/json",
            },
        ) as resp:
            await resp.read()
            _count(statuses, f"/v1/chat/completions {resp.status}")
    except (aiohttp.ClientError, OSError) as exc:
        _count(statuses, f"/v1/chat/completions transport:{type(exc).__name__}")


async def oversize(
    gateways: list[str], key: str, console_limit: int, end: float, out: dict
) -> None:
    """Bodies over the limits: declared on a gateway path (with a valid key: an
    unknown one is refused before any body), chunked on console paths."""
    statuses: dict = {}
    sent_max = 0
    connector = aiohttp.TCPConnector(local_addr=(OVERSIZE_FROM, 0), force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        while time.monotonic() < end:
            for url in gateways:
                host, port = _host_port(url)
                for path in ("/login/", "/healthz"):
                    try:
                        status, sent = await _chunked(host, port, path)
                    except OSError as exc:
                        _count(statuses, f"{path} transport:{type(exc).__name__}")
                    else:
                        sent_max = max(sent_max, sent)
                        _count(statuses, f"{path} {status}")
                await _declared(session, url, key, statuses)
            await asyncio.sleep(0.5)
    out["oversize"] = {
        "statuses": statuses,
        "console_limit_bytes": console_limit,
        "chunked_bytes_sent_max": sent_max,
    }


async def flood(gateways: list[str], key: str, workers: int, end: float, out: dict) -> None:
    """A tenant's concurrent 3.5 MB bodies that fail validation."""
    messages = [{"role": "user", "content": "hi " * 3} for _ in range(100_000)]
    messages.append({"role": "villain", "content": "x"})
    body = orjson.dumps({"model": "sim-chat-small", "messages": messages, "max_tokens": 4})
    statuses: dict = {}
    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(local_addr=(FLOOD_FROM, 0), limit=workers * 2)
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}

    async def worker(i: int) -> None:
        url = gateways[i % len(gateways)] + "/v1/chat/completions"
        while time.monotonic() < end:
            try:
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    _count(statuses, resp.status)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                _count(statuses, f"transport:{type(exc).__name__}")
                await asyncio.sleep(0.1)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(worker(i) for i in range(workers)))
    out["flood"] = {"workers": workers, "body_bytes": len(body), "statuses": statuses}


async def random_keys(gateways: list[str], per_second: float, end: float, out: dict) -> None:
    """Made-up keys, at a steady rate."""
    statuses: dict = {}
    body = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "hi"}]}
    # A new connection per call (no keep-alive race with the server's idle timeout).
    connector = aiohttp.TCPConnector(local_addr=(RANDOM_FROM, 0), limit=64, force_close=True)

    async def one(url: str) -> None:
        headers = {"authorization": f"Bearer sk-{secrets.token_urlsafe(32)}"}
        try:
            async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
                await r.read()
                _count(statuses, r.status)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            _count(statuses, f"transport:{type(exc).__name__}")

    pending = set()
    async with aiohttp.ClientSession(connector=connector) as session:
        i = 0
        while time.monotonic() < end:
            task = asyncio.create_task(one(gateways[i % len(gateways)]))
            pending.add(task)
            task.add_done_callback(pending.discard)
            i += 1
            await asyncio.sleep(1.0 / per_second)
        if pending:
            await asyncio.gather(*pending)
    out["random_keys"] = {"per_second": per_second, "statuses": statuses}


async def run(args: dict) -> dict:
    end = time.monotonic() + args["seconds"]
    gateways = args["gateways"]
    out: dict = {"seconds": args["seconds"]}
    await asyncio.gather(
        slow_clients(gateways, args["slow_per_gateway"], end, out),
        oversize(gateways, args["flood_key"], args["console_limit"], end, out),
        flood(gateways, args["flood_key"], args["flood_workers"], end, out),
        random_keys(gateways, args["random_per_second"], end, out),
    )
    return out


def main() -> None:
    args = json.loads(sys.argv[1])
    with contextlib.suppress(OSError):
        os.nice(10)
    with contextlib.suppress(ValueError, OSError):  # room for the held connections
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()

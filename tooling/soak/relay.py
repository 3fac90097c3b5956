"""A TCP relay on loopback, for a broker the soak may not stop.

With ``manage.py soak --broker-url amqp://...`` the broker is a server the
soak shares (RabbitMQ on this machine): every soak process reaches it through
this relay, and the "broker stopped" fault stops the relay, not the server.
Stopping it cuts every connection at once and refuses new ones, which is what
the gateways and workers see of a broker that went down; messages the broker
had confirmed stay in its durable queue, as they would across a restart.

``python -m tooling.soak.relay --port 40001 --to 127.0.0.1:5672``"""

from __future__ import annotations

import argparse
import asyncio
import contextlib


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def serve(port: int, host: str, target_port: int) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(host, target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", port, reuse_address=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="listen on 127.0.0.1:PORT")
    parser.add_argument("--to", required=True, help="HOST:PORT to relay to")
    args = parser.parse_args()
    host, _, port = args.to.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, host.strip("[]"), int(port)))


if __name__ == "__main__":
    main()

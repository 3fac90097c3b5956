"""The soak's child processes share its database, so they must be able to read
what it wrote there: API keys (pepper) and sealed node tokens (the secret-box
keys). A child with its own var/ would generate a different box key, fail to
open every node token and route nowhere (every call a 503)."""

from cryptography.fernet import Fernet, MultiFernet
from django.conf import settings

from console.crypto import seal
from console.soak.cluster import Cluster, Proc


def test_the_soak_children_open_the_node_tokens_the_soak_sealed(tmp_path):
    cluster = Cluster(workdir=tmp_path, database_url="postgres://x/y", redis_url="redis://x/0")
    cluster.broker = Proc("broker", [], {}, tmp_path / "broker.log", port=6390)
    env = cluster.env()
    assert env["CONSOLE_VAR_DIR"] != str(settings.VAR_DIR)  # children have their own var/ …
    child_box = MultiFernet([Fernet(k.encode()) for k in env["CONSOLE_SECRET_KEYS"].split(",")])
    # … yet open what the soak sealed, and check keys with the same pepper.
    assert child_box.decrypt(seal("soak-node-token").encode()).decode() == "soak-node-token"
    assert env["API_KEY_PEPPER"] == settings.API_KEY_PEPPER


def test_a_shared_broker_is_reached_through_the_relay(tmp_path):
    """--broker-url: the children's broker URL keeps the user, password and
    vhost, on the relay's port; the relay forwards to the real server."""
    cluster = Cluster(
        workdir=tmp_path,
        database_url="postgres://x/y",
        redis_url="redis://x/0",
        external_broker_url="amqp://guest:guest@127.0.0.1:5672/soak",
    )
    cluster.broker = cluster._broker_proc()
    assert cluster.env()["CELERY_BROKER_URL"] == (
        f"amqp://guest:guest@127.0.0.1:{cluster.broker.port}/soak"
    )
    assert cluster.broker.argv[-2:] == ["--to", "127.0.0.1:5672"]


def test_the_relay_forwards_and_cuts_every_connection_when_stopped(tmp_path):
    import os
    import socket
    import socketserver
    import sys
    import threading

    from console.soak.cluster import free_port

    class Echo(socketserver.BaseRequestHandler):
        def handle(self):
            while data := self.request.recv(1024):
                self.request.sendall(data)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    relay = Proc(
        "relay",
        [sys.executable, "-m", "console.soak.relay", "--port", str(port),
         "--to", f"127.0.0.1:{server.server_address[1]}"],
        dict(os.environ), tmp_path / "relay.log", port=port,
    )  # fmt: skip
    try:
        relay.start()
        relay.wait_port(timeout=20)
        with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as conn:
            conn.sendall(b"ping")
            assert conn.recv(16) == b"ping"
            relay.stop()
            assert conn.recv(16) == b""  # cut: the broker "went down"
    finally:
        relay.stop()
        server.shutdown()
        server.server_close()

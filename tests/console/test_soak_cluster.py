"""The soak's child processes share its database, so they must be able to read
what it wrote there: API keys (pepper) and sealed node tokens (the secret-box
keys). A child with its own var/ would generate a different box key, fail to
open every node token and route nowhere (every call a 503)."""

from cryptography.fernet import Fernet, MultiFernet
from django.conf import settings

from console.kernel.crypto import seal
from tooling.soak.cluster import Cluster
from tooling.soak.procs import Proc


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

    from tooling.soak.procs import free_port

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
        [sys.executable, "-m", "tooling.soak.relay", "--port", str(port),
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


SCRAPE = """# HELP gateway_circuit_openings_total Times a node's circuit opened.
gateway_key_invalidations_total 3
gateway_last_key_invalidation_timestamp_seconds 1796427084.5
gateway_circuit_openings_total{node="a"} 2
gateway_circuit_openings_total{node="b"} 1
gateway_spool_batches 4
"""


def test_the_gateways_metrics_are_read_per_gateway_and_a_silent_one_is_said_so(
    tmp_path, monkeypatch
):
    cluster = Cluster(tmp_path, "postgres://db", "redis://r")
    cluster.gateways = [object(), object()]

    def metrics(i: int) -> str:
        if i == 1:
            raise OSError("connection refused")  # gateway 2 is down
        return SCRAPE

    monkeypatch.setattr(cluster, "metrics", metrics)
    assert cluster.key_invalidation(0) == (3.0, 1796427084.5)
    assert cluster.key_invalidation(1) == (0.0, 0.0)
    assert cluster.circuit_openings() == {"gateway-1": 3, "gateway-2": None}
    assert cluster.spooled_batches() == 4

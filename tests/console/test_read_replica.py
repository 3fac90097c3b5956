"""A read replica (``DATABASE_REPLICA_URL``) takes the heavy reads: the call
logs, their CSV and API, the analytics charts and the finance exports read
from it; every write, and every other page, stays on the primary.

The replica here is the suite's ``replica`` alias (tests/conftest.py): a
second connection to the test database, so what the primary committed is on
it, as on a caught-up replica; the queries each connection ran tell where a
page read from. It is in use only where DATABASE_REPLICA_URL is set."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from django.db import DEFAULT_DB_ALIAS, connections
from django.test.utils import CaptureQueriesContext

from console.kernel.db_router import REPLICA, read_alias, replica_reads
from tests.usage.log_fixtures import login, mixed_calls, tenant
from usage.models import CallRecord

pytestmark = pytest.mark.django_db(transaction=True, databases=[DEFAULT_DB_ALIAS, REPLICA])


@pytest.fixture
def replica(settings):
    settings.DATABASE_REPLICA_URL = "postgres://replica.example/console"  # only its presence counts
    conn = connections[REPLICA]
    yield conn
    conn.close()
    if getattr(conn, "pool", None) is not None:
        conn.close_pool()  # or the test database cannot be dropped at the end


@pytest.fixture
def acme():
    t = tenant("Acme", "acme")
    mixed_calls(t)
    return t


def read_tables(captured) -> str:
    # A chunked read on PostgreSQL is a DECLARE ... CURSOR FOR SELECT.
    return " ".join(
        q["sql"] for q in captured.captured_queries if q["sql"].startswith(("SELECT", "DECLARE"))
    )


def test_logs_analytics_and_exports_read_from_the_replica(client, replica, acme):
    login(client, acme)
    newest = acme.calls[-1].request_id
    reads = {
        "/usage/calls/": "usage_call",
        f"/usage/calls/{newest}/": "usage_call",
        "/usage/calls/export.csv": "usage_call",
        "/api/v1/calls/": "usage_call",
        "/api/v1/calls/export.csv": "usage_call",
        "/analytics/charts/spend/?start=2026-11-01&end=2026-11-30": "usage_rollup",
        "/billing/exports/invoices.csv": "invoicing_invoice",
    }
    for url, table in reads.items():
        with (
            CaptureQueriesContext(replica) as on_replica,
            CaptureQueriesContext(connections[DEFAULT_DB_ALIAS]) as on_primary,
        ):
            response = client.get(url)
            body = b"".join(response.streaming_content) if response.streaming else response.content
        assert response.status_code == 200, (url, body[:300])
        assert table in read_tables(on_replica), url
        assert table not in read_tables(on_primary), url
        if table == "usage_call":
            assert newest.encode() in body, url


def test_other_pages_and_every_write_stay_on_the_primary(client, replica, acme):
    login(client, acme)
    with CaptureQueriesContext(replica) as on_replica:
        assert client.get("/keys/").status_code == 200
    assert on_replica.captured_queries == []

    def read_then_save():
        call = CallRecord.objects.get(request_id=acme.calls[0].request_id)
        assert call._state.db == REPLICA  # read from the replica
        call.cost = 4242
        with CaptureQueriesContext(replica) as on_replica:
            call.save(update_fields=["cost"])
        return call, on_replica

    call, on_replica = replica_reads(read_then_save)()
    assert not any(q["sql"].startswith("UPDATE") for q in on_replica.captured_queries)
    assert CallRecord.objects.using(DEFAULT_DB_ALIAS).get(pk=call.pk).cost == 4242


def test_without_a_replica_every_read_is_the_primarys():
    assert replica_reads(read_alias)() == DEFAULT_DB_ALIAS


def test_the_settings_name_the_replica_and_transaction_pooling(tmp_path):
    """``DATABASE_REPLICA_URL`` adds the ``replica`` alias (mirrored in tests);
    ``DATABASE_TRANSACTION_POOLING`` turns server-side cursors off on both."""
    script = (
        "import json, django; from django.conf import settings; django.setup(); "
        "print(json.dumps({a: [d['HOST'], d['PORT'], d['NAME'], "
        "d.get('DISABLE_SERVER_SIDE_CURSORS', False), d.get('TEST', {}).get('MIRROR')] "
        "for a, d in settings.DATABASES.items()}))"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "CONSOLE_VAR_DIR": str(tmp_path),
        "DATABASE_URL": "postgres://app@10.0.0.1:5432/console",
        "DATABASE_REPLICA_URL": "postgres://app@10.0.0.2:6432/console",
        "DATABASE_TRANSACTION_POOLING": "true",
    }
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == {
        "default": ["10.0.0.1", "5432", "console", True, None],
        "replica": ["10.0.0.2", "6432", "console", True, "default"],
    }
    del env["DATABASE_URL"]
    failed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert failed.returncode != 0
    assert "DATABASE_REPLICA_URL needs DATABASE_URL" in failed.stderr


# --- behind PgBouncer in transaction pooling ------------------------------------

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def bouncer(tmp_path):
    """A real PgBouncer on loopback in transaction pooling, in front of the
    suite's PostgreSQL."""
    if connections[DEFAULT_DB_ALIAS].vendor != "postgresql":
        pytest.skip("PgBouncer fronts PostgreSQL; this run is on SQLite")
    if not os.path.exists(PGBOUNCER):
        if os.environ.get("CI"):
            pytest.fail(f"{PGBOUNCER} is missing (CI installs pgbouncer)")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    primary = connections[DEFAULT_DB_ALIAS].settings_dict
    port = _free_port()
    tmp_path.chmod(0o755)
    users = tmp_path / "users.txt"
    users.write_text(f'"{primary["USER"] or "postgres"}" ""\n')
    ini = tmp_path / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={primary['HOST'] or '127.0.0.1'} port={primary['PORT'] or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {users}\n"
        "pool_mode = transaction\ndefault_pool_size = 2\nmax_client_conn = 50\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    for path in (users, ini):
        path.chmod(0o644)
    command = [PGBOUNCER, str(ini)]
    if os.geteuid() == 0:  # it refuses to run as root
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    out = process.stdout.read().decode(errors="replace") if process.stdout else ""
                    pytest.fail(f"pgbouncer did not start: {out}")
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_behind_pgbouncer_in_transaction_pooling_the_heavy_reads_work(
    client, settings, replica, bouncer, acme
):
    """The replica reached through PgBouncer in transaction pooling, as
    ``DATABASE_TRANSACTION_POOLING=true`` sets it up: no server-side cursor
    (the finance exports' chunked reads are client-side), and every page
    and export reads its rows through the pooler."""
    from invoicing.services import invoice_draft

    invoice_draft(organization_id=acme.org.pk, period="2026-11")
    replica.close()
    if getattr(replica, "pool", None) is not None:
        replica.close_pool()
    saved = dict(replica.settings_dict)
    replica.settings_dict.update(PORT=str(bouncer), DISABLE_SERVER_SIDE_CURSORS=True)
    try:
        login(client, acme)
        for url, table in {
            "/usage/calls/export.csv": "usage_call",
            "/api/v1/calls/": "usage_call",
            "/billing/exports/invoices.csv": "invoicing_invoice",
            "/billing/exports/invoice-lines.csv": "invoicing_invoiceline",
        }.items():
            with CaptureQueriesContext(replica) as on_replica:
                response = client.get(url)
                body = b"".join(response.streaming_content) if response.streaming else b""
            assert response.status_code == 200, (url, body[:300])
            sql = read_tables(on_replica)
            assert table in sql, url
            assert "DECLARE" not in sql, url  # no server-side cursor through the pooler
            replica.ensure_connection()
            assert replica.connection.info.port == bouncer  # through the pooler
        assert acme.calls[-1].request_id.encode() in b"".join(
            client.get("/usage/calls/export.csv").streaming_content
        )
    finally:
        replica.close()
        if getattr(replica, "pool", None) is not None:
            replica.close_pool()
        replica.settings_dict.clear()
        replica.settings_dict.update(saved)

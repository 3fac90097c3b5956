"""Publisher confirms, without a broker: on RabbitMQ the settings turn
confirms on for every producer, and the gateway's publish asks for them with
a bound wait and ``mandatory`` (an unroutable batch raises, so it is spooled);
other brokers keep their socket timeouts. The real thing against RabbitMQ is
tests/usage/test_rabbitmq_broker.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from gateway_bridge.emitter import CelerySend

ROOT = Path(__file__).resolve().parents[2]


def test_rabbitmq_settings_confirm_every_publish(tmp_path):
    env = {
        **os.environ,
        "CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//",
        "CONSOLE_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "console.settings",
    }
    code = (
        "from django.conf import settings as s; "
        "print(s.CELERY_BROKER_TRANSPORT_OPTIONS, s.CELERY_TASK_ACKS_LATE, "
        "s.CELERY_TASK_REJECT_ON_WORKER_LOST, s.CELERY_BROKER_CONNECTION_TIMEOUT)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "{'confirm_publish': True} True True 4.0"


@pytest.mark.parametrize(
    ("url", "confirms"),
    [
        ("amqp://guest:guest@127.0.0.1:5672//", True),
        ("pyamqp://guest:guest@127.0.0.1:5672/ci", True),
        ("redis://127.0.0.1:6379/0", False),
    ],
)
def test_the_gateway_publish_is_confirmed_on_rabbitmq_only(url, confirms):
    from console.kernel.celery import app

    send = CelerySend(broker_url=url, connect_timeout=1.5, confirm_timeout=3.0)
    assert send.confirms is confirms
    with (
        mock.patch.object(app, "connection_for_write") as connect,
        mock.patch.object(app, "send_task") as send_task,
    ):
        send([{"request_id": "r1"}])
    options = connect.call_args.kwargs["transport_options"]
    publish = send_task.call_args.kwargs
    if confirms:
        assert options == {"confirm_publish": True, "read_timeout": 3.0, "write_timeout": 3.0}
        assert publish["confirm_timeout"] == 3.0
        assert publish["mandatory"] is True
    else:
        assert options == {"socket_connect_timeout": 1.5, "socket_timeout": 1.5}
        assert "confirm_timeout" not in publish
    assert publish["retry"] is False
    assert connect.call_args.kwargs["connect_timeout"] == 1.5


def test_a_failed_publish_drops_the_connection():
    from console.kernel.celery import app

    send = CelerySend(broker_url="amqp://guest:guest@127.0.0.1:5672//")
    with (
        mock.patch.object(app, "connection_for_write") as connect,
        mock.patch.object(app, "send_task", side_effect=OSError("nacked")),
        pytest.raises(OSError, match="nacked"),
    ):
        send([{"request_id": "r1"}])
    connect.return_value.release.assert_called_once()
    assert send._conn is None  # the next publish reconnects

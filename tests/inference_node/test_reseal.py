"""``manage.py reseal_secrets``: every node token and API key re-encrypted with
the first key of ``CONSOLE_SECRET_KEYS``, counts printed, values never."""

from __future__ import annotations

from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection

from inference_node.models import Credential, Node
from tests.inference_node.factories import CredentialFactory, NodeFactory

pytestmark = pytest.mark.django_db

TOKEN = "node-token-for-reseal-0001"
KEYS = ("sk-reseal-key-one-000000001", "sk-reseal-key-two-000000002")


def _raw(table, column):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, {column} FROM {table} WHERE {column} <> '' ORDER BY id")  # noqa: S608
        return dict(cursor.fetchall())


def _opens_with(key: str, sealed: str) -> bool:
    try:
        Fernet(key.encode()).decrypt(sealed.encode())
    except Exception:
        return False
    return True


def test_reseal_moves_every_secret_to_the_first_key(settings):
    old = settings.CONSOLE_SECRET_KEYS[0]
    node = NodeFactory(token=TOKEN)
    NodeFactory(token="")  # nothing to seal
    for secret in KEYS:
        CredentialFactory(node=node, secret=secret)
    before_tokens = _raw("inference_node_node", "token")
    before_keys = _raw("inference_node_credential", "secret")
    # Given a new key put first, the old one kept after it
    new = Fernet.generate_key().decode()
    settings.CONSOLE_SECRET_KEYS = [new, old]
    out = StringIO()
    call_command("reseal_secrets", stdout=out)
    text = out.getvalue()
    assert "node tokens: 1 re-encrypted" in text and "API keys: 2 re-encrypted" in text
    assert all(s not in text for s in (TOKEN, *KEYS)) and "…" not in text
    after_tokens = _raw("inference_node_node", "token")
    after_keys = _raw("inference_node_credential", "secret")
    assert after_tokens.keys() == before_tokens.keys() and after_keys.keys() == before_keys.keys()
    for sealed in (*after_tokens.values(), *after_keys.values()):
        assert _opens_with(new, sealed) and not _opens_with(old, sealed)
    # Then the old key can go, and the application still reads every secret.
    settings.CONSOLE_SECRET_KEYS = [new]
    assert Node.objects.get(pk=node.pk).token == TOKEN
    assert sorted(Credential.objects.values_list("secret", flat=True)) == sorted(KEYS)


def test_a_value_no_key_opens_stops_everything(settings):
    node = NodeFactory(token=TOKEN)
    CredentialFactory(node=node, secret=KEYS[0])
    before = _raw("inference_node_node", "token")
    settings.CONSOLE_SECRET_KEYS = [Fernet.generate_key().decode()]  # the old key dropped too early
    with pytest.raises(CommandError) as exc:
        call_command("reseal_secrets", stdout=StringIO())
    assert "inference_node_node row" in str(exc.value) and TOKEN not in str(exc.value)
    assert _raw("inference_node_node", "token") == before


def test_a_value_left_in_clear_is_sealed(settings):
    node = NodeFactory(token="")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE inference_node_node SET token = %s WHERE id = %s", [TOKEN, node.pk])
    out = StringIO()
    call_command("reseal_secrets", stdout=out)
    assert "1 sealed (were stored in clear)" in out.getvalue()
    assert _raw("inference_node_node", "token")[node.pk].startswith("gAAAAA")
    assert Node.objects.get(pk=node.pk).token == TOKEN

"""Secrets at rest: sealed in the column, clear in memory, rotated by key order,
and a value no key opens is neither sent nor erased."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.db import connection

from console.kernel import crypto
from inference_node.models import Credential
from inference_node.selectors import build_routing_snapshot
from tests.inference_node.factories import NodeFactory

SECRET = "sk-ant-api03-very-secret-value-1234"


def raw_secret(credential) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT secret FROM inference_node_credential WHERE id = %s", [credential.pk]
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_a_credential_is_sealed_in_its_column_and_clear_in_memory():
    node = NodeFactory(kind="anthropic", health_check="traffic", serves=["sim-claude"])
    credential = Credential.objects.create(node=node, secret=SECRET, secret_hint="1234")
    stored = raw_secret(credential)
    assert SECRET not in stored and crypto.is_sealed(stored)
    assert Credential.objects.get(pk=credential.pk).secret == SECRET
    assert crypto.hint(SECRET) == "…1234" and crypto.hint("short") == "set"


@pytest.mark.django_db
def test_rotation_new_key_first_old_one_still_opens(settings):
    node = NodeFactory(kind="openai", health_check="traffic", serves=["sim-gpt"])
    credential = Credential.objects.create(node=node, secret=SECRET, secret_hint="1234")
    old = list(settings.CONSOLE_SECRET_KEYS)
    settings.CONSOLE_SECRET_KEYS = [Fernet.generate_key().decode(), *old]
    assert Credential.objects.get(pk=credential.pk).secret == SECRET  # the old key opens it
    resealed = crypto.reseal(raw_secret(credential))
    settings.CONSOLE_SECRET_KEYS = settings.CONSOLE_SECRET_KEYS[:1]  # old key dropped
    assert crypto.unseal(resealed) == SECRET


@pytest.mark.django_db
def test_a_secret_no_key_opens_is_skipped_and_kept(settings):
    node = NodeFactory(kind="openai", health_check="traffic", serves=["sim-gpt"])
    credential = Credential.objects.create(node=node, secret=SECRET, secret_hint="1234")
    sealed = raw_secret(credential)
    settings.CONSOLE_SECRET_KEYS = [Fernet.generate_key().decode()]  # the sealing key is gone
    loaded = Credential.objects.get(pk=credential.pk)
    assert loaded.secret == "" and isinstance(loaded.secret, crypto.Unreadable)
    # The gateway's snapshot still builds; the channel has no usable key, so it is left out.
    assert build_routing_snapshot().for_model("sim-gpt", None) == ()
    loaded.weight = 5
    loaded.save()  # a save writes the sealed value back untouched
    assert raw_secret(credential) == sealed

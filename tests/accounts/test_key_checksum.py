"""Issued keys carry a checksum (``accounts.keys``): every issued key verifies,
one changed character anywhere in its secret fails it, and a key that fails
is refused before any query; keys issued before the checksum (no mark) keep
working; the checksum function is pure and documented."""

from __future__ import annotations

import re
import secrets
import zlib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts import keys
from accounts.models import ApiKey
from tests.factories import issue_key

# The shape the README's quickstart, ``manage.py up`` and tests/console/test_up.py show.
KEY_RE = re.compile(r"^sk-[a-z2-9]{10}_[A-Za-z0-9_-]{43}$")
NEW_KEY_RE = re.compile(r"^sk-[a-z2-9]{10}_[0-9A-Za-z]{42}V$")


def _legacy_raw(public_id: str) -> str:
    """A key as issued before the checksum: ``token_urlsafe(32)`` secret."""
    return f"sk-{public_id}_{secrets.token_urlsafe(32)}"


def _mutations(raw: str):
    """``raw`` with one character of its secret changed, at every position."""
    start = len(keys.KEY_PREFIX) + keys.KEY_ID_LEN + 1
    for i in range(start, len(raw)):
        other = "a" if raw[i] != "a" else "b"
        yield i, raw[:i] + other + raw[i + 1 :]


def test_the_checksum_is_pure_and_documented():
    assert keys.key_checksum.__doc__ and "CRC32" in keys.key_checksum.__doc__
    assert "checksum" in keys.__doc__.lower() and "Legacy" in keys.__doc__
    text = "sk-abcdefghij_" + "x" * 36
    assert keys.key_checksum(text) == keys.key_checksum(text)
    # CRC32 in six base62 digits, most significant first, zero-padded
    n = zlib.crc32(text.encode())
    digits = keys.key_checksum(text)
    assert len(digits) == 6
    assert sum(keys.BASE62.index(c) * 62**p for p, c in enumerate(reversed(digits))) == n
    assert keys.key_checksum("") == "000000"
    assert keys.key_checksum("a") != keys.key_checksum("b")
    with pytest.raises(UnicodeEncodeError):
        keys.key_checksum("sk-é")


def test_new_secrets_have_the_documented_shape_and_verify():
    for _ in range(200):
        public_id, raw, digest = keys.new_secret(keys.KEY_PREFIX)
        assert KEY_RE.match(raw) and NEW_KEY_RE.match(raw), raw
        assert raw.startswith(f"sk-{public_id}_")
        assert digest == keys.keyed_hash(raw)
        assert keys.is_checksummed(raw)
        assert not keys.checksum_refuses(raw)
        assert raw[-7:-1] == keys.key_checksum(raw[:-7])


def test_one_changed_character_anywhere_in_the_secret_fails_the_checksum():
    for _ in range(20):
        _, raw, _ = keys.new_secret(keys.KEY_PREFIX)
        for i, wrong in _mutations(raw):
            if i == len(raw) - 1:
                # the mark itself: no longer claims the format (the old path refuses it)
                assert not keys.is_checksummed(wrong)
            else:
                assert keys.checksum_refuses(wrong), (i, wrong)
        # and in the id too (the checksum covers everything before it)
        assert keys.checksum_refuses(raw[:5] + ("a" if raw[5] != "a" else "b") + raw[6:])
        # another prefix is not a gateway key at all: the old path refuses it
        assert not keys.is_checksummed("sK" + raw[2:])


def test_random_strings_shaped_like_a_new_key_are_refused():
    refused = 0
    for _ in range(2000):
        public_id = "".join(secrets.choice("abcdefghijkmnopqrstuvwxyz23456789") for _ in range(10))
        body = "".join(secrets.choice(keys.BASE62) for _ in range(42))
        refused += keys.checksum_refuses(f"sk-{public_id}_{body}V")
    assert refused == 2000  # one in 2**32 would pass by chance
    assert keys.checksum_refuses("sk-abcdefghij_" + "é" * 42 + "V")


def test_legacy_keys_never_look_checksummed():
    # token_urlsafe(32)'s last character carries two zero bits: never the mark
    assert {secrets.token_urlsafe(32)[-1] for _ in range(5000)} <= set("AEIMQUYcgkosw048")
    for _ in range(500):
        raw = _legacy_raw("abcdefghij")
        assert KEY_RE.match(raw)
        assert not keys.is_checksummed(raw) and not keys.checksum_refuses(raw)
    for junk in (None, 42, "", "sk-", "sk-short", "pat_abc", "x" * 57, "sk-" + "a" * 300):
        assert not keys.checksum_refuses(junk)


@pytest.mark.django_db
def test_issued_keys_authenticate_and_a_typo_costs_no_query(admin_actor):
    key, raw = issue_key(admin_actor)
    assert NEW_KEY_RE.match(raw)
    assert keys.api_key_authenticate(raw).key_id == key.pk
    for _, wrong in _mutations(raw):
        if not keys.is_checksummed(wrong):
            continue
        with CaptureQueriesContext(connection) as queries:
            assert keys.api_key_authenticate(wrong) is None
        assert len(queries) == 0


@pytest.mark.django_db
def test_a_key_issued_before_the_checksum_still_authenticates(admin_actor):
    key, _new = issue_key(admin_actor)
    public_id = "legacy2345"
    raw = _legacy_raw(public_id)
    ApiKey.objects.filter(pk=key.pk).update(public_id=public_id, secret_hash=keys.keyed_hash(raw))
    assert not keys.is_checksummed(raw)
    auth = keys.api_key_authenticate(raw)
    assert auth is not None and auth.key_id == key.pk
    # and a wrong legacy secret is still refused the old way (a lookup)
    with CaptureQueriesContext(connection) as queries:
        assert keys.api_key_authenticate(raw[:-1] + ("A" if raw[-1] != "A" else "E")) is None
    assert len(queries) == 1

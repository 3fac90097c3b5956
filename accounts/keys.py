"""API key and access-token secrets: generation, keyed hashing, lookup.

A gateway key looks like ``sk-<10-char id>_<43-char secret>``. Only
HMAC-SHA256(pepper, whole key) is stored; the id is the visible prefix.
``api_key_authenticate`` is the one function that turns a presented key into
the key's restrictions, in constant time, without revealing whether a prefix
exists.

Key formats (both are ``sk-`` + 10-char id + ``_`` + 43 characters):

* **Checksummed** (every key issued now; personal access tokens, ``pat_``,
  are made the same way)::

      sk-<id>_<36 random base62><6-char checksum>V

  The last character, ``V``, marks the format. The checksum is
  ``key_checksum(<everything before it>)``: the CRC32 of the ASCII text
  ``sk-<id>_<36 random>``, written as exactly 6 base62 digits
  (``0-9A-Za-z``, most significant first, zero-padded). It needs no secret:
  anyone may check it offline, as with GitHub's ``ghp_`` tokens, and its only
  job is to refuse typos and made-up strings without any lookup or hashing
  (``checksum_refuses``). The keyed hash remains the authentication.
* **Legacy** (keys issued before the checksum): the secret is
  ``secrets.token_urlsafe(32)``, 43 base64url characters encoding 256 bits,
  so its last character always carries two zero bits: it is one of
  ``AEIMQUYcgkosw048`` and never ``V``. A legacy key therefore never looks
  checksummed and keeps the old path (hash, then the database), unchanged.

A future format must end in another character outside ``AEIMQUYcgkosw048``."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import TypeGuard

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from accounts.models import ApiKey, ApiKeyStatus, SubAccountStatus
from console.kernel import ipnet

_ID_ALPHABET = "abcdefghijkmnopqrstuvwxyz23456789"
KEY_ID_LEN = 10
KEY_PREFIX = "sk-"
TOKEN_PREFIX = "pat_"  # noqa: S105 - a format prefix, not a secret
_DUMMY_HASH = "0" * 64

# The checksummed format (see the module docstring).
BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
SECRET_LEN = 43
CHECKSUM_LEN = 6
CHECKSUM_MARK = "V"
_RANDOM_LEN = SECRET_LEN - CHECKSUM_LEN - len(CHECKSUM_MARK)  # 36 base62: 214 bits
CHECKSUMMED_KEY_LEN = len(KEY_PREFIX) + KEY_ID_LEN + 1 + SECRET_LEN  # 57
_TAIL = CHECKSUM_LEN + len(CHECKSUM_MARK)  # the checksum and the mark end the key
_BASE62_PAIRS = [a + b for a in BASE62 for b in BASE62]  # 00, 01, … zz: 62**2 of them


def _new_public_id() -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(KEY_ID_LEN))


def keyed_hash(raw: str) -> str:
    return hmac.new(settings.API_KEY_PEPPER.encode(), raw.encode(), hashlib.sha256).hexdigest()


def key_checksum(text: str) -> str:
    """The checksum of a key's text before it: CRC32 of ``text`` (ASCII) as
    exactly ``CHECKSUM_LEN`` base62 digits, most significant first. Pure: the
    same text always gives the same checksum, with no secret and no I/O.
    ``text`` that is not ASCII is no key's: ``UnicodeEncodeError``."""
    # 62**6 > 2**32: six digits always suffice; two at a time (the gateway
    # runs this on every call that presents a checksummed key).
    high, low = divmod(zlib.crc32(text.encode("ascii")), 62**4)
    mid, low = divmod(low, 62**2)
    return _BASE62_PAIRS[high] + _BASE62_PAIRS[mid] + _BASE62_PAIRS[low]


def is_checksummed(raw: object, prefix: str = KEY_PREFIX) -> TypeGuard[str]:
    """Whether ``raw`` claims the checksummed format: the key's length and its
    last character (``CHECKSUM_MARK``). No legacy key ever does."""
    return (
        isinstance(raw, str)
        and len(raw) == len(prefix) + KEY_ID_LEN + 1 + SECRET_LEN
        and raw[-1] == CHECKSUM_MARK
        and raw.startswith(prefix)
    )


def checksum_refuses(raw: object, prefix: str = KEY_PREFIX) -> bool:
    """True when ``raw`` claims the checksummed format and its checksum is
    wrong: not a key we issued, refused with no lookup, hashing or cache work.
    False for a correct checksum and for every key without the mark (legacy
    keys and garbage take the usual path)."""
    if not is_checksummed(raw, prefix):
        return False
    if not raw.isascii():
        return True
    return key_checksum(raw[:-_TAIL]) != raw[-_TAIL:-1]


def new_secret(prefix: str) -> tuple[str, str, str]:
    """Return ``(public_id, raw, hash)`` for a fresh key or token, in the
    checksummed format (the module docstring)."""
    public_id = _new_public_id()
    body = f"{prefix}{public_id}_" + "".join(secrets.choice(BASE62) for _ in range(_RANDOM_LEN))
    raw = f"{body}{key_checksum(body)}{CHECKSUM_MARK}"
    return public_id, raw, keyed_hash(raw)


def split_public_id(raw: str, prefix: str) -> str | None:
    """The public id of a well-formed secret, else ``None``."""
    if not isinstance(raw, str) or len(raw) > 200 or not raw.startswith(prefix):
        return None
    body = raw[len(prefix) :]
    if len(body) < KEY_ID_LEN + 20 or body[KEY_ID_LEN] != "_":
        return None
    return body[:KEY_ID_LEN]


def hashes_match(presented_hash: str, stored_hash: str) -> bool:
    return hmac.compare_digest(presented_hash, stored_hash or _DUMMY_HASH)


@dataclass(frozen=True, slots=True)
class AuthenticatedKey:
    """What the gateway needs to enforce a key's rules; no secret in it."""

    key_id: int
    public_id: str
    name: str
    organization_id: int
    organization_slug: str
    currency: str
    timezone: str
    billing_mode: str
    sub_account_id: int | None
    owner_id: int | None
    # Model rules per level; an empty tuple means that level allows all.
    allowed_models_key: tuple[str, ...]
    allowed_models_sub_account: tuple[str, ...]
    allowed_models_org: tuple[str, ...]
    ip_allowlist: tuple[str, ...]
    priority: str
    expires_at: datetime | None
    key_caps: tuple[int | None, int | None, int | None]  # day, month, lifetime
    sub_account_caps: tuple[int | None, int | None, int | None]
    key_rpm: int | None
    key_tpm: int | None
    sub_account_rpm: int | None
    sub_account_tpm: int | None
    org_rpm: int | None = None
    org_tpm: int | None = None
    response_cache_seconds: int = 0
    # Set when the presented secret is the one a rotation replaced: the end of
    # its grace period, after which it must be refused to the second (a cache
    # holding this view checks it on every call).
    grace_ends_at: datetime | None = None
    # Cost attribution: the tag keys every call must carry in
    # ``x-gateway-tags``, the key's and its sub-account's together.
    required_tag_keys: tuple[str, ...] = ()
    # A load-test key whose calls are not billed (``ApiKey.test_traffic``):
    # its events say ``is_test`` and its calls reserve on no prepaid balance.
    test_traffic: bool = False
    # A staff load test's key: every call goes to this inference node only.
    pinned_node_id: int | None = None

    def model_allowed(self, model: str) -> bool:
        # Each level in turn (not all() over a generator: this runs on every call).
        rule = self.allowed_models_key
        if rule and model not in rule:
            return False
        rule = self.allowed_models_sub_account
        if rule and model not in rule:
            return False
        rule = self.allowed_models_org
        return not rule or model in rule

    def ip_allowed(self, ip: str) -> bool:
        return ipnet.allowed(ip, self.ip_allowlist)


def api_key_authenticate(raw_key: str, *, now: datetime | None = None) -> AuthenticatedKey | None:
    """Look a presented gateway key up. ``None`` for anything that is not a
    usable key: malformed, unknown, wrong secret, revoked, expired, or whose
    sub-account or organization is suspended. The HMAC is always computed and
    compared, so an unknown prefix costs the same as a wrong secret. A key
    whose checksum is wrong (``checksum_refuses``) is refused first, with no
    query and no hash: only the presented text decides that, so it reveals
    nothing about which keys exist."""
    if checksum_refuses(raw_key):
        return None
    now = now or timezone.now()
    public_id = split_public_id(raw_key, KEY_PREFIX)
    presented = keyed_hash(raw_key if isinstance(raw_key, str) else "")
    key = None
    if public_id:
        key = (
            ApiKey.objects.select_related("organization", "sub_account")
            .filter(Q(public_id=public_id) | Q(previous_public_id=public_id))
            .first()
        )
    if key is None:
        hashes_match(presented, _DUMMY_HASH)
        return None
    grace = None
    if key.public_id == public_id:
        ok = hashes_match(presented, key.secret_hash)
    else:
        grace = key.previous_valid_until
        ok = hashes_match(presented, key.previous_secret_hash) and bool(grace and grace > now)
    if not ok or key.status != ApiKeyStatus.ACTIVE:
        return None
    if key.expires_at and key.expires_at <= now:
        return None
    org = key.organization
    sub = key.sub_account
    if not org.is_active or (sub and sub.status != SubAccountStatus.ACTIVE):
        return None
    return authenticated_view(key, grace_ends_at=grace)


def authenticated_view(key, *, grace_ends_at: datetime | None = None) -> AuthenticatedKey:
    org = key.organization
    sub = key.sub_account
    return AuthenticatedKey(
        key_id=key.id,
        public_id=key.public_id,
        name=key.name,
        organization_id=org.id,
        organization_slug=org.slug,
        currency=org.currency,
        timezone=org.timezone,
        billing_mode=org.billing_mode,
        sub_account_id=sub.id if sub else None,
        owner_id=key.owner_id,
        allowed_models_key=tuple(key.allowed_models or ()),
        allowed_models_sub_account=tuple(sub.allowed_models or ()) if sub else (),
        allowed_models_org=tuple(org.allowed_models or ()),
        ip_allowlist=tuple(key.ip_allowlist or ()),
        priority=key.priority,
        expires_at=key.expires_at,
        key_caps=(key.spend_cap_daily, key.spend_cap_monthly, key.spend_cap_lifetime),
        sub_account_caps=(
            (sub.spend_cap_daily, sub.spend_cap_monthly, sub.spend_cap_lifetime)
            if sub
            else (None, None, None)
        ),
        key_rpm=key.rpm_limit,
        key_tpm=key.tpm_limit,
        sub_account_rpm=sub.rpm_limit if sub else None,
        sub_account_tpm=sub.tpm_limit if sub else None,
        org_rpm=org.rpm_limit,
        org_tpm=org.tpm_limit,
        response_cache_seconds=key.response_cache_seconds,
        grace_ends_at=grace_ends_at,
        required_tag_keys=tuple(
            dict.fromkeys(
                [*(key.required_tag_keys or ()), *((sub.required_tag_keys or ()) if sub else ())]
            )
        ),
        test_traffic=key.test_traffic,
        pinned_node_id=key.pinned_node_id,
    )

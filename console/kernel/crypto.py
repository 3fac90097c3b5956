"""Secrets at rest: vendor credentials and node tokens, sealed with Fernet.

``seal`` encrypts with the first key of ``CONSOLE_SECRET_KEYS`` (AES-128-CBC
+ HMAC-SHA256, authenticated, from ``cryptography``); ``unseal`` tries every
key, so keys can be rotated: put the new key first, keep the old ones after
it, run ``manage.py reseal_secrets`` (every sealed value re-encrypted with the
new key), then drop the old keys. Without the setting (the embedded default)
one key is generated into ``var/secret_box_key``; production requires the
setting.

``SealedTextField`` is a model field that holds a sealed value in the database
and the clear text in memory: code reads and assigns clear text, the column
never holds it. A stored value no configured key opens (a key dropped too
early) reads as ``Unreadable``: an empty string that is never sent anywhere,
logged each time it is read, and written back unchanged if its row is saved, so one
bad key neither stops the processes that load secrets nor erases them.

``hint`` is all that may ever be shown of a secret (its last four characters,
when it is long enough that they reveal little).

``no_store`` marks the one answer that does show a secret whole, once (a new or
rotated gateway key, a personal access token, a webhook signing secret, the
two-factor key and recovery codes, an invitation link), and any other answer
no cache may keep (private downloads: CSV exports, PDFs; the readiness probe):
``Cache-Control: no-store``, so neither the browser (its disk cache, its back
button) nor a proxy keeps a copy. Every such view calls it; no view writes the
header itself.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models

# Every Fernet token starts with these bytes (version 0x80, base64url).
_TOKEN_PREFIX = "gAAAAA"  # noqa: S105 - a format marker, not a secret


logger = logging.getLogger(__name__)


class SecretUnreadable(Exception):
    """A sealed value no configured key opens (a key was dropped too early)."""


class Unreadable(str):
    """What a sealed column reads as when no key opens it: "" (falsy, so never
    presented to anyone) carrying the sealed text, which a save writes back."""

    sealed: str

    def __new__(cls, sealed: str):
        value = super().__new__(cls, "")
        value.sealed = sealed
        return value


@lru_cache(maxsize=4)
def _box(keys: tuple[str, ...]) -> MultiFernet:
    try:
        return MultiFernet([Fernet(k.encode()) for k in keys])
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(
            "CONSOLE_SECRET_KEYS must be Fernet keys (32 url-safe base64 bytes each; "
            "make one with `python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())'`)"
        ) from exc


def box() -> MultiFernet:
    keys = tuple(settings.CONSOLE_SECRET_KEYS)
    if not keys:
        raise ImproperlyConfigured("CONSOLE_SECRET_KEYS is empty")
    return _box(keys)


def seal(clear: str) -> str:
    """The sealed form of ``clear`` ("" stays "")."""
    if not clear:
        return ""
    return box().encrypt(clear.encode()).decode("ascii")


def unseal(sealed: str) -> str:
    if not sealed:
        return ""
    try:
        return box().decrypt(sealed.encode("ascii")).decode()
    except (InvalidToken, UnicodeError) as exc:
        raise SecretUnreadable("a stored secret cannot be opened with CONSOLE_SECRET_KEYS") from exc


def reseal(sealed: str) -> str:
    """``sealed`` re-encrypted with the first key."""
    if not sealed:
        return ""
    try:
        return box().rotate(sealed.encode("ascii")).decode("ascii")
    except InvalidToken as exc:
        raise SecretUnreadable("a stored secret cannot be opened with CONSOLE_SECRET_KEYS") from exc


def is_sealed(value: str) -> bool:
    return value.startswith(_TOKEN_PREFIX)


def hint(secret: str) -> str:
    """What may be shown of a secret: "…" and its last four characters when it
    has at least 12, "set" when shorter, "" when there is none."""
    if not secret:
        return ""
    return f"…{secret[-4:]}" if len(secret) >= 12 else "set"


class _HasHeaders(Protocol):
    """A response that takes headers by item (Django's ``HttpResponse``, DRF's)."""

    def __setitem__(self, header: str, value: str) -> None: ...


_Response = TypeVar("_Response", bound=_HasHeaders)


def no_store(response: _Response) -> _Response:
    """``Cache-Control: no-store`` on ``response`` (Django's or DRF's), which is
    returned: for an answer that shows a secret once, or that no cache may keep."""
    response["Cache-Control"] = "no-store"
    return response


class SealedTextField(models.TextField):
    """A text column that stores ``seal(value)`` and reads back the clear text.
    Not for lookups: equal clear texts seal differently."""

    if TYPE_CHECKING:
        # A model instance's attribute holds the clear text (Django's descriptor);
        # without django-stubs the type checker would take it for the field itself.
        def __get__(self, instance: Any, owner: Any) -> Any: ...
        def __set__(self, instance: Any, value: str) -> None: ...

    def from_db_value(self, value, expression, connection):
        if value is None or value == "":
            return value
        try:
            return unseal(value)
        except SecretUnreadable:
            logger.error(
                "a sealed %s.%s cannot be opened with CONSOLE_SECRET_KEYS; it is left "
                "unused until the key that sealed it is configured again",
                self.model.__name__,
                self.name,
            )
            return Unreadable(value)

    def get_prep_value(self, value):
        if isinstance(value, Unreadable):
            return value.sealed
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return seal(value)

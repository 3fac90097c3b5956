"""Cost attribution: the per-call tags and end-user id a client sends, and
their limits. The one place they are parsed and checked: the gateway reads a
call's ``x-gateway-tags`` / ``x-gateway-end-user`` headers and the protocol's
end-user body field through here, and ingest validates the usage event's
``tags`` and ``end_user`` with the same rules.

* Tags: ``x-gateway-tags: team:search, env:prod`` — comma-separated
  ``key:value`` pairs, spaces around either trimmed, the first ``:`` splits
  (a value may hold more). At most ``MAX_TAGS`` (10); a key is 1 to 32 of
  ``A-Z a-z 0-9 _ . -`` (case kept; the rule is accounts', which validates
  the keys a key or sub-account requires, re-exported here); a value is 1 to
  ``MAX_TAG_VALUE`` (128) printable characters; a key given twice is an error.
* End user: at most ``MAX_END_USER`` (128) printable characters; "" means none.
  A longer id is never refused (clients send what their vendor accepts: Claude
  Code's ``metadata.user_id`` is a ~150-character JSON string): it is kept as
  its first ``MAX_END_USER - 17`` characters, ``~`` and the first 16 hex digits
  of the whole id's SHA-256 (``shorten_end_user``), so the same id is always
  recorded the same and two long ids that share a beginning stay apart. A
  control character becomes U+FFFD.

The value and end-user lengths are the usage contract's (``usage.events``,
whose ``tags_problem`` is ingest's check); what this module accepts, ingest
accepts (printable is stricter than ingest's "no control characters").

Every violation raises ``AttributionError``, whose message names the header
or field and the problem (the gateway answers it as a 400 in the caller's
protocol).
"""

from __future__ import annotations

import hashlib

from accounts.facade import MAX_TAG_KEY, MAX_TAGS, TAG_KEY_RE
from usage.events import MAX_END_USER, MAX_TAG_VALUE

TAGS_HEADER = "x-gateway-tags"
END_USER_HEADER = "x-gateway-end-user"
_fullmatch = TAG_KEY_RE.fullmatch


class AttributionError(ValueError):
    """Tags or an end-user id the limits refuse. ``source`` is the header or
    body field at fault; ``code`` a stable reason for machines."""

    def __init__(self, message: str, *, source: str, code: str):
        super().__init__(message)
        self.message = message
        self.source = source
        self.code = code


def _shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for an error message, cut short and made printable."""
    cut = text if len(text) <= limit else text[:limit] + "…"
    return repr(cut)


def tag_value_ok(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_TAG_VALUE and value.isprintable()


def parse_tags_header(raw: str, *, source: str = TAGS_HEADER) -> dict[str, str]:
    """The tags of an ``x-gateway-tags`` header value ({} when it is blank)."""
    if not raw or raw.isspace():
        return {}
    pairs = raw.split(",")
    if len(pairs) > MAX_TAGS:
        raise AttributionError(
            f"{source} has {len(pairs)} tags; at most {MAX_TAGS} are allowed.",
            source=source,
            code="too_many_tags",
        )
    tags: dict[str, str] = {}
    for pair in pairs:
        key, colon, value = pair.partition(":")
        key = key.strip()
        value = value.strip()
        if not colon:
            raise AttributionError(
                f"{source}: {_shown(pair.strip())} is not a key:value pair.",
                source=source,
                code="invalid_tags",
            )
        if _fullmatch(key) is None:
            raise AttributionError(
                f"{source}: tag key {_shown(key)} is invalid; a key is 1 to {MAX_TAG_KEY} "
                "letters, digits, '_', '.' or '-'.",
                source=source,
                code="invalid_tags",
            )
        if not tag_value_ok(value):
            raise AttributionError(
                f"{source}: the value of tag {key!r} must be 1 to {MAX_TAG_VALUE} "
                "printable characters.",
                source=source,
                code="invalid_tags",
            )
        if key in tags:
            raise AttributionError(
                f"{source}: tag key {key!r} is given more than once.",
                source=source,
                code="invalid_tags",
            )
        tags[key] = value
    return tags


def shorten_end_user(value: str) -> str:
    """``value`` fitted to ``MAX_END_USER``: as it is when it fits, else its
    beginning, ``~`` and 16 hex digits of its SHA-256 (exactly ``MAX_END_USER``
    characters)."""
    if len(value) <= MAX_END_USER:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return value[: MAX_END_USER - 17] + "~" + digest


def clean_end_user(value: object, *, source: str = END_USER_HEADER) -> str:
    """An end-user id as recorded: ``value`` itself ("" for None or ""), its
    control characters replaced by U+FFFD and a long one shortened
    (``shorten_end_user``). Only a value that is not a string is refused: the
    vendors refuse it too."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AttributionError(
            f"{source} must be a string, not {type(value).__name__}.",
            source=source,
            code="invalid_end_user",
        )
    if not value.isprintable():
        value = "".join(c if c.isprintable() else "\ufffd" for c in value)
    return shorten_end_user(value)


def missing_required(tags: dict[str, str], required: tuple[str, ...]) -> list[str]:
    """The required tag keys ``tags`` lacks, in ``required``'s order."""
    return [key for key in required if key not in tags]


__all__ = [
    "END_USER_HEADER",
    "MAX_END_USER",
    "MAX_TAGS",
    "MAX_TAG_KEY",
    "MAX_TAG_VALUE",
    "TAGS_HEADER",
    "AttributionError",
    "clean_end_user",
    "missing_required",
    "parse_tags_header",
    "shorten_end_user",
]

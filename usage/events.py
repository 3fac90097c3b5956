"""The usage contract: what the gateway reports about one call, how it
travels, and how ingest reads it back.

``UsageEvent`` is the one definition of the event. The gateway builds it
(``gateway_bridge.pipeline.usage_event``), the emitter serializes it with
``encode`` (orjson: dataclasses and datetimes natively, RFC 3339 timestamps),
and ingest validates the wire dict with ``parse`` into a ``ParsedEvent``, a
NamedTuple whose fields are the event's (``version`` aside), from which the
call row (``usage.ingest.rows.CallRow``) is derived. Adding a field is the
field and its rule's line in ``RULES`` here (and the type checker's copies
of ``ParsedEvent`` and ``CallRow``) plus the gateway line that fills it (and
the call table's column).

``SCHEMA_VERSION`` is the wire format's version: it changes when a field's
meaning changes or a field is removed, and ingest refuses a version it does
not read. Batches spooled on disk by an older gateway process replay through
the same ``parse``, so a change must keep reading what the previous version
wrote (or ingest both). A field *added* with a default that means "not
known" keeps the version: ``parse`` reads an event without the added fields
(``ADDED_FIELDS``) as if they held their defaults, so batches spooled before
the addition, and any producer not yet sending them (the synthetic traffic),
still ingest. The added fields come all together or not at all. A worker
older than the addition refuses a newer event ("unknown field(s)") into dead
letters, as it would refuse a new version: deploy workers before gateways.

Cost and margin (added to version 1): ``credential_id`` is the key-pool
credential the call went out with (None: the channel's own token, or no
upstream), ``upstream_cost`` what the upstream vendor charges for the call's
tokens at the channel's cost price, rated by ``usage.rating.rate`` at full
price, in micro-units of ``upstream_currency`` (an ISO 4217 code); 0 and ""
when the channel has no cost price (a cost without a currency is refused).

Cost attribution (added to version 1, a group of its own): ``end_user`` is
who the call was for, as the caller names its end user (at most 128
characters, "" when not said), ``tags`` the caller's tags, at most ten
``{key: value}`` strings (``tags_problem`` says the rules). An event without
them, or without the cost fields, still reads (each group with its defaults).

Load tests (added to version 1, a group of its own): ``is_test`` is True for
a call made with a load-test key its owner marked "not billed"
(``ApiKey.test_traffic``, set only by ``console.features.capacity``). The call is
rated and stored like any other (its ``cost`` is what the load test
reports, the call log shows it marked "test"), but nothing billed counts
it: no invoice, no prepaid debit (``usage.models.CallRecord.billed``), and
ingest adds it to no rollup nor attribution rollup, so spend analytics, cap
seeding, alerts, performance figures, the SLA and margin leave it out too.
An event without it reads as a billed call.

Validation is plain Python on purpose: it runs 50,000 times a second in the
ingest worker, where a serializer framework costs ten times more. The rules
are one table, ``RULES``, from which ``usage.event_rules`` derives both the
fast parser (for the valid event) and the checked one (for the reason).

Token classes are already mapped by the gateway: ``input_tokens`` is the
uncached prompt, ``cache_read_tokens`` and ``cache_write_tokens`` are the
cached parts, ``output_tokens`` includes ``reasoning_tokens``.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from functools import lru_cache
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, get_type_hints

import orjson
from django.conf import settings

from usage.event_rules import (
    A_BOOLEAN,
    A_STRING,
    AN_INTEGER,
    AN_INTEGER_OR_NULL,
    CONTROL,
    Field,
    Options,
    Rule,
    Together,
    checked_parser,
    fast_parser,
)
from usage.event_rules import InvalidEvent as InvalidEvent  # the contract's error, re-exported

SCHEMA_VERSION = 1

PROTOCOLS = frozenset({"openai", "anthropic", "gemini"})
ENDPOINTS = frozenset(
    {
        "chat.completions",
        "completions",
        "embeddings",
        "responses",
        "messages",
        "count_tokens",
        "generateContent",
        "streamGenerateContent",
        "embedContent",
        "batchEmbedContents",
    }
)
CACHE_STATUSES = frozenset({"miss", "prefix_hit", "response_hit"})
MAX_REQUEST_ID = 64
MAX_MODEL = 128
MAX_ERROR_TYPE = 64
# Bigger than any real call; keeps sums far from 64-bit overflow.
MAX_TOKENS = 10**12
MAX_DURATION_US = 10**13
MAX_ID = 2**63 - 1
# 10^9 currency units: far above any call, far below 64-bit sums.
MAX_UPSTREAM_COST = 10**15
# Cost attribution: the caller's end user and its tags (see ``check_tags``).
MAX_END_USER = 128
MAX_TAGS = 10
MAX_TAG_KEY = 32
MAX_TAG_VALUE = 128
_TAG_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


# Not frozen and without __slots__, on purpose: the gateway builds one per
# call, and a frozen dataclass's __init__ costs ten times a plain one's
# (object.__setattr__ per field), while orjson serializes a __slots__
# dataclass four times slower than one with a __dict__. Keyword-only, so no
# caller fills a field by position. Treat an event as immutable.
@dataclass(kw_only=True)
class UsageEvent:
    """One call, as the gateway reports it (see the module docstring)."""

    request_id: str
    started_at: datetime
    finished_at: datetime
    organization_id: int
    sub_account_id: int | None
    api_key_id: int
    model: str
    node_id: int | None
    protocol: str
    endpoint: str
    stream: bool
    status_code: int
    error_type: str
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    ttft_us: int | None
    latency_us: int
    upstream_us: int | None
    overhead_us: int | None
    queue_us: int | None
    client_ip: str | None
    priority: int
    cache_status: str
    # Added to version 1 (see ``ADDED_FIELDS``): the key-pool credential, and
    # the vendor's charge for the call (0 and "" when unknown).
    credential_id: int | None = None
    upstream_cost: int = 0
    upstream_currency: str = ""
    # Added to version 1 (cost attribution): who the call was for, as the
    # caller names its end user ("" when not said), and the caller's tags
    # (``{key: value}``; see ``check_tags``).
    end_user: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    # Added to version 1 (load tests): the call was made with a load-test key
    # marked "not billed" (``ApiKey.test_traffic``); False for every other call.
    is_test: bool = False
    version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The wire dict: what ``encode`` writes for this event, read back."""
        wire: dict[str, Any] = orjson.loads(orjson.dumps(self))
        return wire

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> UsageEvent:
        return cls(**parse(d)._asdict())


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(UsageEvent))
FIELD_SET = frozenset(FIELD_NAMES)


def _is_currency(code: str) -> bool:
    """An ISO 4217 code's shape: three ASCII capital letters."""
    return len(code) == 3 and code.isascii() and code.isalpha() and code.isupper()


@lru_cache(maxsize=65536)
def _check_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def tags_problem(tags: object) -> str | None:
    """Why ``tags`` are not a call's tags, or None: a JSON object of at most
    ``MAX_TAGS`` entries, each key 1 to ``MAX_TAG_KEY`` characters of
    ``A-Z a-z 0-9 _ . -``, each value a string of 1 to ``MAX_TAG_VALUE``
    characters without control characters."""
    if type(tags) is not dict:
        return f"tags must be an object, not {type(tags).__name__}"
    if len(tags) > MAX_TAGS:
        return f"at most {MAX_TAGS} tags, not {len(tags)}"
    for key, value in tags.items():
        if (
            type(key) is not str
            or not 0 < len(key) <= MAX_TAG_KEY
            or not _TAG_KEY_CHARS.issuperset(key)
        ):
            return (
                f"tag key {str(key)[:40]!r} is not 1 to {MAX_TAG_KEY} characters "
                "of A-Z a-z 0-9 _ . -"
            )
        if type(value) is not str or not 0 < len(value) <= MAX_TAG_VALUE:
            return f"tag {key!r} must have a string value of 1 to {MAX_TAG_VALUE} characters"
        if CONTROL.search(value):
            return f"tag {key!r} has control characters in its value"
    return None


# The event's rules, one line a field, in the order the checked parser reads
# them (the first failing rule gives the reason); see ``usage.event_rules``.
# ``group``: the added group a field came with (``ADDED_GROUPS``).
_BETWEEN = "{name} must be between {lo} and {hi}"
_TEXT = "{name} must be a string of 1 to {hi} characters"
_INT_ID: Options = {"lo": 1, "wrong_type": AN_INTEGER, "says": "{name} must be positive"}
_DURATION: Options = {"lo": 0, "hi": MAX_DURATION_US, "says": _BETWEEN, "wrong_type": AN_INTEGER}
_DURATION_OR_NULL: Options = {
    "null": True,
    "lo": 0,
    "hi": MAX_DURATION_US,
    "says": _BETWEEN,
    "wrong_type": AN_INTEGER_OR_NULL,
}
_TOKENS: Options = {
    "lo": 0,
    "hi": MAX_TOKENS,
    "wrong_type": AN_INTEGER,
    "too_low": "{name} is negative ({v})",
    "too_high": "{name} is implausibly large ({v})",
}


def _one_of(choices: frozenset[str]) -> str:
    return "{name} {v!r} is not one of " + ", ".join(sorted(choices))


def _skew(values: dict[str, Any]) -> str:
    return f"started_at is more than {settings.USAGE_MAX_FUTURE_SKEW_SECONDS} s in the future"


RULES: tuple[Rule, ...] = (
    Field("version", int, f"unsupported version {{v!r}}; this worker reads {SCHEMA_VERSION}",
          lo=SCHEMA_VERSION, hi=SCHEMA_VERSION),
    Field("request_id", str, _TEXT, lo=1, hi=MAX_REQUEST_ID, plain=True),
    Field("model", str, _TEXT, lo=1, hi=MAX_MODEL, plain=True),
    Field("error_type", str, "{name} must be a string of at most {hi} characters",
          hi=MAX_ERROR_TYPE, plain=True),
    Field("organization_id", int, **_INT_ID),
    Field("api_key_id", int, **_INT_ID),
    Field("sub_account_id", int, **_DURATION_OR_NULL),
    Field("node_id", int, **_DURATION_OR_NULL),
    Field("ttft_us", int, **_DURATION_OR_NULL),
    Field("upstream_us", int, **_DURATION_OR_NULL),
    Field("overhead_us", int, **_DURATION_OR_NULL),
    Field("queue_us", int, **_DURATION_OR_NULL),
    Field("latency_us", int, **_DURATION),
    Field("input_tokens", int, **_TOKENS),
    Field("cache_read_tokens", int, **_TOKENS),
    Field("cache_write_tokens", int, **_TOKENS),
    Field("output_tokens", int, **_TOKENS),
    Field("reasoning_tokens", int, **_TOKENS),
    Together("reasoning_tokens <= output_tokens", "reasoning_tokens ({reasoning_tokens}) exceed "
             "output_tokens ({output_tokens}); reasoning is part of output"),
    Field("protocol", str, _one_of(PROTOCOLS), among=PROTOCOLS),
    Field("endpoint", str, "{name} {v!r} is not a known endpoint", among=ENDPOINTS),
    Field("cache_status", str, _one_of(CACHE_STATUSES), among=CACHE_STATUSES),
    Field("stream", bool, A_BOOLEAN),
    Field("is_test", bool, A_BOOLEAN, group=3, default=False),
    Field("status_code", int, "{name} must be an HTTP status between 100 and 599: {v!r}",
          lo=100, hi=599),
    Field("priority", int, "{name} must be a small integer", lo=-32768, hi=32767),
    Field("client_ip", str, lambda v: f"client_ip is not an IP address: {str(v)[:64]!r}",
          null=True, test=_check_ip),
    Field("credential_id", int, "{name} must be a positive id", null=True, lo=1, hi=MAX_ID,
          wrong_type=AN_INTEGER_OR_NULL, group=1, default=None),
    Field("upstream_cost", int, _BETWEEN, lo=0, hi=MAX_UPSTREAM_COST, wrong_type=AN_INTEGER,
          group=1, default=0),
    Field("upstream_currency", str, test=lambda c: not c or _is_currency(c), wrong_type=A_STRING,
          says=lambda v: f"upstream_currency must be a three-letter currency code: {v[:8]!r}",
          group=1, default=""),
    Together("not upstream_cost or upstream_currency",
             "upstream_cost is set without its upstream_currency"),
    Field("end_user", str, "{name} must be at most {hi} characters", hi=MAX_END_USER,
          clean=True, wrong_type=A_STRING, group=2, default=""),
    Field("tags", dict, lambda t: tags_problem(t) or "", group=2, default={},
          test=lambda t: not t or tags_problem(t) is None),
    Field("started_at", datetime),
    Field("finished_at", datetime),
    Together("finished_at >= started_at", "finished_at is before started_at"),
    Together("started_at.timestamp() <= latest", _skew),
)  # fmt: skip
# Fields added to version 1 after its first release, group by group (their
# rules' ``group``), with what an event without them means (their ``default``;
# see the module docstring). A group comes all together or not at all; an
# event may lack any group.
_FIELDS = [r for r in RULES if isinstance(r, Field)]
ADDED_GROUPS: tuple[dict[str, object], ...] = tuple(
    {f.name: f.default for f in _FIELDS if f.group == g}
    for g in range(1, max(f.group for f in _FIELDS) + 1)
)
ADDED_FIELDS: dict[str, object] = {k: v for g in ADDED_GROUPS for k, v in g.items()}
_FIRST_FIELD_SET = FIELD_SET - ADDED_FIELDS.keys()
_GROUP_SETS = tuple(frozenset(g) for g in ADDED_GROUPS)


_Form = tuple[frozenset[str], dict[str, object]]


def _partial_forms() -> dict[int, list[_Form]]:
    """Every form an event of an older gateway has (the fields less one or
    more added groups), by its number of fields: (its keys, the defaults)."""
    forms: dict[int, list[_Form]] = {}
    n = len(ADDED_GROUPS)
    for mask in range(1, 2**n):
        lacking = [g for i, g in enumerate(ADDED_GROUPS) if mask >> i & 1]
        defaults = {k: v for g in lacking for k, v in g.items()}
        keys = FIELD_SET - defaults.keys()
        forms.setdefault(len(keys), []).append((keys, defaults))
    return forms


_PARTIAL_FORMS = _partial_forms()
# What a call record keeps of an event: every field but the wire version.
if TYPE_CHECKING:
    # The type checker's view of the NamedTuple made below from the contract
    # (it cannot read a NamedTuple made at run time): the same fields.
    class ParsedEvent(NamedTuple):
        request_id: str
        started_at: datetime
        finished_at: datetime
        organization_id: int
        sub_account_id: int | None
        api_key_id: int
        model: str
        node_id: int | None
        protocol: str
        endpoint: str
        stream: bool
        status_code: int
        error_type: str
        input_tokens: int
        cache_read_tokens: int
        cache_write_tokens: int
        output_tokens: int
        reasoning_tokens: int
        ttft_us: int | None
        latency_us: int
        upstream_us: int | None
        overhead_us: int | None
        queue_us: int | None
        client_ip: str | None
        priority: int
        cache_status: str
        credential_id: int | None
        upstream_cost: int
        upstream_currency: str
        end_user: str
        tags: dict[str, str]
        is_test: bool

else:
    _HINTS = get_type_hints(UsageEvent)
    ParsedEvent = NamedTuple(  # the contract's fields, not spelled twice
        "ParsedEvent", [(name, _HINTS[name]) for name in FIELD_NAMES if name != "version"]
    )
    ParsedEvent.__doc__ = (
        "A validated event: ``UsageEvent``'s fields but ``version``, in its order."
    )
STORED_FIELDS: tuple[str, ...] = ParsedEvent._fields
_STARTED = FIELD_NAMES.index("started_at")
_FINISHED = FIELD_NAMES.index("finished_at")
_VERSION = FIELD_NAMES.index("version")
_new_tuple = tuple.__new__


def encode(events: object) -> bytes:
    """The wire form of an event, a batch of them, or anything holding them:
    JSON, timestamps as RFC 3339 strings (what ``datetime.isoformat`` writes).
    Wire dicts (a batch replayed from the spool) encode unchanged."""
    return orjson.dumps(events)


def to_wire(events: object) -> Any:
    """What the worker receives for an event (a wire dict) or a batch (a list
    of them): ``encode``, read back."""
    return orjson.loads(orjson.dumps(events))


def _stored(values: Sequence[Any], started: datetime, finished: datetime) -> ParsedEvent:
    """``values`` (in ``FIELD_NAMES`` order) with parsed timestamps, less ``version``."""
    out = list(values)
    out[_STARTED] = started
    out[_FINISHED] = finished
    del out[_VERSION]
    parsed: ParsedEvent = _new_tuple(ParsedEvent, out)
    return parsed


def _with_added(d: Any) -> Any:
    """``d`` with the defaults of the added groups it lacks, when it is an
    event written without them (before they were added) and holds every
    other field; otherwise ``d`` itself."""
    if type(d) is dict:
        for keys, defaults in _PARTIAL_FORMS.get(len(d), ()):
            if d.keys() == keys:
                out = {**d, **defaults}
                if "tags" in defaults:
                    out["tags"] = {}  # a dict of its own per event
                return out
    return d


def _field_error(d: object) -> InvalidEvent:
    if not isinstance(d, dict):
        return InvalidEvent(f"event must be a JSON object, not {type(d).__name__}")
    keys = set(d)
    # An added group's fields are missing only when some of them are given.
    wanted = set(_FIRST_FIELD_SET)
    for names in _GROUP_SETS:
        if keys & names:
            wanted |= names
    missing = sorted(wanted - keys)
    if missing:
        return InvalidEvent(f"missing field(s): {', '.join(missing)}")
    unknown = sorted(str(k) for k in keys - FIELD_SET)
    return InvalidEvent(f"unknown field(s): {', '.join(unknown)}")


_values = itemgetter(*FIELD_NAMES)
_N_FIELDS = len(FIELD_NAMES)


def latest_start() -> float:
    """The latest ``started_at`` (POSIX seconds) accepted now; a batch reads it once."""
    skew: float = settings.USAGE_MAX_FUTURE_SKEW_SECONDS
    return time.time() + skew


def parse(d: dict[str, Any], latest: float | None = None) -> ParsedEvent:
    """Validate one wire dict; return its values (timestamps as aware
    datetimes) as a ``ParsedEvent``. Raises ``InvalidEvent``. ``latest`` is
    ``latest_start()``, passed in by callers that parse many events."""
    if latest is None:
        latest = latest_start()
    if type(d) is dict:
        if len(d) != _N_FIELDS:
            d = _with_added(d)
        if len(d) == _N_FIELDS:
            parsed: ParsedEvent | None
            try:
                parsed = _parse_valid(_values(d), latest)
            except (KeyError, TypeError, ValueError):
                parsed = None
            if parsed is not None:
                return parsed
    return _parse_checked(d, latest)


# The fast path for a valid event (the common case): every rule as one
# expression; ``None`` (or an exception) on any failure, and ``_parse_checked``
# then says which. Its ``__doc__`` is its source.
_parse_valid = fast_parser(RULES, FIELD_NAMES, _stored)
_checked = checked_parser(RULES, FIELD_NAMES, _stored)


def _parse_checked(d: dict[str, Any], latest: float) -> ParsedEvent:
    """``parse`` one rule at a time, raising the first rule's ``InvalidEvent``."""
    d = _with_added(d)
    if type(d) is not dict or d.keys() != FIELD_SET:
        raise _field_error(d)
    parsed: ParsedEvent = _checked(d, latest)
    return parsed


def utc(dt: datetime) -> datetime:
    return dt.astimezone(UTC)

"""The usage contract: what the gateway reports about one call, how it
travels, and how ingest reads it back.

``UsageEvent`` is the one definition of the event. The gateway builds it
(``gateway_bridge.pipeline.usage_event``), the emitter serializes it with
``encode`` (orjson: dataclasses and datetimes natively, RFC 3339 timestamps),
and ingest validates the wire dict with ``parse`` into a ``ParsedEvent``, a
NamedTuple whose fields are the event's (``version`` aside), from which the
call row (``usage.ingest.rows.CallRow``) is derived. Adding a field is one
edit here (the field and its validation rule) plus the gateway line that
fills it (and the call table's column).

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
ingest worker, where a serializer framework costs ten times more.

Token classes are already mapped by the gateway: ``input_tokens`` is the
uncached prompt, ``cache_read_tokens`` and ``cache_write_tokens`` are the
cached parts, ``output_tokens`` includes ``reasoning_tokens``.
"""

from __future__ import annotations

import ipaddress
import re
import time
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from functools import lru_cache
from operator import itemgetter
from typing import NamedTuple, get_type_hints

import orjson
from django.conf import settings

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
# C0 and C1 control characters: refused in an end user or a tag value.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class InvalidEvent(ValueError):
    """An event ingest cannot store. ``reason`` says precisely why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


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

    def to_dict(self) -> dict:
        """The wire dict: what ``encode`` writes for this event, read back."""
        return orjson.loads(orjson.dumps(self))

    @classmethod
    def from_dict(cls, d: dict) -> UsageEvent:
        return cls(**parse(d)._asdict())


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(UsageEvent))
FIELD_SET = frozenset(FIELD_NAMES)
# Fields added to version 1 after its first release, group by group, with
# what an event without them means (see the module docstring). A group comes
# all together or not at all; an event may lack any group.
ADDED_GROUPS: tuple[dict[str, object], ...] = (
    {"credential_id": None, "upstream_cost": 0, "upstream_currency": ""},
    {"end_user": "", "tags": {}},
    {"is_test": False},
)
ADDED_FIELDS: dict[str, object] = {k: v for g in ADDED_GROUPS for k, v in g.items()}
_FIRST_FIELD_SET = FIELD_SET - ADDED_FIELDS.keys()
_GROUP_SETS = tuple(frozenset(g) for g in ADDED_GROUPS)


def _partial_forms() -> dict[int, list[tuple[frozenset, dict]]]:
    """Every form an event of an older gateway has (the fields less one or
    more added groups), by its number of fields: (its keys, the defaults)."""
    forms: dict[int, list[tuple[frozenset, dict]]] = {}
    n = len(ADDED_GROUPS)
    for mask in range(1, 2**n):
        lacking = [g for i, g in enumerate(ADDED_GROUPS) if mask >> i & 1]
        defaults = {k: v for g in lacking for k, v in g.items()}
        keys = FIELD_SET - defaults.keys()
        forms.setdefault(len(keys), []).append((keys, defaults))
    return forms


_PARTIAL_FORMS = _partial_forms()
# What a call record keeps of an event: every field but the wire version.
_HINTS = get_type_hints(UsageEvent)
ParsedEvent = NamedTuple(  # the contract's fields, not spelled twice
    "ParsedEvent", [(name, _HINTS[name]) for name in FIELD_NAMES if name != "version"]
)
ParsedEvent.__doc__ = "A validated event: ``UsageEvent``'s fields but ``version``, in its order."
STORED_FIELDS: tuple[str, ...] = ParsedEvent._fields
_STARTED = FIELD_NAMES.index("started_at")
_FINISHED = FIELD_NAMES.index("finished_at")
_VERSION = FIELD_NAMES.index("version")
_new_tuple = tuple.__new__


def encode(events) -> bytes:
    """The wire form of an event, a batch of them, or anything holding them:
    JSON, timestamps as RFC 3339 strings (what ``datetime.isoformat`` writes).
    Wire dicts (a batch replayed from the spool) encode unchanged."""
    return orjson.dumps(events)


def to_wire(events):
    """What the worker receives for an event (a wire dict) or a batch (a list
    of them): ``encode``, read back."""
    return orjson.loads(orjson.dumps(events))


def _stored(values, started: datetime, finished: datetime) -> ParsedEvent:
    """``values`` (in ``FIELD_NAMES`` order) with parsed timestamps, less ``version``."""
    out = list(values)
    out[_STARTED] = started
    out[_FINISHED] = finished
    del out[_VERSION]
    return _new_tuple(ParsedEvent, out)


_NULLABLE_INTS = ("sub_account_id", "node_id", "ttft_us", "upstream_us", "overhead_us", "queue_us")


def _is_currency(code: str) -> bool:
    """An ISO 4217 code's shape: three ASCII capital letters."""
    return len(code) == 3 and code.isascii() and code.isalpha() and code.isupper()


def _with_added(d):
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


def _parse_time(name: str, value) -> datetime:
    if type(value) is str:
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidEvent(f"{name} is not an ISO 8601 timestamp: {value[:40]!r}") from None
    elif isinstance(value, datetime):
        dt = value
    else:
        raise InvalidEvent(f"{name} must be an ISO 8601 string, not {type(value).__name__}")
    if dt.tzinfo is None:
        raise InvalidEvent(f"{name} has no time zone offset")
    return dt


@lru_cache(maxsize=65536)
def _check_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _field_error(d: dict) -> InvalidEvent:
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


def _bad_type(name: str, want: str, value) -> InvalidEvent:
    return InvalidEvent(f"{name} must be {want}, not {type(value).__name__}")


_values = itemgetter(*FIELD_NAMES)
_N_FIELDS = len(FIELD_NAMES)
_fromisoformat = datetime.fromisoformat


def latest_start() -> float:
    """The latest ``started_at`` (POSIX seconds) accepted now; a batch reads it once."""
    return time.time() + settings.USAGE_MAX_FUTURE_SKEW_SECONDS


def parse(d: dict, latest: float | None = None) -> ParsedEvent:
    """Validate one wire dict; return its values (timestamps as aware
    datetimes) as a ``ParsedEvent``. Raises ``InvalidEvent``. ``latest`` is
    ``latest_start()``, passed in by callers that parse many events."""
    if latest is None:
        latest = latest_start()
    if type(d) is dict:
        if len(d) != _N_FIELDS:
            d = _with_added(d)
        if len(d) == _N_FIELDS:
            try:
                parsed = _parse_valid(_values(d), latest)
            except (KeyError, TypeError, ValueError):
                parsed = None
            if parsed is not None:
                return parsed
    return _parse_checked(d, latest)


def _parse_valid(v: tuple, latest: float) -> ParsedEvent | None:
    """The fast path for a valid event (the common case): every rule of
    ``_parse_checked`` as one expression over the values; ``None`` (or an
    exception) on any failure, and ``_parse_checked`` then says which."""
    (
        request_id,
        started,
        finished,
        org,
        sub,
        key,
        model,
        node,
        protocol,
        endpoint,
        stream,
        status,
        error_type,
        inp,
        cr,
        cw,
        out,
        rsn,
        ttft,
        latency,
        upstream,
        overhead,
        queue,
        ip,
        priority,
        cache_status,
        credential,
        upstream_cost,
        upstream_currency,
        end_user,
        tags,
        is_test,
        version,
    ) = v
    d_max = MAX_DURATION_US
    t_max = MAX_TOKENS
    if not (
        version == SCHEMA_VERSION
        and str is type(request_id) is type(model) is type(error_type)
        and int is type(version) is type(org) is type(key) is type(latency) is type(status)
        and int is type(inp) is type(cr) is type(cw) is type(out) is type(rsn) is type(priority)
        and int is type(upstream_cost)
        and type(upstream_currency) is str
        and type(stream) is bool is type(is_test)
        and 0 < len(request_id) <= MAX_REQUEST_ID
        and request_id.isprintable()
        and "\\" not in request_id
        and 0 < len(model) <= MAX_MODEL
        and model.isprintable()
        and "\\" not in model
        and len(error_type) <= MAX_ERROR_TYPE
        and (not error_type or (error_type.isprintable() and "\\" not in error_type))
        and org > 0
        and key > 0
        and (sub is None or (type(sub) is int and 0 <= sub <= d_max))
        and (node is None or (type(node) is int and 0 <= node <= d_max))
        and (ttft is None or (type(ttft) is int and 0 <= ttft <= d_max))
        and (upstream is None or (type(upstream) is int and 0 <= upstream <= d_max))
        and (overhead is None or (type(overhead) is int and 0 <= overhead <= d_max))
        and (queue is None or (type(queue) is int and 0 <= queue <= d_max))
        and 0 <= latency <= d_max
        and 0 <= inp <= t_max
        and 0 <= cr <= t_max
        and 0 <= cw <= t_max
        and 0 <= out <= t_max
        and 0 <= rsn <= out
        and protocol in PROTOCOLS
        and endpoint in ENDPOINTS
        and cache_status in CACHE_STATUSES
        and 100 <= status <= 599
        and -32768 <= priority <= 32767
        and (ip is None or (type(ip) is str and _check_ip(ip)))
        and (credential is None or (type(credential) is int and 0 < credential <= MAX_ID))
        and 0 <= upstream_cost <= MAX_UPSTREAM_COST
        and (_is_currency(upstream_currency) or not (upstream_currency or upstream_cost))
        and type(started) is str
        and type(finished) is str
        and type(end_user) is str
        and type(tags) is dict
        and (not end_user or (len(end_user) <= MAX_END_USER and not _CONTROL.search(end_user)))
        and (not tags or tags_problem(tags) is None)
    ):
        return None
    started = _fromisoformat(started)
    finished = _fromisoformat(finished)
    if (
        started.tzinfo is None
        or finished.tzinfo is None
        or finished < started
        or started.timestamp() > latest
    ):
        return None
    return _stored(v, started, finished)


def _parse_checked(d: dict, latest: float) -> ParsedEvent:
    """``parse`` one rule at a time, raising the first rule's ``InvalidEvent``."""
    d = _with_added(d)
    if type(d) is not dict or d.keys() != FIELD_SET:
        raise _field_error(d)
    version = d["version"]
    if version != SCHEMA_VERSION or type(version) is not int:
        raise InvalidEvent(f"unsupported version {version!r}; this worker reads {SCHEMA_VERSION}")

    request_id = d["request_id"]
    if type(request_id) is not str or not 0 < len(request_id) <= MAX_REQUEST_ID:
        raise InvalidEvent(f"request_id must be a string of 1 to {MAX_REQUEST_ID} characters")
    if not request_id.isprintable() or "\\" in request_id:
        raise InvalidEvent("request_id contains control characters or a backslash")
    model = d["model"]
    if type(model) is not str or not 0 < len(model) <= MAX_MODEL:
        raise InvalidEvent(f"model must be a string of 1 to {MAX_MODEL} characters")
    if not model.isprintable() or "\\" in model:
        raise InvalidEvent("model contains control characters or a backslash")
    error_type = d["error_type"]
    if type(error_type) is not str or len(error_type) > MAX_ERROR_TYPE:
        raise InvalidEvent(f"error_type must be a string of at most {MAX_ERROR_TYPE} characters")
    if error_type and (not error_type.isprintable() or "\\" in error_type):
        raise InvalidEvent("error_type contains control characters or a backslash")

    for name in ("organization_id", "api_key_id"):
        v = d[name]
        if type(v) is not int:
            raise _bad_type(name, "an integer", v)
        if v <= 0:
            raise InvalidEvent(f"{name} must be positive")
    for name in _NULLABLE_INTS:
        v = d[name]
        if v is not None:
            if type(v) is not int:
                raise _bad_type(name, "an integer or null", v)
            if v < 0 or v > MAX_DURATION_US:
                raise InvalidEvent(f"{name} must be between 0 and {MAX_DURATION_US}")
    latency = d["latency_us"]
    if type(latency) is not int:
        raise _bad_type("latency_us", "an integer", latency)
    if latency < 0 or latency > MAX_DURATION_US:
        raise InvalidEvent(f"latency_us must be between 0 and {MAX_DURATION_US}")

    inp = d["input_tokens"]
    cr = d["cache_read_tokens"]
    cw = d["cache_write_tokens"]
    out = d["output_tokens"]
    rsn = d["reasoning_tokens"]
    for name, v in (
        ("input_tokens", inp),
        ("cache_read_tokens", cr),
        ("cache_write_tokens", cw),
        ("output_tokens", out),
        ("reasoning_tokens", rsn),
    ):
        if type(v) is not int:
            raise _bad_type(name, "an integer", v)
        if v < 0:
            raise InvalidEvent(f"{name} is negative ({v})")
        if v > MAX_TOKENS:
            raise InvalidEvent(f"{name} is implausibly large ({v})")
    if rsn > out:
        raise InvalidEvent(
            f"reasoning_tokens ({rsn}) exceed output_tokens ({out}); reasoning is part of output"
        )

    protocol = d["protocol"]
    if type(protocol) is not str or protocol not in PROTOCOLS:
        raise InvalidEvent(f"protocol {protocol!r} is not one of {', '.join(sorted(PROTOCOLS))}")
    endpoint = d["endpoint"]
    if type(endpoint) is not str or endpoint not in ENDPOINTS:
        raise InvalidEvent(f"endpoint {endpoint!r} is not a known endpoint")
    cache_status = d["cache_status"]
    if type(cache_status) is not str or cache_status not in CACHE_STATUSES:
        raise InvalidEvent(
            f"cache_status {cache_status!r} is not one of {', '.join(sorted(CACHE_STATUSES))}"
        )
    for name in ("stream", "is_test"):
        if type(d[name]) is not bool:
            raise _bad_type(name, "a boolean", d[name])
    status = d["status_code"]
    if type(status) is not int or not 100 <= status <= 599:
        raise InvalidEvent(f"status_code must be an HTTP status between 100 and 599: {status!r}")
    priority = d["priority"]
    if type(priority) is not int or not -32768 <= priority <= 32767:
        raise InvalidEvent("priority must be a small integer")
    ip = d["client_ip"]
    if ip is not None and (type(ip) is not str or not _check_ip(ip)):
        raise InvalidEvent(f"client_ip is not an IP address: {str(ip)[:64]!r}")
    _check_upstream(d)
    _check_attribution(d)

    started = _parse_time("started_at", d["started_at"])
    finished = _parse_time("finished_at", d["finished_at"])
    if finished < started:
        raise InvalidEvent("finished_at is before started_at")
    if started.timestamp() > latest:
        skew = settings.USAGE_MAX_FUTURE_SKEW_SECONDS
        raise InvalidEvent(f"started_at is more than {skew} s in the future")

    return _stored(_values(d), started, finished)


def _check_upstream(d: dict) -> None:
    """The rules of the added fields: the credential and the vendor's charge."""
    credential = d["credential_id"]
    if credential is not None:
        if type(credential) is not int:
            raise _bad_type("credential_id", "an integer or null", credential)
        if not 0 < credential <= MAX_ID:
            raise InvalidEvent("credential_id must be a positive id")
    cost = d["upstream_cost"]
    if type(cost) is not int:
        raise _bad_type("upstream_cost", "an integer", cost)
    if not 0 <= cost <= MAX_UPSTREAM_COST:
        raise InvalidEvent(f"upstream_cost must be between 0 and {MAX_UPSTREAM_COST}")
    currency = d["upstream_currency"]
    if type(currency) is not str:
        raise _bad_type("upstream_currency", "a string", currency)
    if currency and not _is_currency(currency):
        raise InvalidEvent(
            f"upstream_currency must be a three-letter currency code: {currency[:8]!r}"
        )
    if cost and not currency:
        raise InvalidEvent("upstream_cost is set without its upstream_currency")


def tags_problem(tags) -> str | None:
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
        if _CONTROL.search(value):
            return f"tag {key!r} has control characters in its value"
    return None


def _check_attribution(d: dict) -> None:
    """The rules of the cost attribution fields: the end user and the tags."""
    end_user = d["end_user"]
    if type(end_user) is not str:
        raise _bad_type("end_user", "a string", end_user)
    if len(end_user) > MAX_END_USER:
        raise InvalidEvent(f"end_user must be at most {MAX_END_USER} characters")
    if _CONTROL.search(end_user):
        raise InvalidEvent("end_user contains control characters")
    problem = tags_problem(d["tags"])
    if problem:
        raise InvalidEvent(problem)


def utc(dt: datetime) -> datetime:
    return dt.astimezone(UTC)

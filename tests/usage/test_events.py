"""The usage event schema: round trip and a precise reason for each bad input."""

from __future__ import annotations

from dataclasses import MISSING, fields
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from tests.usage.factories import event
from usage.events import (
    ADDED_FIELDS,
    FIELD_NAMES,
    SCHEMA_VERSION,
    InvalidEvent,
    UsageEvent,
    latest_start,
    parse,
)

KEY = SimpleNamespace(organization_id=3, sub_account_id=None, pk=9)


def good(**overrides) -> dict:
    d = event(KEY)
    d.update(overrides)
    return d


def test_round_trip_through_a_json_safe_dict():
    d = good(sub_account_id=4, stream=True, reasoning_tokens=100, client_ip="2001:db8::1")
    e = UsageEvent.from_dict(d)
    assert e.version == SCHEMA_VERSION
    assert e.started_at == datetime(2025, 3, 4, 10, 15, tzinfo=UTC)
    assert e.finished_at - e.started_at == timedelta(microseconds=850_000)
    assert e.to_dict() == d
    assert tuple(e.to_dict()) == FIELD_NAMES


def test_other_offsets_are_accepted_and_mean_the_same_instant():
    e = UsageEvent.from_dict(
        good(started_at="2025-03-04T12:15:00+02:00", finished_at="2025-03-04T10:15:01Z")
    )
    assert e.started_at == datetime(2025, 3, 4, 10, 15, tzinfo=UTC)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"version": 2}, "unsupported version 2"),
        ({"version": "1"}, "unsupported version '1'"),
        ({"input_tokens": -1}, "input_tokens is negative"),
        ({"cache_read_tokens": -5}, "cache_read_tokens is negative"),
        ({"output_tokens": 10, "reasoning_tokens": 11}, "reasoning_tokens (11) exceed"),
        ({"output_tokens": 1.5}, "output_tokens must be an integer, not float"),
        ({"output_tokens": True}, "output_tokens must be an integer, not bool"),
        ({"organization_id": "3"}, "organization_id must be an integer, not str"),
        ({"organization_id": 0}, "organization_id must be positive"),
        ({"sub_account_id": "x"}, "sub_account_id must be an integer or null"),
        ({"request_id": ""}, "request_id must be a string of 1 to 64"),
        ({"request_id": "a" * 65}, "request_id must be a string of 1 to 64"),
        ({"request_id": "a\tb"}, "request_id contains control characters"),
        ({"model": None}, "model must be a string"),
        ({"protocol": "grpc"}, "protocol 'grpc' is not one of"),
        ({"endpoint": "images"}, "endpoint 'images' is not a known endpoint"),
        ({"cache_status": "warm"}, "cache_status 'warm' is not one of"),
        ({"stream": "yes"}, "stream must be a boolean, not str"),
        ({"status_code": 99}, "status_code must be an HTTP status"),
        ({"latency_us": -3}, "latency_us must be between 0"),
        ({"client_ip": "999.1.1.1"}, "client_ip is not an IP address"),
        ({"client_ip": 17}, "client_ip is not an IP address"),
        ({"started_at": "yesterday"}, "started_at is not an ISO 8601 timestamp"),
        ({"started_at": "2025-03-04T10:15:00"}, "started_at has no time zone offset"),
        ({"started_at": 1700000000}, "started_at must be an ISO 8601 string, not int"),
        ({"finished_at": "2025-03-04T10:14:59+00:00"}, "finished_at is before started_at"),
        ({"credential_id": "7"}, "credential_id must be an integer or null, not str"),
        ({"credential_id": 0}, "credential_id must be a positive id"),
        ({"credential_id": True}, "credential_id must be an integer or null, not bool"),
        ({"upstream_cost": -1, "upstream_currency": "USD"}, "upstream_cost must be between 0"),
        ({"upstream_cost": 10**15 + 1, "upstream_currency": "USD"}, "upstream_cost must be betw"),
        ({"upstream_cost": 1.5, "upstream_currency": "USD"}, "upstream_cost must be an integer"),
        ({"upstream_cost": None}, "upstream_cost must be an integer, not NoneType"),
        ({"upstream_currency": "usd"}, "upstream_currency must be a three-letter currency code"),
        ({"upstream_currency": "EURO"}, "upstream_currency must be a three-letter currency code"),
        ({"upstream_currency": None}, "upstream_currency must be a string, not NoneType"),
        ({"upstream_cost": 5}, "upstream_cost is set without its upstream_currency"),
        ({"end_user": 7}, "end_user must be a string, not int"),
        ({"end_user": "u" * 129}, "end_user must be at most 128 characters"),
        ({"end_user": "a\nb"}, "end_user contains control characters"),
        ({"tags": ["a"]}, "tags must be an object, not list"),
        ({"tags": {f"k{i}": "v" for i in range(11)}}, "at most 10 tags, not 11"),
        ({"tags": {"": "v"}}, "tag key '' is not 1 to 32 characters"),
        ({"tags": {"k" * 33: "v"}}, "is not 1 to 32 characters"),
        ({"tags": {"team name": "v"}}, "tag key 'team name' is not 1 to 32"),
        ({"tags": {"team": ""}}, "tag 'team' must have a string value of 1 to 128"),
        ({"tags": {"team": "v" * 129}}, "tag 'team' must have a string value of 1 to 128"),
        ({"tags": {"team": 3}}, "tag 'team' must have a string value"),
        ({"tags": {"team": "a\tb"}}, "tag 'team' has control characters in its value"),
    ],
)
def test_bad_values_have_a_precise_reason(change, reason):
    with pytest.raises(InvalidEvent) as exc:
        UsageEvent.from_dict(good(**change))
    assert reason in exc.value.reason


def test_missing_and_unknown_fields_are_named():
    d = good()
    del d["latency_us"]
    del d["model"]
    with pytest.raises(InvalidEvent, match="missing field\\(s\\): latency_us, model"):
        UsageEvent.from_dict(d)
    with pytest.raises(InvalidEvent, match="unknown field\\(s\\): colour"):
        UsageEvent.from_dict({**good(), "colour": "red"})
    with pytest.raises(InvalidEvent, match="must be a JSON object, not list"):
        UsageEvent.from_dict([1, 2])


def test_an_event_written_before_the_cost_fields_reads_as_having_no_cost():
    """A gateway older than the vendor-cost fields (a spooled batch, the
    synthetic traffic) sends events without them: they read as unknown."""
    d = good()
    first_form = {k: v for k, v in d.items() if k not in ADDED_FIELDS}
    parsed = parse(first_form)
    assert (parsed.credential_id, parsed.upstream_cost, parsed.upstream_currency) == (None, 0, "")
    assert parsed == parse(d)
    defaults = {
        f.name: f.default_factory() if f.default is MISSING else f.default
        for f in fields(UsageEvent)
        if f.name in ADDED_FIELDS
    }
    assert defaults == ADDED_FIELDS


def test_the_cost_fields_come_all_together_or_not_at_all():
    d = good(credential_id=3, upstream_cost=12, upstream_currency="EUR")
    d = {k: v for k, v in d.items() if k not in ("end_user", "tags")}
    parsed = parse(d)
    assert (parsed.credential_id, parsed.upstream_cost, parsed.upstream_currency) == (3, 12, "EUR")
    del d["upstream_cost"], d["upstream_currency"]
    with pytest.raises(InvalidEvent, match=r"missing field\(s\): upstream_cost, upstream_cur"):
        parse(d)
    no_cost = {k: v for k, v in good().items() if k not in ADDED_FIELDS and k != "model"}
    with pytest.raises(InvalidEvent, match=r"missing field\(s\): model$"):
        parse(no_cost)


def test_an_event_without_the_attribution_fields_reads_as_untagged():
    """A spooled batch from a gateway older than cost attribution (with or
    without the cost fields): no end user, no tags."""
    d = good(credential_id=3, upstream_cost=12, upstream_currency="EUR")
    del d["end_user"], d["tags"]
    parsed = parse(d)
    assert (parsed.credential_id, parsed.end_user, parsed.tags) == (3, "", {})
    oldest = {k: v for k, v in d.items() if k not in ADDED_FIELDS}
    assert (parse(oldest).end_user, parse(oldest).tags) == ("", {})
    half = good()
    del half["tags"]
    with pytest.raises(InvalidEvent, match=r"missing field\(s\): tags$"):
        parse(half)


def test_attribution_fields_round_trip_at_their_limits():
    tags = {f"k.{i}-_{'x' * 26}": "値" * 128 for i in range(10)}
    d = good(end_user="ü" * 128, tags=tags)
    e = UsageEvent.from_dict(d)
    assert (e.end_user, e.tags) == ("ü" * 128, tags)
    assert e.to_dict() == d


def test_far_future_start_is_refused_within_the_configured_skew(settings):
    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    now = datetime.now(UTC)
    UsageEvent.from_dict(event(KEY, started_at=now + timedelta(seconds=200)))
    with pytest.raises(InvalidEvent, match="more than 300 s in the future"):
        UsageEvent.from_dict(event(KEY, started_at=now + timedelta(seconds=400)))
    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 600
    UsageEvent.from_dict(event(KEY, started_at=now + timedelta(seconds=400)))


def test_a_batch_can_read_the_clock_once_and_pass_it_in(settings):
    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    now = datetime.now(UTC)
    soon = good(started_at=now.isoformat(), finished_at=(now + timedelta(seconds=1)).isoformat())
    assert parse(soon, latest_start())[1] == now
    with pytest.raises(InvalidEvent, match="more than 300 s in the future"):
        parse(soon, now.timestamp() - 1)


def test_datetimes_are_accepted_as_well_as_strings():
    d = good()
    values = parse({**d, "started_at": datetime.fromisoformat(d["started_at"])})
    assert values == parse(d)


@pytest.mark.parametrize("field", ["protocol", "endpoint", "cache_status"])
def test_an_unhashable_enum_value_is_refused_not_crashed_on(field):
    with pytest.raises(InvalidEvent, match=f"{field} \\['x'\\] is not"):
        parse(good(**{field: ["x"]}))


ODD_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    1,
    99,
    600,
    10**13 + 1,
    10**12 + 1,
    1.0,
    "",
    "x",
    "a\\b",
    "miss",
    "openai",
    "messages",
    "2025-03-04T10:15:00+00:00",
    "10.0.0.1",
    "USD",
    "usd",
    2**63,
    10**15 + 1,
    ["x"],
    {},
]


def _outcome(parser, d, latest):
    try:
        return parser(d, latest)
    except InvalidEvent as exc:
        return exc.reason


def test_the_fast_path_accepts_exactly_what_the_rule_by_rule_check_accepts():
    from usage.events import _parse_checked

    latest = latest_start()
    for name in FIELD_NAMES:
        for value in ODD_VALUES:
            d = good(**{name: value})
            assert _outcome(parse, d, latest) == _outcome(_parse_checked, d, latest), (name, value)


def test_a_load_test_call_says_so_and_an_event_without_the_flag_is_billed():
    """``is_test`` (load-test calls not billed) is a group of its own: an event
    from a gateway older than it, with or without the other added groups,
    reads as a billed call."""
    assert parse(good(is_test=True)).is_test is True
    assert UsageEvent.from_dict(good(is_test=True)).to_dict()["is_test"] is True
    d = good(end_user="u-1", tags={"team": "x"})
    del d["is_test"]
    parsed = parse(d)
    assert (parsed.is_test, parsed.end_user, parsed.tags) == (False, "u-1", {"team": "x"})
    oldest = {k: v for k, v in good().items() if k not in ADDED_FIELDS}
    assert parse(oldest).is_test is False
    with pytest.raises(InvalidEvent, match="is_test must be a boolean, not int"):
        parse(good(is_test=1))

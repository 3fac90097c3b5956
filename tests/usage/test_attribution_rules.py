"""Cost attribution's rules (``usage.attribution_rules``): the ``x-gateway-tags``
header a client sends is read into its tags or refused with a message naming
the header and the problem; an end-user id is kept as sent or refused; and
whatever the gateway accepts, ingest accepts too (the same limits)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway_bridge.emitter import UsageEmitter
from gateway_bridge.spool import Spool
from tests.usage.factories import event
from usage import events
from usage.attribution_rules import (
    MAX_END_USER,
    MAX_TAG_KEY,
    MAX_TAG_VALUE,
    MAX_TAGS,
    AttributionError,
    clean_end_user,
    missing_required,
    parse_tags_header,
)
from usage.events import UsageEvent
from usage.events import tags_problem as ingest_tags_problem
from usage.ingest import ingest_events
from usage.models import CallRecord

T0 = datetime(2025, 3, 4, 10, 15, tzinfo=UTC)


def test_a_header_of_pairs_reads_as_tags_with_spaces_trimmed_and_case_kept():
    assert parse_tags_header(" team:search ,Env: prod,url:https://x.test:8443/a ") == {
        "team": "search",
        "Env": "prod",
        "url": "https://x.test:8443/a",  # the first ':' splits
    }


@pytest.mark.parametrize("raw", ["", "   "])
def test_a_blank_header_is_no_tags(raw):
    assert parse_tags_header(raw) == {}


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("team", "'team' is not a key:value pair"),
        ("team:a,", "'' is not a key:value pair"),
        (":a", "tag key '' is invalid"),
        ("te am:a", "tag key 'te am' is invalid"),
        ("équipe:a", "tag key 'équipe' is invalid"),
        ("k" * 33 + ":a", "is invalid; a key is 1 to 32 letters"),
        ("team:", "the value of tag 'team' must be 1 to 128 printable characters"),
        ("team:" + "v" * 129, "the value of tag 'team' must be 1 to 128"),
        ("team:a\x07b", "the value of tag 'team' must be 1 to 128 printable"),
        ("team:a,team:b", "tag key 'team' is given more than once"),
        (",".join(f"k{i}:v" for i in range(11)), "has 11 tags; at most 10 are allowed"),
    ],
)
def test_a_bad_header_is_refused_naming_the_header_and_the_problem(raw, problem):
    with pytest.raises(AttributionError) as caught:
        parse_tags_header(raw)
    assert caught.value.source == "x-gateway-tags"
    assert caught.value.message.startswith("x-gateway-tags")
    assert problem in caught.value.message


def test_the_limits_themselves_are_accepted():
    tags = {("k" * 31) + str(i): "v" * MAX_TAG_VALUE for i in range(MAX_TAGS)}
    raw = ",".join(f"{k}:{v}" for k, v in tags.items())
    assert parse_tags_header(raw) == tags
    assert parse_tags_header("Ab_.-9:价格 €") == {"Ab_.-9": "价格 €"}


def test_an_end_user_is_kept_as_sent_shortened_when_long_or_refused_when_not_a_string():
    assert clean_end_user("user-42") == "user-42"
    assert clean_end_user(None) == ""
    assert clean_end_user("u" * MAX_END_USER) == "u" * MAX_END_USER
    long_a, long_b = "u" * 129, "u" * 130
    short_a, short_b = clean_end_user(long_a, source="user"), clean_end_user(long_b)
    assert len(short_a) == len(short_b) == MAX_END_USER
    assert short_a.startswith("u" * 111 + "~") and short_a != short_b
    assert short_a == clean_end_user(long_a)  # the same id, the same record
    assert clean_end_user("a\nb") == "a\ufffdb"
    with pytest.raises(AttributionError, match=r"^metadata.user_id must be a string, not int"):
        clean_end_user(42, source="metadata.user_id")


def test_the_gateway_and_ingest_share_the_limits():
    assert (events.MAX_TAGS, events.MAX_TAG_KEY) == (MAX_TAGS, MAX_TAG_KEY) == (10, 32)
    assert (events.MAX_TAG_VALUE, events.MAX_END_USER) == (MAX_TAG_VALUE, MAX_END_USER)


def test_missing_required_keys_are_named_in_order():
    assert missing_required({"team": "a"}, ("project", "team", "env")) == ["project", "env"]
    assert missing_required({}, ()) == []


_key = st.from_regex(r"[A-Za-z0-9_.\-]{1,32}", fullmatch=True)
_value = (
    st.text(
        st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters=","),
        min_size=1,
        max_size=MAX_TAG_VALUE,
    )
    .map(str.strip)
    .filter(lambda v: v and v.isprintable())
)


@settings(max_examples=200, deadline=None)
@given(tags=st.dictionaries(_key, _value, max_size=MAX_TAGS))
def test_any_tags_within_the_limits_round_trip_through_the_header_and_ingest(tags):
    """Written as a header (any spacing), any tags within the limits read back
    unchanged, and ingest's check accepts what the gateway read."""
    raw = " , ".join(f" {k} :  {v} " for k, v in tags.items())
    parsed = parse_tags_header(raw)
    assert parsed == tags
    assert ingest_tags_problem(parsed) is None


@settings(max_examples=200, deadline=None)
@given(raw=st.text(max_size=400))
def test_any_header_either_reads_within_the_limits_or_is_refused_with_a_reason(raw):
    try:
        parsed = parse_tags_header(raw)
    except AttributionError as exc:
        refused = exc
    else:
        refused = None
    if refused is not None:
        assert refused.message.startswith("x-gateway-tags")
        return
    assert len(parsed) <= MAX_TAGS
    assert ingest_tags_problem(parsed) is None


@pytest.mark.django_db
def test_end_users_and_tags_survive_the_emitters_batch_the_spool_and_replay(catalog, key, tmp_path):
    # Given an emitter whose broker is down, handed events with and without
    # attribution, and a spool line an older gateway wrote (cost fields, no
    # attribution fields)
    def refuse(batch):
        raise ConnectionError("broker unreachable")

    path = tmp_path / "usage.jsonl"
    emitter = UsageEmitter(refuse, Spool(path), max_batch=3, max_delay=0.05, replay_interval=60)
    sent = [
        event(key, started_at=T0, end_user=f"user-{i}", tags={"team": "search", "n": str(i)})
        if i % 2
        else event(key, started_at=T0)
        for i in range(5)
    ]
    for e in sent:
        emitter.emit(UsageEvent.from_dict(e))
    assert emitter.close(timeout=10)
    older = event(key, started_at=T0)
    del older["end_user"], older["tags"]
    Spool(path).append([older])
    # When a later process replays the spool into ingest
    accepted = []
    Spool(path).replay(lambda batch: accepted.append(ingest_events(batch).accepted))
    # Then every call is stored with the end user and tags it was sent with
    assert sum(accepted) == 6
    records = CallRecord.objects.in_bulk([e["request_id"] for e in [*sent, older]])
    for e in sent:
        record = records[e["request_id"]]
        assert (record.end_user, record.tags) == (e["end_user"], e["tags"])
    assert (records[older["request_id"]].end_user, records[older["request_id"]].tags) == ("", {})

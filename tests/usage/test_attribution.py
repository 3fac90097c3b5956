"""Cost attribution: calls' tags and end users are stored, rolled up per tag
value and per end user in the ingest transaction, and the groups read back
sum to the calls' costs to the micro-unit (embedded and PostgreSQL)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest

from tests.usage.factories import event
from usage.attribution import BY_END_USER, BY_TAG, attribution, tag_keys
from usage.ingest import IngestResult, ingest_events
from usage.models import AttributionRollup, CallRecord, DeadLetter
from usage.rerate import rerate

pytestmark = pytest.mark.django_db
T0 = datetime(2025, 3, 4, 9, 0, tzinfo=UTC)
TEAMS = ("search", "chat", "ads")


def synthetic(key, n: int = 60, start: datetime = T0) -> list[dict]:
    """Calls over five hours: most tagged with a team, some with a feature
    too, some with an end user, some with nothing at all."""
    out = []
    for i in range(n):
        tags = {}
        if i % 5:
            tags["team"] = TEAMS[i % 3]
        if i % 4 == 0:
            tags["feature"] = f"f-{i % 2}"
        out.append(
            event(
                key,
                started_at=start + timedelta(minutes=5 * i + 1),
                input_tokens=1000 + 37 * i,
                output_tokens=100 + 11 * i,
                cache_read_tokens=7 * i,
                end_user=f"user-{i % 4}" if i % 3 else "",
                tags=tags,
            )
        )
    return out


def brute_force(org_id: int, start: datetime, end: datetime, by: str, key: str = "") -> dict:
    """Cost and calls per group, straight from the billed call records."""
    sums: dict = defaultdict(lambda: [0, 0])
    for c in CallRecord.objects.billed().filter(
        organization_id=org_id, started_at__gte=start, started_at__lt=end
    ):
        value = (c.tags.get(key) if by == BY_TAG else c.end_user) or None
        sums[value][0] += c.cost
        sums[value][1] += 1
    return {v: tuple(s) for v, s in sums.items()}


def read(org_id: int, start: datetime, end: datetime, by: str, key: str = "") -> dict:
    a = attribution(organization_id=org_id, start=start, end=end, by=by, tag_key=key)
    got = {g.value: (g.cost, g.calls) for g in a.groups}
    assert sum(g.cost for g in a.groups) == a.total.cost
    assert sum(g.calls for g in a.groups) == a.total.calls
    return got


def test_tags_and_end_user_are_stored_on_the_call(catalog, org, key):
    e = event(key, end_user="alice@example.com", tags={"team": "search", "env": "prod"})
    assert ingest_events([e]).accepted == 1
    call = CallRecord.objects.get(request_id=e["request_id"])
    assert (call.end_user, call.tags) == ("alice@example.com", {"team": "search", "env": "prod"})


def test_groups_sum_to_the_tagged_calls_costs_to_the_micro_unit(catalog, org, key, other_key):
    ingest_events(synthetic(key))
    ingest_events(synthetic(other_key, n=20))  # another org's tags: never in org's groups
    # Whole hours (rollups), edges that cut hours (call records), and both.
    for start, end in (
        (T0, T0 + timedelta(hours=6)),
        (T0 + timedelta(minutes=17), T0 + timedelta(hours=3, minutes=42)),
        (T0 + timedelta(minutes=10), T0 + timedelta(minutes=50)),
    ):
        for by, k in ((BY_TAG, "team"), (BY_TAG, "feature"), (BY_END_USER, "")):
            expected = brute_force(org.pk, start, end, by, k)
            assert read(org.pk, start, end, by, k) == expected, (start, end, by, k)
    whole = read(org.pk, T0, T0 + timedelta(hours=6), BY_TAG, "team")
    assert set(whole) == {"search", "chat", "ads", None}
    assert whole[None][1] == 12  # every fifth call has no team


def test_a_replayed_batch_does_not_double_the_attribution(catalog, org, key):
    batch = synthetic(key, n=30)
    ingest_events(batch)
    before = list(AttributionRollup.objects.order_by("id").values())
    assert ingest_events(batch) == IngestResult(accepted=0, duplicates=30, dead_lettered=0)
    assert list(AttributionRollup.objects.order_by("id").values()) == before
    end = T0 + timedelta(hours=6)
    assert read(org.pk, T0, end, BY_TAG, "team") == brute_force(org.pk, T0, end, BY_TAG, "team")


def test_an_old_event_without_the_fields_ingests_untagged(catalog, org, key):
    old = event(key)
    del old["end_user"], old["tags"]
    oldest = {
        k: v
        for k, v in event(key).items()
        if k not in ("end_user", "tags", "credential_id", "upstream_cost", "upstream_currency")
    }
    assert ingest_events([old, oldest]).accepted == 2
    assert not DeadLetter.objects.exists()
    assert {(c.end_user, str(c.tags)) for c in CallRecord.objects.all()} == {("", "{}")}
    assert not AttributionRollup.objects.exists()
    a = attribution(organization_id=org.pk, start=T0, end=T0 + timedelta(hours=6), by=BY_END_USER)
    assert [(g.value, g.calls) for g in a.groups] == [(None, 2)]


def test_bad_tags_go_to_dead_letters_with_the_reason(catalog, org, key):
    bad = event(key, tags={"team name": "x"})
    assert ingest_events([bad]).dead_lettered == 1
    assert "tag key 'team name'" in DeadLetter.objects.get().reason


def test_caller_text_with_quotes_and_backslashes_survives(catalog, org, key):
    e = event(key, end_user='O\'Brien "\\x"', tags={"path": 'C:\\dir\\"q"', "k.v-1_": "ü,{}"})
    ingest_events([e])
    call = CallRecord.objects.get(request_id=e["request_id"])
    assert call.end_user == 'O\'Brien "\\x"'
    assert call.tags == {"path": 'C:\\dir\\"q"', "k.v-1_": "ü,{}"}
    row = AttributionRollup.objects.get(kind="tag", tag_key="path")
    assert (row.value, row.calls, row.cost) == ('C:\\dir\\"q"', 1, call.cost)


def test_tag_keys_lists_the_keys_in_use_most_used_first(catalog, org, key, other_key):
    ingest_events(synthetic(key))
    ingest_events([event(other_key, tags={"secret": "x"})])
    keys = tag_keys(organization_id=org.pk, start=T0, end=T0 + timedelta(hours=6))
    assert keys == ["team", "feature"]


def test_a_developers_own_keys_read_from_the_calls(catalog, org, key, team_key):
    ingest_events(synthetic(key, n=20) + synthetic(team_key, n=10))
    a = attribution(
        organization_id=org.pk,
        start=T0,
        end=T0 + timedelta(hours=6),
        by=BY_TAG,
        tag_key="team",
        where={"api_key_id": [team_key.pk]},
    )
    assert a.total.calls == 10
    assert a.total.cost == sum(
        CallRecord.objects.filter(api_key_id=team_key.pk).values_list("cost", flat=True)
    )


def test_rerating_moves_the_attribution_with_the_calls(catalog, org, key):
    from usage.models import Price

    ingest_events(synthetic(key, n=20))
    price = Price.objects.filter(model__name="sim-chat-small", organization=None).first()
    Price.objects.filter(pk=price.pk).update(output_per_mtok=price.output_per_mtok * 3)
    rerate(start=T0, end=T0 + timedelta(hours=6), reason="price fix")
    end = T0 + timedelta(hours=6)
    assert read(org.pk, T0, end, BY_TAG, "team") == brute_force(org.pk, T0, end, BY_TAG, "team")
    assert read(org.pk, T0, end, BY_END_USER) == brute_force(org.pk, T0, end, BY_END_USER)

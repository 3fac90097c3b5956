"""The soak's ``hostile`` check (``manage.py soak --hostile``) judges the
normal tenants' p99 beside the attack and every attack's answers; these are
figures a real run reported, with one thing wrong at a time."""

from __future__ import annotations

import copy

import pytest

from tooling.soak.checks import hostile

RUN = {
    "seconds_per_phase": 60.0,
    "clients": 50,
    "header_timeout_seconds": 5.0,
    "without_hostile": {"p99_ms": 710.9},
    "with_hostile": {"p99_ms": 585.8},
    "attack": {
        "random_keys": {"statuses": {"401": 348}},
        "flood": {"statuses": {"429": 1169, "transport:ClientOSError": 1061, "400": 150}},
        "oversize": {
            "statuses": {
                "/login/ 413": 21,
                "/healthz 413": 21,
                "/v1/chat/completions 413": 22,
                "/login/ reset": 1,
            },
            "chunked_bytes_sent_max": 9043968,
        },
        "slow": {
            "outcomes": {"503 over the cap": 3629, "408 header timeout": 13003},
            "held_seconds_max": 7.74,
        },
    },
}


def test_a_run_that_held_passes():
    result = hostile(RUN)
    assert result["ok"], result["problems"]
    assert result["ratio"] == 0.82


def broken(path: str, value):
    run = copy.deepcopy(RUN)
    *parents, last = path.split(".")
    node = run
    for name in parents:
        node = node[name]
    node[last] = value
    return run


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        ("with_hostile.p99_ms", 1500.0, "over 2x"),
        ("attack.slow.outcomes", {"408 header timeout": 10}, "per-address cap"),
        ("attack.slow.held_seconds_max", 150.0, "was held 150.0 s"),
        ("attack.oversize.statuses", {"/login/ 403": 3}, "oversize: 3 x /login/ 403"),
        ("attack.oversize.chunked_bytes_sent_max", 64 * 1024 * 1024, "read to its end"),
        ("attack.flood.statuses", {"400": 3, "200": 1}, "flood answered"),
        ("attack.random_keys.statuses", {"401": 3, "500": 1}, "random keys answered"),
    ],
)
def test_each_failure_of_the_hostile_phase_is_named(path, value, problem):
    result = hostile(broken(path, value))
    assert not result["ok"]
    assert any(problem in p for p in result["problems"]), result["problems"]

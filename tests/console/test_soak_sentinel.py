"""``manage.py soak --redis sentinel``: the soak's own Sentinel set, and its
fault (the primary SIGKILLed: the replica promoted, the killed one back as
its replica); the records check's view of the answers a gateway kill cut off."""

from __future__ import annotations

import shutil

import pytest

from console.kernel import redis_url
from tooling.soak import checks
from tooling.soak.sentinel import SentinelSet
from tooling.soak.traffic import Result

# Its own Redis servers: the same whatever the suite is given (CI runs it once).
pytestmark = pytest.mark.engine_independent


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_the_primary_killed_fails_over_and_comes_back_as_a_replica(tmp_path):
    sentinels = SentinelSet(tmp_path)
    try:
        sentinels.start()
        first, second = sentinels.primary, sentinels.replica
        client = redis_url.sync_client(sentinels.url, socket_timeout=2)
        client.set("before", "1")
        client.close()

        out = sentinels.kill_primary()

        assert out["killed_port"] == first
        assert sentinels.current_primary() == second  # the replica promoted
        assert sentinels.replica_linked(first)  # the killed one, back as its replica
        client = redis_url.sync_client(sentinels.url, socket_timeout=2)
        try:
            client.set("after", "2")  # the URL finds the new primary
            assert client.get("after") == b"2"
        finally:
            client.close()
        assert all(p.running() for p in sentinels.running())
    finally:
        sentinels.stop()
    assert not any(p.running() for p in sentinels.running())


def _result(rid, gateway, status, code, t0, t1, disconnected=False):
    r = Result(rid, "k", "a", "openai", True, status, t0, t1, code=code)
    r.gateway, r.disconnected = gateway, disconnected
    return r


def test_only_answers_the_gateway_kill_cut_off_are_not_expected_to_have_a_record():
    killed = {"gateway": 1, "at": 100.0}
    results = [
        _result("cut", 1, 200, "transport:ClientPayloadError", 99.0, 100.2),
        _result("other-gateway", 0, 200, "transport:ClientPayloadError", 99.0, 100.2),
        _result("finished-before", 1, 200, "", 98.0, 99.5),
        _result("broken-earlier", 1, 200, "transport:ClientPayloadError", 50.0, 51.0),
        _result("refused", 1, 503, "limits_unavailable", 99.0, 99.1),
        # Streams the client hung up on: the one just before the kill was still
        # being wound down by the gateway; the earlier one, and the one on the
        # other gateway, were billed.
        _result("hung-up", 1, 200, "", 99.4, 99.6, disconnected=True),
        _result("hung-up-earlier", 1, 200, "", 90.0, 90.5, disconnected=True),
        _result("hung-up-elsewhere", 0, 200, "", 99.4, 99.6, disconnected=True),
    ]
    assert checks.cut_by_kill(results, killed) == {"cut", "hung-up"}
    assert checks.expected_ids(results, killed) == {
        "other-gateway", "finished-before", "broken-earlier", "refused",
        "hung-up-earlier", "hung-up-elsewhere",
    }  # fmt: skip
    assert "cut" in checks.expected_ids(results)  # without a kill, every answer counts

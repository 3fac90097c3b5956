"""What the soak proves once the pipeline has drained. Each check returns a
dict with ``ok`` and the numbers behind it; the report is their union."""

from __future__ import annotations

import statistics
import time
import zoneinfo
from collections import Counter
from datetime import UTC

from django.db import close_old_connections

from invoicing.facade import LedgerKind, invoice_preview, ledger_total, prepaid_balance
from tooling.soak.scenario import Scenario
from tooling.soak.traffic import MAX_TOKENS, Result
from usage.facade import StoredCall, call_rows, org_rollup_cost

#: Answers that create no call record: the key was refused before the gateway knew
#: whose call it was (unknown, revoked).
UNRECORDED = {401}


def cut_by_kill(results: list[Result], killed: dict | None) -> set[str]:
    """Calls the gateway's SIGKILL cut off before the gateway finished them, on
    the killed gateway: under way at the kill, the status line received but the
    rest lost to a transport error (a stream broken, a body never sent); or a
    stream the client hung up on in the last second before the kill, which the
    gateway was still winding down (the hang-up reaches its event loop, the
    node's stream is cancelled, the partial answer is billed, then its event is
    made). No event was made for either; the client holds no whole answer.
    ``killed``: ``{"gateway": index, "at": wall clock}``."""
    if not killed:
        return set()
    g, at = killed["gateway"], killed["at"]
    return {
        r.request_id
        for r in results
        if r.gateway == g and r.request_id and r.status == 200 and r.t0 <= at <= r.t1 + 1.0
        and (r.code.startswith("transport:") or r.disconnected)
    }  # fmt: skip


def expected_ids(results: list[Result], killed: dict | None = None) -> set[str]:
    want = {r.request_id for r in results if r.request_id and r.status not in UNRECORDED}
    return want - cut_by_kill(results, killed)


def _stored_ids(scenario: Scenario) -> set[str]:
    org_ids = [o.id for o in scenario.orgs.values()]
    return {row.request_id for row in call_rows(organization_ids=org_ids)}


def wait_drained(
    scenario: Scenario, results: list[Result], timeout: float, killed: dict | None = None
) -> dict:
    """Poll until every answered call has its record (or ``timeout``)."""
    want = expected_ids(results, killed)
    t0 = time.monotonic()
    missing = want
    while True:
        close_old_connections()
        try:
            missing = want - _stored_ids(scenario)
        except Exception:  # the database may still be coming back
            missing = want
        if not missing or time.monotonic() - t0 > timeout:
            break
        time.sleep(1.0)
    return {"seconds": round(time.monotonic() - t0, 1), "missing": len(missing)}


def records(scenario: Scenario, results: list[Result], killed: dict | None = None) -> dict:
    """Every answered call has exactly one record; no record without a call.
    Answers the gateway kill cut off are counted apart (``cut_by_the_gateway_kill``)."""

    want = expected_ids(results, killed)
    cut = cut_by_kill(results, killed)
    seen = {r.request_id for r in results if r.request_id}
    org_ids = [o.id for o in scenario.orgs.values()]
    per_id = Counter(row.request_id for row in call_rows(organization_ids=org_ids))
    stored = set(per_id)
    duplicates = sum(1 for n in per_id.values() if n > 1)
    missing = sorted(want - stored)
    unknown = sorted(stored - seen)
    transport = sum(1 for r in results if r.status == 0)
    sample = set(missing[:5])
    by_id = {r.request_id: r for r in results if r.request_id in sample}
    at = killed["at"] if killed else None
    return {
        "ok": not missing and not unknown and not duplicates,
        "answered_calls": len(want),
        "call_records": len(stored),
        "missing": len(missing),
        "missing_sample": missing[:5],
        # What the client saw of each, its times against the gateway kill's.
        "missing_detail": [
            {
                "request_id": rid,
                "gateway": by_id[rid].gateway,
                "status": by_id[rid].status,
                "code": by_id[rid].code,
                "stream": by_id[rid].stream,
                "hung_up": by_id[rid].disconnected,
                "seconds_from_kill": None
                if at is None
                else [round(by_id[rid].t0 - at, 3), round(by_id[rid].t1 - at, 3)],
            }
            for rid in missing[:5]
        ],
        "records_without_a_call": len(unknown),
        "duplicates": duplicates,
        "transport_errors": transport,
        "cut_by_the_gateway_kill": len(cut),
        "cut_with_a_record": len(cut & stored),
    }


def money(scenario: Scenario) -> dict:
    """Per organization: sum of billed call costs (load-test calls not billed
    left out) = rollups = invoice preview = ledger debits."""

    out, ok = {}, True
    for label, org in scenario.orgs.items():
        calls = call_rows(organization_ids=[org.id])
        cost = sum(c.cost for c in calls)
        billed = sum(c.cost for c in calls if c.billed)
        rollup = org_rollup_cost(org.id)
        preview = invoice_preview(organization_id=org.id).usage_amount
        row = {
            "calls": len(calls),
            "call_costs": cost,
            "rollups": rollup,
            "invoice_preview": preview,
        }
        row["billed_call_costs"] = billed
        equal = billed == rollup and billed == preview
        if org.billing_mode == "prepaid":
            debits = -ledger_total(org.id, kind=LedgerKind.USAGE)
            row["ledger_debits"] = debits
            equal = equal and debits == billed
        row["equal"] = equal
        ok = ok and equal
        out[label] = row
    return {"ok": ok, "organizations": out}


#: Each spend cap's period of a call started at a local time: its day, its month, all time.
_PERIOD_OF = {
    "spend_cap_daily": lambda local: local.date(),
    "spend_cap_monthly": lambda local: (local.year, local.month),
    "spend_cap_lifetime": lambda local: None,
}


def _most_in_a_period(calls: list[StoredCall], field: str, zone) -> int:
    """The most ``calls`` spent within one period of cap ``field`` (a day or
    a month in the organization's time zone, or all time): a run that
    crosses midnight starts a daily cap afresh, as the gateway does."""
    period = _PERIOD_OF[field]
    per: Counter = Counter()
    for call in calls:
        per[period(call.started_at.astimezone(zone))] += call.cost
    return max(per.values(), default=0)


def _zone(org):
    try:
        return zoneinfo.ZoneInfo(org.timezone or "UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return UTC


def caps(scenario: Scenario) -> dict:
    """No spend cap and no prepaid balance was exceeded: for each cap, the
    most spent in any one of its periods (day, month in the organization's
    time zone, or lifetime) is at most the cap."""

    rows, ok = [], True
    for key in scenario.keys.values():
        if not key.caps:
            continue
        calls = call_rows(api_key_id=key.key_id)
        zone = _zone(scenario.orgs[key.org])
        for field, cap in key.caps.items():
            spent = _most_in_a_period(calls, field, zone)
            rows.append(
                {"key": key.label, "cap_field": field, "spent": spent, "cap": cap,
                 "ok": spent <= cap}
            )  # fmt: skip
            ok = ok and spent <= cap
    for label, sub in scenario.subs.items():
        calls = call_rows(sub_account_id=sub.id)
        zone = _zone(next(o for o in scenario.orgs.values() if o.id == sub.organization_id))
        for field in _PERIOD_OF:
            cap = getattr(sub, field)
            if not cap:
                continue
            spent = _most_in_a_period(calls, field, zone)
            rows.append(
                {"sub_account": label, "cap_field": field, "spent": spent, "cap": cap,
                 "ok": spent <= cap}
            )  # fmt: skip
            ok = ok and spent <= cap
    b = scenario.orgs["b"]
    spent = sum(c.cost for c in call_rows(organization_ids=[b.id]))
    balance = prepaid_balance(b.id)
    prepaid_ok = spent <= scenario.prepaid_balance and balance >= 0
    rows.append(
        {
            "prepaid": "b",
            "opening_balance": scenario.prepaid_balance,
            "spent": spent,
            "closing_balance": balance,
            "ok": prepaid_ok,
        }
    )
    return {"ok": ok and prepaid_ok, "limits": rows}


def server_errors(results: list[Result], excused=()) -> dict:
    """No 5xx reached a client (before a stream started): three nodes, and at most
    one was broken or dead at a time, so a healthy node always existed.

    ``excused``: ``[start, end, code]`` windows (wall clock) in which a 503 with
    that code is a refusal, not an error: while the Redis primary fails over,
    the limits store cannot admit, and the gateway refuses (503
    ``limits_unavailable``, a call record of its own) rather than let spend run
    unchecked. The code is read from the call's record (Anthropic's body says
    only ``overloaded_error``, with its 529). Counted as ``refused_during_faults``."""

    failing = [r for r in results if r.status >= 500 and not r.started]
    in_window = {
        r.request_id: c for r in failing for s, e, c in excused if r.request_id and s <= r.t0 <= e
    }
    stored = {c.request_id: c.error_type for c in call_rows(request_ids=in_window)}
    excuse = {rid for rid, code in in_window.items() if stored.get(rid) == code}
    bad = [r for r in failing if r.request_id not in excuse]
    refused = len(failing) - len(bad)
    codes: dict[str, int] = {}
    for r in bad:
        codes[f"{r.status} {r.code}"] = codes.get(f"{r.status} {r.code}", 0) + 1
    broken_streams = sum(1 for r in results if r.status == 200 and r.code)
    samples = [
        {"request_id": r.request_id, "t": r.t0, "gateway": r.gateway + 1, "code": r.code}
        for r in bad[:10]
    ]
    return {
        "ok": not bad,
        "count": len(bad),
        "by_code": codes,
        "refused_during_faults": refused,
        "samples": samples,
        "broken_streams": broken_streams,
    }


def disconnects(scenario: Scenario, results: list[Result]) -> dict:
    """Hung-up streams are billed what was generated: never zero, never the budget."""

    ids = [r.request_id for r in results if r.disconnected and r.request_id]
    rows = call_rows(request_ids=ids)
    zero = sum(1 for c in rows if c.cost == 0 and c.input_tokens == 0 and c.cache_read_tokens == 0)
    over = sum(1 for c in rows if c.output_tokens > MAX_TOKENS)
    by_status = Counter(c.status_code for c in rows)
    return {
        "ok": zero == 0 and over == 0,
        "client_hang_ups": len(ids),
        "records_by_status": {str(k): v for k, v in by_status.items()},
        "billed_zero": zero,
        "billed_over_budget": over,
    }


def burst(scenario: Scenario, results: list[Result]) -> dict:
    """The burst against a nearly exhausted cap: refused calls never reached a node."""

    key = scenario.keys["c-burst"]
    mine = [r for r in results if r.key == key.label]
    admitted = sum(1 for r in mine if r.status == 200)
    refused = [r for r in mine if r.status == 429]
    refused_ids = [r.request_id for r in refused if r.request_id]  # None matches no record
    refused_at_node = sum(1 for c in call_rows(request_ids=refused_ids) if c.node_id is not None)
    spent = sum(c.cost for c in call_rows(api_key_id=key.key_id))
    cap = key.caps["spend_cap_lifetime"]
    return {
        "ok": spent <= cap and refused_at_node == 0 and len(mine) > 0,
        "calls": len(mine),
        "admitted": admitted,
        "refused": len(refused),
        "refused_that_reached_a_node": refused_at_node,
        "spent": spent,
        "cap": cap,
    }


def revocation(results: list[Result], revoked_key: str, revoked_at: float | None, probe: dict):
    """The revoked key stopped within one second in both gateway processes."""
    if revoked_at is None:
        return {"ok": False, "error": "the key was never revoked"}
    late = [
        r for r in results if r.key == revoked_key and r.status == 200 and r.t0 > revoked_at + 1.0
    ]
    slowest = max(probe.values()) if probe else None
    return {
        "ok": not late and slowest is not None and slowest <= 1.0,
        "seconds_to_refuse_by_gateway": probe,
        "served_later_than_1s": len(late),
    }


def _q(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def steps(results: list[Result], windows: list[tuple[int, int, float, float]]) -> list[dict]:
    """Per step: requests/s, p50/p99 latency of successful calls, error rate."""
    out = []
    for step, clients, start, end in windows:
        mine = [r for r in results if r.step == step and start <= r.t1 <= end]
        ok = [r.latency * 1000 for r in mine if r.status == 200]
        ttft = [r.ttft * 1000 for r in mine if r.status == 200 and r.stream and r.ttft]
        errors = sum(1 for r in mine if r.status != 200)
        seconds = max(end - start, 1e-9)
        out.append(
            {
                "clients": clients,
                "seconds": round(seconds, 1),
                "requests": len(mine),
                "requests_per_second": round(len(mine) / seconds, 1),
                "p50_ms": _round(_q(ok, 0.50)),
                "p99_ms": _round(_q(ok, 0.99)),
                "ttft_p50_ms": _round(_q(ttft, 0.50)),
                "error_rate": round(errors / len(mine), 4) if mine else None,
                "errors_by_status": _by_status(mine),
            }
        )
    return out


def _by_status(results: list[Result]) -> dict:
    counts: dict[str, int] = {}
    for r in results:
        if r.status != 200:
            name = f"{r.status} {r.code}".strip()
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def hostile(section: dict) -> dict:
    """The hostile phase (``--hostile``): the normal tenants' p99 beside it
    within 2x of their p99 alone, and every attack answered as it should be:
    slow clients refused over the cap or closed by the header timeout, oversize
    bodies 413 (console ones cut off before their end), the flood 400 / 429,
    random keys 401."""
    without = section["without_hostile"]["p99_ms"]
    with_ = section["with_hostile"]["p99_ms"]
    attack = section.get("attack") or {}
    problems = []
    if without is None or with_ is None:
        problems.append("no successful normal calls to compare")
    elif with_ > 2 * without:
        problems.append(f"p99 {with_} ms beside the attack is over 2x {without} ms alone")
    if "error" in attack or not attack:
        problems.append(attack.get("error", "no attack summary"))
    else:
        slow = attack["slow"]["outcomes"]
        if not slow.get("503 over the cap"):
            problems.append("no slow connection was refused over the per-address cap")
        if slow.get("still held at the end"):
            problems.append(f"{slow['still held at the end']} slow connections were never closed")
        held = attack["slow"]["held_seconds_max"]
        if held is None or held > section["header_timeout_seconds"] + 3:
            problems.append(f"a half-sent head was held {held} s")
        for name, count in attack["oversize"]["statuses"].items():
            # "reset": a console body cut off, its 413 lost in the connection's reset.
            if not name.endswith((" 413", " reset")) or (
                name.endswith(" reset") and name.startswith("/v1/")
            ):
                problems.append(f"oversize: {count} x {name}")
        if attack["oversize"]["chunked_bytes_sent_max"] >= 64 * 1024 * 1024:
            problems.append("a 64 MB chunked console body was read to its end")
        flood = attack["flood"]["statuses"]
        # A 429 answered before the body is read closes the connection: a sender
        # still writing sees a reset. Nothing else (no 2xx, no 5xx) may come back.
        others = {n for n in flood if n not in ("400", "429") and not n.startswith("transport:")}
        if others or not flood.get("400"):
            problems.append(f"flood answered {flood}")
        keys = attack["random_keys"]["statuses"]
        if set(keys) != {"401"}:
            problems.append(f"random keys answered {keys}")
    return {
        "ok": not problems,
        "p99_ms_without_hostile": without,
        "p99_ms_with_hostile": with_,
        "ratio": round(with_ / without, 2) if without and with_ else None,
        "problems": problems,
    }

"""The figures ``bench_gateway`` prints: per step, the gateway's and the
floor's figures as medians over the repeats with what each adds over the
direct node, and the targets they are held to."""

from __future__ import annotations

import statistics


def _summary(r: dict) -> dict:
    keys = ("requests_per_second", "p50_ms", "p90_ms", "p99_ms", "ttft_p50_ms", "errors",
            "cpu_seconds", "cpu_us_per_call")  # fmt: skip
    return {k: r.get(k) for k in keys if r.get(k) is not None}


def _with_server_cpu(r: dict) -> dict:
    """The run's result plus the server's CPU µs per answered call (when measured)."""
    cpus = [v for v in (r.get("server_cpu_seconds") or {}).values() if v is not None]
    if cpus and r.get("requests"):
        r = {**r, "cpu_us_per_call": round(sum(cpus) / r["requests"] * 1e6, 1)}
    return r


def _median_of(results: list[dict]) -> dict:
    """Each numeric figure's median over the repeats (a single run is itself)."""
    if len(results) == 1:
        return results[0]
    out = {}
    for key in results[0]:
        values = [r.get(key) for r in results]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(numbers) == len(values):
            out[key] = round(statistics.median(numbers), 3)
    return out


def _diff(a: dict, b: dict, key: str):
    if a.get(key) is None or b.get(key) is None:
        return None
    return round(a[key] - b[key], 3)


def _ratio(a: dict, b: dict, key: str = "requests_per_second"):
    if not a.get(key) or not b.get(key):
        return None
    return round(a[key] / b[key], 3)


def step_row(mode: str, clients: int, runs: list[dict]) -> dict:
    """One step's figures: medians over its repeats, and each repeat's within-run ratios."""
    runs = [{name: _with_server_cpu(r) for name, r in run.items()} for run in runs]
    via = _median_of([run["gateway"] for run in runs])
    direct = _median_of([run["direct"] for run in runs])
    row = {
        "mode": mode,
        "clients": clients,
        "gateway": _summary(via),
        "direct": _summary(direct),
        "added_p50_ms": _diff(via, direct, "p50_ms"),
        "added_p90_ms": _diff(via, direct, "p90_ms"),
        "added_p99_ms": _diff(via, direct, "p99_ms"),
    }
    if mode.endswith("stream"):
        row["added_ttft_p50_ms"] = _diff(via, direct, "ttft_p50_ms")
        row["added_ttft_p90_ms"] = _diff(via, direct, "ttft_p90_ms")
    if "floor" not in runs[0]:
        return row
    floor = _median_of([run["floor"] for run in runs])
    row["floor"] = _summary(floor)
    row["floor_added_p50_ms"] = _diff(floor, direct, "p50_ms")
    row["floor_added_p99_ms"] = _diff(floor, direct, "p99_ms")
    if mode.endswith("stream"):
        row["floor_added_ttft_p50_ms"] = _diff(floor, direct, "ttft_p50_ms")
    # Within-run comparisons, each repeat on its own, then their median: a repeat's
    # three runs saw the same machine, the repeats may not have.
    each = [
        {
            "gateway_over_floor_rps": _ratio(run["gateway"], run["floor"]),
            "added_p50_over_floor_ms": _diff(run["gateway"], run["floor"], "p50_ms"),
            "added_ttft_p50_over_floor_ms": _diff(run["gateway"], run["floor"], "ttft_p50_ms"),
            # CPU per call, gateway over floor: the steadiest figure on a busy machine
            # (contention inflates both processes' CPU per call alike).
            "gateway_over_floor_cpu": _ratio(run["gateway"], run["floor"], "cpu_us_per_call"),
            "rps": {name: r.get("requests_per_second") for name, r in run.items()},
        }
        for run in runs
    ]
    for key in ("gateway_over_floor_rps", "added_p50_over_floor_ms",
                "added_ttft_p50_over_floor_ms", "gateway_over_floor_cpu"):  # fmt: skip
        values = [e[key] for e in each if e[key] is not None]
        row[key] = round(statistics.median(values), 3) if values else None
        if len(values) > 1:
            row[key + "_spread"] = [min(values), max(values)]
    row["cpu_us_per_call"] = {
        "gateway": via.get("cpu_us_per_call"),
        "floor": floor.get("cpu_us_per_call"),
    }
    if len(runs) > 1:
        row["repeats"] = each
    return row


def _held(value, target: str) -> dict:
    """``value`` against ``target`` (">= 0.75", "<= 0.3"): whether it is met."""
    op, bound = target.split()
    met = (
        None if value is None else (value >= float(bound) if op == ">=" else value <= float(bound))
    )
    return {"value": value, "target": target, "met": met}


# Issue 33's bar, in one run with the floor: req/s at least 0.75 of the floor's and
# CPU per call at most 1.4 of it, plain and streamed, at 4 and 50 clients; at 4
# clients at most 0.3 ms added p50 (plain) and 0.5 ms added TTFT (streamed) over it.
FLOOR_TARGETS = (
    ("gateway_over_floor_rps", ">= 0.75"),
    ("gateway_over_floor_cpu", "<= 1.4"),
)


def against_targets(rows: list[dict]) -> dict:
    def find(mode, clients):
        return next((r for r in rows if r["mode"] == mode and r["clients"] == clients), None)

    out = {}
    r = find("plain", 4)
    if r:
        out["added_p50_ms_at_4_clients"] = {"value": r["added_p50_ms"], "target": "<= 1"}
        if "floor" in r:
            out["added_p50_over_floor_ms_at_4_clients"] = _held(
                r["added_p50_over_floor_ms"], "<= 0.3"
            )
    r = find("stream", 4)
    if r and "floor" in r:
        out["added_ttft_p50_over_floor_ms_at_4_clients"] = _held(
            r.get("added_ttft_p50_over_floor_ms"), "<= 0.5"
        )
    for mode in ("plain", "stream"):
        for clients in (4, 50):
            r = find(mode, clients)
            if not r or "floor" not in r:
                continue
            for key, target in FLOOR_TARGETS:
                out[f"{mode}_{key}_at_{clients}_clients"] = _held(r[key], target)
            out[f"{mode}_cpu_us_per_call_at_{clients}_clients"] = r["cpu_us_per_call"]
    r = find("plain", 50)
    if r:
        out["plain_rps_at_50_clients"] = {
            "value": r["gateway"].get("requests_per_second"),
            "target": ">= 3000",
        }
    r = find("native-stream", 4)
    if r:
        out["native_stream_added_ttft_p50_ms_at_4_clients"] = {
            "value": r.get("added_ttft_p50_ms"),
            "floor": r.get("floor_added_ttft_p50_ms"),
        }
    r = find("plain", 200)
    if r:
        out["added_p99_ms_at_200_clients"] = {"value": r["added_p99_ms"], "target": "< 10"}
    return out

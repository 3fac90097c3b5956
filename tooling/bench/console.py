"""Time the console's analytics pages and chart partials through the real
views (Django's test client, every middleware, a signed-in admin) on
whatever is in the database. Prints JSON: the median of ``--runs`` runs per
page and per partial, after one warm-up: wall time, this process's CPU time
(``cpu_ms``) and the time its queries ran (``db_ms``), so a figure on a busy,
shared machine can be told apart from a slow one.

    python manage.py bench_console [--org SLUG] [--range 30d] [--runs 5]
    python manage.py bench_console --synth [--synth-calls 200000]   # a quick data set

Without ``--org`` the organization with the most calls in its rollups is
measured. ``--synth`` first generates ``--synth-calls`` calls over
``--days`` days into the ``bench-console`` organization with ``usage_synth``
(the real ingest path)."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from urllib.parse import urlencode

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.models import Count, Max, Min, Sum
from django.test import Client
from django.urls import reverse

from accounts.facade import Membership, Organization, Role
from console.features.analytics.views import CHARTS, PAGES
from usage.models import Grain, Rollup

SLUG = "bench-console"
TARGETS_MS = {"page": 200, "partial": 100}


class Command(BaseCommand):
    help = "Time every analytics page and chart partial through the real views; prints JSON."

    def add_arguments(self, parser):
        parser.add_argument("--org", help="Organization slug (default: the busiest one)")
        parser.add_argument(
            "--range", dest="preset", default="30d", help="Time range preset to measure"
        )
        parser.add_argument("--runs", type=int, default=5, help="Timed runs per figure")
        parser.add_argument(
            "--synth", action="store_true", help="Generate a data set with usage_synth first"
        )
        parser.add_argument("--synth-calls", type=int, default=200_000)
        parser.add_argument("--days", type=int, default=30)
        parser.add_argument("--only", help="Comma-separated names to measure (pages or charts)")

    def handle(self, *args, org, preset, runs, synth, synth_calls, days, only, **options):
        if runs < 1:
            raise CommandError("--runs must be at least 1.")
        if synth:
            self.stderr.write(f"Generating {synth_calls:,} calls over {days} days…")
            call_command(
                "usage_synth",
                orgs=1,
                days=days,
                calls=synth_calls,
                org_slug=SLUG,
                stdout=self.stderr,
            )
            org = org or SLUG
        organization = _organization(org)
        if connection.vendor == "postgresql" and not connection.in_atomic_block:
            with connection.cursor() as cur:
                cur.execute("ANALYZE usage_rollup")
        client = Client(HTTP_HOST="localhost")
        client.force_login(_bench_member(organization).user)
        wanted = set(only.split(",")) if only else None
        out = {
            "vendor": connection.vendor,
            "organization": organization.slug,
            "range": preset,
            "runs": runs,
            **_size(organization),
            "targets_ms": TARGETS_MS,
            "pages": {},
            "partials": {},
            # This process's CPU time per request (Django and Python, not the
            # database): what a busy, shared machine inflates least.
            "cpu_ms": {},
            # The database's share of each request: the time its queries
            # took to run, as the client saw it (reading rows back is not in
            # it); the median over the runs.
            "db_ms": {},
            "load_average": _load_average(),
        }
        for name, url in _scenarios(preset):
            if wanted and name.split("?")[0].split(":")[-1] not in wanted:
                continue
            kind = "partials" if "/charts/" in url else "pages"
            wall, cpu, db = _median_ms(client, url, runs)
            out[kind][name] = wall
            out["cpu_ms"][name] = cpu
            out["db_ms"][name] = db
        out["slowest"] = {
            kind: max(out[kind].items(), key=lambda kv: kv[1], default=(None, 0))
            for kind in ("pages", "partials")
        }
        out["met"] = all(ms < TARGETS_MS["page"] for ms in out["pages"].values()) and all(
            ms < TARGETS_MS["partial"] for ms in out["partials"].values()
        )
        self.stdout.write(json.dumps(out, indent=2))


def _organization(slug: str | None) -> Organization:
    if slug:
        org = Organization.objects.filter(slug=slug).first()
        if org is None:
            raise CommandError(f"No organization {slug!r}.")
        return org
    top = (
        Rollup.objects.filter(grain=Grain.ORG)
        .values("organization_id")
        .annotate(n=Sum("calls"))
        .order_by("-n")
        .first()
    )
    if top is None:
        raise CommandError("No usage in the database: run with --synth, or usage_synth first.")
    return Organization.objects.get(pk=top["organization_id"])


def _size(org: Organization) -> dict:
    rows = Rollup.objects.filter(organization_id=org.pk)
    org_rows = rows.filter(grain=Grain.ORG).aggregate(
        calls=Sum("calls"), hours=Count("id"), first=Min("hour"), last=Max("hour")
    )
    return {
        "calls": org_rows["calls"] or 0,
        "hours_with_calls": org_rows["hours"],
        "first_hour": org_rows["first"].isoformat() if org_rows["first"] else None,
        "last_hour": org_rows["last"].isoformat() if org_rows["last"] else None,
        "rollup_rows": rows.count(),
    }


def _scenarios(preset: str) -> list[tuple[str, str]]:
    base = {"range": preset}
    out = [("overview", reverse("console:overview"))]
    for name in PAGES:
        out.append((name, f"{reverse(f'analytics:{name}')}?{urlencode(base)}"))
    for name in CHARTS:
        out.append((f"chart:{name}", f"{reverse(f'analytics:chart_{name}')}?{urlencode(base)}"))
    variants = [
        ("latency", {"compare": "model", "pct": "p99"}),
        ("latency", {"compare": "node"}),
        ("cache_hit", {"compare": "key"}),
        ("spend", {"stack": "key"}),
        ("spend", {"stack": "sub_account"}),
        ("latency", {"protocol": "anthropic", "stream": "stream"}),  # the traffic grain
    ]
    for name, extra in variants:
        query = urlencode({**base, **extra})
        out.append(
            (f"chart:{name}?{urlencode(extra)}", f"{reverse(f'analytics:chart_{name}')}?{query}")
        )
    busiest = _busiest_model()
    if busiest:
        extra = {"model": busiest}
        query = urlencode({**base, **extra})
        out.append(("chart:latency?model", f"{reverse('analytics:chart_latency')}?{query}"))
        out.append(("chart:spend?model", f"{reverse('analytics:chart_spend')}?{query}"))
        # A protocol with a model: the full grain.
        query = urlencode({**base, **extra, "protocol": "openai"})
        out.append(
            ("chart:latency?model&protocol", f"{reverse('analytics:chart_latency')}?{query}")
        )
    return out


def _busiest_model() -> str | None:
    top = (
        Rollup.objects.filter(grain=Grain.MODEL)
        .values("model")
        .annotate(n=Sum("calls"))
        .order_by("-n")
        .first()
    )
    return top["model"] if top else None


def _median_ms(client: Client, url: str, runs: int) -> tuple[float, float, float]:
    def fetch():
        response = client.get(url)
        if response.status_code != 200:
            raise CommandError(f"{url} answered {response.status_code}")
        return response

    fetch()  # warm-up: connection, caches, templates
    times, cpu, db = [], [], []
    for _ in range(runs):
        with _query_clock() as spent:
            t0, c0 = time.perf_counter(), time.process_time()
            fetch()
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        db.append(spent[0] * 1000)
    return tuple(round(statistics.median(v), 2) for v in (times, cpu, db))


@contextlib.contextmanager
def _query_clock():
    """The seconds this connection spends in the database, added up in a
    one-element list (an execute wrapper: no query log kept)."""
    spent = [0.0]

    def clock(execute, sql, params, many, context):
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            spent[0] += time.perf_counter() - t0

    with connection.execute_wrapper(clock):
        yield spent


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _bench_member(org: Organization) -> Membership:
    user, _ = get_user_model().objects.get_or_create(
        email=f"{SLUG}@example.invalid", defaults={"full_name": "Console benchmark"}
    )
    membership, _ = Membership.objects.get_or_create(
        user=user, organization=org, defaults={"role": Role.ADMIN}
    )
    return membership

"""Measure the read side on a big organization: call-log pages and latency
percentile series.

    python manage.py bench_analytics [--calls 10000000] [--days 30] [--reuse]

Makes sure the ``bench-analytics`` organization holds ``--calls`` call
records over ``--days`` days (generating them with ``usage_synth`` unless
``--reuse`` finds enough), runs VACUUM ANALYZE on PostgreSQL (the steady
state autovacuum keeps: generating a month in minutes outruns it), then times each read
in-process: one warm-up, then the median of ``--runs`` runs. Prints JSON."""

from __future__ import annotations

import json
import statistics
import time
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.models import Max, Sum
from django.test import RequestFactory
from django_htmx.middleware import HtmxDetails

from accounts.facade import Actor, Membership, Organization, Role
from usage import logs
from usage.analytics import latency_series
from usage.models import CallRecord, Grain, Rollup
from usage.views import call_list

SLUG = "bench-analytics"
TARGETS_MS = {"log_page": 50, "percentile_series": 150}


class Command(BaseCommand):
    help = "Time call-log pages and latency percentile series on a large organization."

    def add_arguments(self, parser):
        parser.add_argument("--calls", type=int, default=10_000_000)
        parser.add_argument("--days", type=int, default=30)
        parser.add_argument(
            "--reuse", action="store_true", help="Keep existing rows when there are enough."
        )
        parser.add_argument("--runs", type=int, default=7, help="Timed runs per figure.")

    def handle(self, *args, calls: int, days: int, reuse: bool, runs: int, **options):
        if calls < 1 or days < 1 or runs < 1:
            raise CommandError("--calls, --days and --runs must be at least 1.")
        org = Organization.objects.filter(slug=SLUG).first()
        rows = CallRecord.objects.filter(organization_id=org.pk).count() if org else 0
        if not (reuse and rows >= calls):
            self.stderr.write(f"Generating {calls:,} calls over {days} days with usage_synth…")
            call_command(
                "usage_synth", orgs=1, days=days, calls=calls, org_slug=SLUG, stdout=self.stderr
            )
            org = Organization.objects.get(slug=SLUG)
            rows = CallRecord.objects.filter(organization_id=org.pk).count()
        if connection.vendor == "postgresql":
            # VACUUM cannot run inside a transaction (a test's, say): analyze only then.
            verb = "ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE"
            with connection.cursor() as cur:
                cur.execute(f"{verb} usage_call")
                cur.execute(f"{verb} usage_rollup")
        self.stdout.write(json.dumps(self.measure(org, rows, days, runs), indent=2))

    def measure(self, org: Organization, rows: int, days: int, runs: int) -> dict:
        actor = Actor(_bench_member(org))
        latest = CallRecord.objects.filter(organization_id=org.pk).aggregate(t=Max("started_at"))
        if latest["t"] is None:
            raise CommandError(f"Organization {SLUG} has no calls to measure.")
        end = latest["t"].replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        start = end - timedelta(days=days)
        model = _busiest(org, Grain.MODEL, "model")
        key_id = _busiest(org, Grain.KEY, "api_key_id")

        def page(**filters):
            return lambda: logs.call_page(actor=actor, filters=logs.CallFilters(**filters))

        view = _view_runner(actor)
        figures = {
            "log_first_page": page(),
            "log_first_page_view": view({}),
            "log_model_errors_page": page(model=model, status="errors"),
            "log_key_page": page(api_key_id=key_id),
            "log_older_page": _older_page(actor),
            "latency_series": lambda: latency_series(org.pk, start, end),
            "latency_series_model": lambda: latency_series(
                org.pk, start, end, filters={"model": model}
            ),
        }
        out: dict = {
            "vendor": connection.vendor,
            "rows": rows,
            "days": days,
            "runs": runs,
            "model_filter": model,
            "key_filter": key_id,
            "targets_ms": TARGETS_MS,
            "ms": {},
        }
        for name, fn in figures.items():
            out["ms"][name] = _median_ms(fn, runs)
        out["met"] = {name: ms < _target(name) for name, ms in out["ms"].items()}
        return out


def _target(name: str) -> int:
    return TARGETS_MS["percentile_series" if name.startswith("latency") else "log_page"]


def _median_ms(fn, runs: int) -> float:
    fn()  # warm-up: connection, caches, plan
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def _bench_member(org: Organization) -> Membership:
    user, _ = get_user_model().objects.get_or_create(
        email=f"{SLUG}@example.invalid", defaults={"full_name": "Benchmark"}
    )
    membership, _ = Membership.objects.get_or_create(
        user=user, organization=org, defaults={"role": Role.OWNER}
    )
    return membership


def _busiest(org: Organization, grain: str, column: str):
    top = (
        Rollup.objects.filter(organization_id=org.pk, grain=grain)
        .values(column)
        .annotate(n=Sum("calls"))
        .order_by("-n")
        .first()
    )
    if top is None:  # no rollups: fall back to the newest call's value
        return getattr(CallRecord.objects.filter(organization_id=org.pk).first(), column)
    return top[column]


def _older_page(actor: Actor):
    first = logs.call_page(actor=actor, filters=logs.CallFilters())
    cursor = logs.Cursor.decode(first.older) if first.older else None
    return lambda: logs.call_page(actor=actor, filters=logs.CallFilters(), before=cursor)


def _view_runner(actor: Actor):
    """The whole logs view, rendered, minus the HTTP server and middleware."""

    factory = RequestFactory()

    def make(params: dict):
        def run():
            request = factory.get("/usage/calls/", params)
            request.user = actor.user
            request.actor = actor
            request.session = {}
            request.htmx = HtmxDetails(request)
            response = call_list(request)
            if response.status_code != 200:
                raise CommandError(f"logs view answered {response.status_code}")

        return run

    return make

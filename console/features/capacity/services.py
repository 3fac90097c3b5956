"""Starting, cancelling and reading load tests: always scoped to the actor's
organization; only owners and admins (``Perm.ORG_MANAGE``) start or cancel."""

from __future__ import annotations

import contextlib
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone as tz
from django.utils.translation import gettext as _

from accounts.facade import (
    Actor,
    Conflict,
    NotFound,
    Organization,
    Perm,
    ValidationFailed,
    api_key_revoke,
    audit_record,
)
from console.features.capacity.models import ACTIVE, Billing, LoadTest, Status
from console.kernel.celery import registered_task
from inference_node.facade import Node, node_serves_model, nodes_own_and_shared
from usage.facade import SPEND_BY_KEY, calls_and_tokens_by_key, model_names, spend_by_period

DEFAULT_STEPS = (50, 100, 200, 400)
MIN_STEP_SECONDS, MAX_STEP_SECONDS = 5, 120
MAX_STEPS = 10
# A run still "running" this long after it should have ended lost its worker.
STALE_AFTER = timedelta(minutes=5)
TASK = "capacity.run_load_test"
# The call log's calls of a run: from its creation until a little after now.
_CALLS_UNTIL = timedelta(minutes=5)


def load_tests(actor: Actor):
    actor.require(Perm.USAGE_VIEW_ALL)
    return LoadTest.objects.filter(organization_id=actor.organization_id)


def get_load_test(actor: Actor, load_test_id: int) -> LoadTest:
    try:
        return load_tests(actor).get(pk=load_test_id)
    except LoadTest.DoesNotExist:
        raise NotFound(_("No such load test.")) from None


def check_plan(steps: list[int], step_seconds: int) -> None:
    """The bounds of a test (ValidationFailed naming the field)."""
    errors = {}
    if not steps or len(steps) > MAX_STEPS:
        errors["steps"] = _("Give between 1 and %(n)d steps.") % {"n": MAX_STEPS}
    elif any(c < 1 or c > settings.CAPACITY_MAX_CLIENTS for c in steps):
        errors["steps"] = _("Each step runs between 1 and %(n)d concurrent clients.") % {
            "n": settings.CAPACITY_MAX_CLIENTS
        }
    if not MIN_STEP_SECONDS <= step_seconds <= MAX_STEP_SECONDS:
        errors["step_seconds"] = _("A step lasts between %(a)d and %(b)d seconds.") % {
            "a": MIN_STEP_SECONDS,
            "b": MAX_STEP_SECONDS,
        }
    elif steps and len(steps) * step_seconds > settings.CAPACITY_MAX_DURATION_SECONDS:
        errors["step_seconds"] = _(
            "The whole test may last at most %(n)d seconds (steps times seconds per step)."
        ) % {"n": settings.CAPACITY_MAX_DURATION_SECONDS}
    if errors:
        raise ValidationFailed.from_fields(errors)


def _expire_stale(actor: Actor) -> None:
    """Runs whose worker died never finish: past their time plus a margin they
    fail, and their keys are revoked (by the member starting the next run)."""
    now = tz.now()
    for test in LoadTest.objects.filter(organization_id=actor.organization_id, status__in=ACTIVE):
        began = test.started_at or test.created_at
        if began + timedelta(seconds=test.total_seconds) + STALE_AFTER < now:
            test.status, test.finished_at = Status.FAILED, now
            test.error = "The worker running this test stopped."
            test.save(update_fields=["status", "finished_at", "error"])
            if test.api_key_id:
                with contextlib.suppress(Conflict, NotFound):
                    api_key_revoke(actor=actor, key_id=test.api_key_id)


def is_staff(actor: Actor) -> bool:
    """Platform staff (``user.is_staff``), who may pin a test to one node."""
    user = actor.user
    return bool(user is not None and user.is_active and user.is_staff)


def pinnable_nodes(actor: Actor):
    """The nodes staff may pin a test of this organization to: the shared
    ones and the organization's own (the ones its calls may be routed to)."""
    return nodes_own_and_shared(actor.organization_id).order_by("name", "pk")


def _pinned_node(actor: Actor, node_id: int, model: str) -> Node:
    """The node a staff test drives alone (ValidationFailed on ``node``)."""
    if not is_staff(actor):
        raise ValidationFailed.from_fields(
            {"node": _("Only platform staff may run a load test against one node.")}
        )
    node = pinnable_nodes(actor).filter(pk=node_id).first()
    if node is None:
        raise ValidationFailed.from_fields({"node": _("No such node.")})
    if not node_serves_model(node.pk, model):
        raise ValidationFailed.from_fields(
            {"node": _("This node does not serve %(model)s.") % {"model": model}}
        )
    return node


def _checked_request(
    actor: Actor, model: str, prefix_share: int, budget: int, billing: str, node: int | None
) -> Node | None:
    """``ValidationFailed`` naming the first field a start may not have; else the
    node to pin the run to (``None``: any)."""
    if model not in model_names(enabled=True, kind="chat"):
        raise ValidationFailed.from_fields({"model": _("Choose an enabled chat model.")})
    pinned = _pinned_node(actor, node, model) if node is not None else None
    if budget <= 0:
        raise ValidationFailed.from_fields({"budget": _("Give the test a budget above zero.")})
    if billing not in Billing.values:
        raise ValidationFailed.from_fields({"billing": _("Choose billed or test.")})
    if not 0 <= prefix_share <= 100:
        raise ValidationFailed.from_fields(
            {"prefix_share": _("The shared prefix is between 0 and 100 %.")}
        )
    return pinned


def _refuse_past_limit(actor: Actor) -> None:
    """``Conflict`` while the organization runs its limit of tests (in the caller's
    transaction, under the organization's row lock: two starts at once cannot both
    pass the count)."""
    Organization.objects.select_for_update().get(pk=actor.organization_id)
    _expire_stale(actor)
    running = LoadTest.objects.filter(
        organization_id=actor.organization_id, status__in=ACTIVE
    ).count()
    if running >= settings.CAPACITY_RUNS_PER_ORG:
        raise Conflict(
            _("A load test is already running in this organization; wait for it or cancel it."),
            code="load_test_running",
        )


def load_test_start(
    *,
    actor: Actor,
    model: str,
    input_tokens: int,
    output_tokens: int,
    prefix_share: int,
    steps: list[int],
    step_seconds: int,
    budget: int,
    billing: str = Billing.BILLED,
    node: int | None = None,
    enqueue: bool = True,
) -> LoadTest:
    """Queue a load test; refused while the organization runs its limit of them.

    ``billing``: ``Billing.BILLED`` (its calls billed like any other) or
    ``Billing.TEST`` (marked as a test: recorded, not billed). ``node``
    (platform staff only): drive that node alone; the run's key is pinned to
    it, so no call goes to another node or a fallback model."""
    actor.require(Perm.ORG_MANAGE)
    check_plan(steps, step_seconds)
    pinned = _checked_request(actor, model, prefix_share, budget, billing, node)
    with transaction.atomic():
        _refuse_past_limit(actor)
        test = LoadTest.objects.create(
            organization_id=actor.organization_id,
            started_by=actor.membership,
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            prefix_share=prefix_share,
            steps=list(steps),
            step_seconds=step_seconds,
            budget=budget,
            billing=billing,
            pinned_node_id=pinned.pk if pinned else None,
            pinned_node_name=pinned.name if pinned else "",
        )
        params = {
            "model": model,
            "steps": list(steps),
            "step_seconds": step_seconds,
            "billing": billing,
        }
        if pinned:
            params["node"] = pinned.pk
        audit_record(actor=actor, action="load_test.start", target=test, params=params)
        if enqueue:
            transaction.on_commit(
                lambda: registered_task(TASK).apply_async(
                    args=[test.pk], queue=settings.CAPACITY_QUEUE
                )
            )
    return test


def load_test_cancel(*, actor: Actor, load_test_id: int) -> LoadTest:
    """Ask a run to stop: its job sees the flag within a fifth of a second; a
    run still queued ends at once."""
    actor.require(Perm.ORG_MANAGE)
    with transaction.atomic():
        test = get_load_test(actor, load_test_id)
        test = LoadTest.objects.select_for_update().get(pk=test.pk)
        if not test.active:
            raise Conflict(_("This load test has already ended."), code="load_test_ended")
        test.cancel_requested = True
        fields = ["cancel_requested"]
        if test.status == Status.QUEUED:
            test.status, test.finished_at = Status.CANCELLED, tz.now()
            fields += ["status", "finished_at"]
        test.save(update_fields=fields)
        audit_record(actor=actor, action="load_test.cancel", target=test, params={})
    return test


def load_test_cost(test: LoadTest) -> tuple[int, int] | None:
    """What the run's calls cost (micro-units) and how many they are, from the
    call log of its key (billed or test calls alike); ``None`` before the run
    has a key. Calls still being ingested are not in it yet."""
    if test.api_key_id is None:
        return None
    cost = spend_by_period(
        organization_id=test.organization_id, grain=SPEND_BY_KEY, ident=test.api_key_id, periods={}
    )["life"]
    counts = calls_and_tokens_by_key(
        test.organization_id, [test.api_key_id], test.created_at, tz.now() + _CALLS_UNTIL
    )
    return cost, counts.get(test.api_key_id, (0, 0))[0]

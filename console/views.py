"""The console shell: the overview page, and the liveness and readiness
probes (``/livez``, ``/healthz``, ``/readyz``: console.kernel.probes)."""

from django.http import JsonResponse
from django.shortcuts import render

from accounts.facade import (
    ApiKey,
    ApiKeyStatus,
    Membership,
    Perm,
    SubAccount,
    api_key_list,
    can_view_keys,
    org_view,
)
from console.kernel import probes
from console.kernel.crypto import no_store


@org_view(Perm.ORG_VIEW)
def overview(request):
    actor = request.actor
    org_id = actor.organization_id
    context = {
        "member_count": Membership.objects.filter(organization_id=org_id).count(),
        "sub_account_count": SubAccount.objects.filter(organization_id=org_id).count(),
    }
    if can_view_keys(actor.role):
        keys = api_key_list(actor=actor)
        context["active_key_count"] = keys.filter(status=ApiKeyStatus.ACTIVE).count()
        context["recent_keys"] = keys[:5]
    # Usage today and this month, and the top models and keys: chart partials
    # of the analytics pages, loaded by htmx so this page never waits on them.
    context["show_usage"] = actor.can(Perm.USAGE_VIEW_ALL) or actor.can(Perm.USAGE_VIEW_OWN)
    return render(request, "console/overview.html", context)


def livez(request):
    """Liveness without dependencies: the process answers. No database, cache
    or broker is touched, so an outage of one of them never restarts every
    pod at once (an orchestrator's liveness probe; ``/readyz`` for readiness)."""
    return JsonResponse({"status": "ok"})


def health(request):
    """Liveness: the process answers and reaches its database."""
    ApiKey.objects.exists()  # the database answers
    return JsonResponse({"status": "ok"})


async def readyz(request):
    """Readiness: 200 when the database, the shared cache and the broker
    answer in time, 503 naming the one that does not (console.kernel.probes)."""
    status, body = await probes.readiness()
    response = JsonResponse(body, status=status)
    return no_store(response)

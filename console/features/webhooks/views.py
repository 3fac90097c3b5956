"""Console pages: destinations (list, create, edit, delete, send test, rotate
the signing secret) and the delivery log (filter, replay)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from accounts.facade import DomainError, NotFound, Perm, apply_errors, org_view
from console.features.webhooks import selectors, services
from console.features.webhooks.forms import DeliveryFilterForm, DestinationForm, event_choices
from console.features.webhooks.models import DestinationKind
from console.kernel.crypto import no_store


def _not_found(request):
    return render(request, "404.html", {"reason": _("No such destination.")}, status=404)


def _destination(request, destination_id: int):
    destination = selectors.destination_list(actor=request.actor).filter(pk=destination_id).first()
    if destination is None:
        raise NotFound(_("No such destination."))
    return destination


@org_view(Perm.ORG_MANAGE, Perm.BILLING_VIEW, any_of=True)
def destination_list(request):
    labels = dict(event_choices())
    destinations = [
        (d, services.url_display(d.url), [str(labels.get(e, e)) for e in d.events])
        for d in selectors.destination_list(actor=request.actor)
    ]
    return render(
        request,
        "webhooks/destinations.html",
        {"destinations": destinations, "can_manage": request.actor.can(Perm.ORG_MANAGE)},
    )


def _secret_page(request, destination, secret: str, *, rotated: bool):
    """The one page that shows the signing secret: never stored."""
    return no_store(
        render(
            request,
            "webhooks/secret.html",
            {"destination": destination, "secret": secret, "rotated": rotated},
        )
    )


@org_view(Perm.ORG_MANAGE)
def destination_create(request):
    form = DestinationForm(
        request.POST or None,
        initial={"events": ["all"], "language": request.LANGUAGE_CODE, "enabled": True},
    )
    if request.method == "POST" and form.is_valid():
        try:
            destination, secret = services.destination_create(
                actor=request.actor, **form.service_data()
            )
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            if secret:
                return _secret_page(request, destination, secret, rotated=False)
            return redirect("webhooks:destinations")
    return render(request, "webhooks/destination_form.html", {"form": form, "destination": None})


@org_view(Perm.ORG_MANAGE)
def destination_edit(request, destination_id: int):
    try:
        destination = _destination(request, destination_id)
    except NotFound:
        return _not_found(request)
    initial = {
        "name": destination.name,
        "recipients": "\n".join(destination.recipients),
        "events": destination.events,
        "language": destination.language,
        "enabled": destination.enabled,
    }
    form = DestinationForm(request.POST or None, initial=initial, editing=True)
    if request.method == "POST" and form.is_valid():
        try:
            services.destination_update(
                actor=request.actor, destination_id=destination.pk, **form.service_data()
            )
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            return redirect("webhooks:destinations")
    return render(
        request,
        "webhooks/destination_form.html",
        {
            "form": form,
            "destination": destination,
            "url_display": services.url_display(destination.url),
            "is_webhook": destination.kind == DestinationKind.WEBHOOK,
        },
    )


@require_POST
@org_view(Perm.ORG_MANAGE)
def destination_delete(request, destination_id: int):
    try:
        services.destination_delete(actor=request.actor, destination_id=destination_id)
    except NotFound:
        return _not_found(request)
    return redirect("webhooks:destinations")


@require_POST
@org_view(Perm.ORG_MANAGE)
def destination_rotate(request, destination_id: int):
    try:
        destination, secret = services.destination_rotate_secret(
            actor=request.actor, destination_id=destination_id
        )
    except NotFound:
        return _not_found(request)
    return _secret_page(request, destination, secret, rotated=True)


@require_POST
@org_view(Perm.ORG_MANAGE)
def destination_test(request, destination_id: int):
    try:
        delivery = services.destination_test(actor=request.actor, destination_id=destination_id)
    except NotFound:
        return _not_found(request)
    return render(
        request,
        "webhooks/test_result.html",
        {"delivery": delivery, "destination": delivery.destination},
    )


@org_view(Perm.ORG_MANAGE, Perm.BILLING_VIEW, any_of=True)
def delivery_list(request):
    destinations = list(selectors.destination_list(actor=request.actor))
    form = DeliveryFilterForm(request.GET or None, destinations=destinations)
    filters = form.cleaned_data if form.is_valid() else {}
    deliveries = selectors.delivery_list(
        actor=request.actor,
        destination_id=filters.get("destination"),
        status=filters.get("status") or "",
    ).prefetch_related("attempt_log")
    page = Paginator(deliveries, 50).get_page(request.GET.get("page"))
    query = urlencode({k: v for k, v in filters.items() if v})
    return render(
        request,
        "webhooks/deliveries.html",
        {
            "form": form,
            "page": page,
            "pager_query": query,
            "can_manage": request.actor.can(Perm.ORG_MANAGE),
        },
    )


@require_POST
@org_view(Perm.ORG_MANAGE)
def delivery_replay(request, delivery_id: int):
    try:
        services.delivery_replay(actor=request.actor, delivery_id=delivery_id)
    except NotFound:
        return render(request, "404.html", {"reason": _("No such delivery.")}, status=404)
    return redirect("webhooks:deliveries")

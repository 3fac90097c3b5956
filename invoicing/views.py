"""The finance console: invoices (with the running month's preview), their
actions (paying one now with the card on file among them), printable pages
and PDFs, credit notes, the prepaid balance and its ledger, top-ups, the
card on file and the CSV exports.

Every page needs ``Perm.BILLING_VIEW`` and every action
``Perm.BILLING_MANAGE`` (finance, owners, admins); everything is read
through ``invoicing.selectors`` (scoped to the current organization, so
another organization's ids are "not found") and written through
``invoicing.services``, whose errors become form errors or messages."""

from __future__ import annotations

import logging

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_GET, require_POST

from accounts.decorators import apply_errors, org_view
from accounts.errors import DomainError, NotFound
from accounts.permissions import Perm
from invoicing import exports, selectors, services
from invoicing.forms import (
    AdjustmentForm,
    BillingProfileForm,
    CardTopUpForm,
    CreditNoteForm,
    DraftForm,
    IncidentCreditForm,
    ManualTopUpForm,
    PaymentForm,
    PeriodStatusForm,
    ReasonForm,
)
from invoicing.models import InvoiceStatus, PaymentKind
from invoicing.money import from_minor
from invoicing.services._common import org_zone

logger = logging.getLogger(__name__)

VIEW = Perm.BILLING_VIEW
MANAGE = Perm.BILLING_MANAGE


def _invoice(request, invoice_id):
    try:
        return selectors.invoice_get(actor=request.actor, invoice_id=invoice_id)
    except NotFound:
        raise Http404("No such invoice in this organization.") from None


def _with_micro(obj, *fields):
    """Give ``obj`` the micro-unit twin (``paid_micro``) of each minor-unit
    field (``paid_minor``), so templates format every amount one way."""
    for name in fields:
        setattr(obj, name.replace("_minor", "_micro"), from_minor(getattr(obj, name), obj.currency))
    return obj


INVOICE_MINOR = ("paid_minor", "credited_minor", "amount_due_minor", "amount_due_initial_minor")


def _detail(invoice):
    return redirect("invoicing:invoice_detail", invoice.pk)


def _preview(actor):
    """The running month as it stands; never a reason for the page to fail."""
    try:
        return services.invoice_preview(organization_id=actor.organization_id)
    except Exception:  # a preview is a convenience: log it, show the rest
        logger.exception("invoice preview failed for org %s", actor.organization_id)
        return None


# --- invoices ------------------------------------------------------------------------------


@org_view(VIEW)
def invoice_list(request):
    """Invoices with period and status filters; the running month's preview
    on top; a form to draft a month's invoice now (managers)."""
    actor = request.actor
    form = PeriodStatusForm(request.GET or None)
    draft_form = DraftForm(request.POST or None, timezone_name=actor.organization.timezone)
    if request.method == "POST":
        if not actor.can(MANAGE):
            return render(
                request, "403.html", {"reason": "Your role cannot draft invoices."}, status=403
            )
        if draft_form.is_valid():
            try:
                invoice = services.invoice_draft(
                    organization_id=actor.organization_id,
                    period=draft_form.cleaned_data["period"],
                    actor=actor,
                )
            except DomainError as exc:
                apply_errors(draft_form, exc)
            else:
                messages.success(request, f"Invoice for {invoice.period} drafted.")
                return _detail(invoice)
    period = status = None
    if form.is_bound and form.is_valid():
        period = form.cleaned_data["period"] or None
        status = form.cleaned_data["status"] or None
    invoices = (
        selectors.invoice_list(actor=actor, period=period, status=status)
        if not form.is_bound or form.is_valid()
        else selectors.invoice_list(actor=actor).none()
    )
    page = Paginator(invoices, 50).get_page(request.GET.get("page"))
    for invoice in page.object_list:
        _with_micro(invoice, *INVOICE_MINOR)
    params = {k: v for k, v in (("period", period), ("status", status)) if v}
    context = {
        "form": form,
        "page": page,
        "params": params,
        "exports": exports.EXPORTS.values(),
    }
    if request.htmx:
        return render(request, "invoicing/_invoice_table.html", context)
    context.update(draft_form=draft_form, preview=_preview(actor))
    return render(request, "invoicing/invoices.html", context)


def _detail_context(request, invoice):
    actor = request.actor
    lines = selectors.invoice_lines(invoice=invoice)
    _with_micro(invoice, *INVOICE_MINOR)
    notes = [
        _with_micro(n, "amount_minor", "due_reduction_minor", "refund_minor")
        for n in selectors.credit_note_list(actor=actor, invoice_id=invoice.pk)
    ]
    payments = [
        _with_micro(p, "amount_minor")
        for p in selectors.payment_list(actor=actor, invoice_id=invoice.pk)
    ]
    context = {
        "invoice": invoice,
        "lines": lines,
        "usage_lines": [ln for ln in lines if ln.kind in ("usage", "adjustment")],
        "total_lines": [ln for ln in lines if ln.kind in ("discount", "tax")],
        "credit_lines": [ln for ln in lines if ln.kind == "credits"],
        "credit_notes": notes,
        "payments": payments,
        "events": invoice.events.select_related("actor").order_by("created_at", "id"),
        "may_manage": actor.can(MANAGE),
        "creditable": invoice.status
        in (InvoiceStatus.FINALIZED, InvoiceStatus.PAID, InvoiceStatus.UNCOLLECTIBLE),
        "remaining": invoice.total - invoice.credited,
        "finalize_blocker": selectors.finalize_blocker(invoice),
        "pay_now": actor.can(MANAGE)
        and invoice.status == InvoiceStatus.FINALIZED
        and invoice.amount_due_minor > 0
        and _stripe_enabled(),
    }
    return context


@require_GET
@org_view(VIEW)
def invoice_detail(request, invoice_id: int):
    invoice = _invoice(request, invoice_id)
    context = _detail_context(request, invoice)
    if request.GET.get("authenticate") and context["pay_now"]:
        # "Pay now" met 3-D Secure: the page finishes it with Stripe.js.
        try:
            secret = services.invoice_payment_client_secret(
                actor=request.actor, invoice_id=invoice.pk
            )
        except DomainError as exc:
            messages.error(request, exc.message)
            secret = ""
        if secret:
            context.update(_stripe_js_context(), client_secret=secret)
    return render(request, "invoicing/invoice_detail.html", context)


PAY_NOW_MESSAGES = {
    "not_open": "This invoice is not open any more; nothing was charged.",
    "nothing_due": "Nothing is due on this invoice; nothing was charged.",
    "already_succeeded": "This invoice is paid already; nothing was charged again.",
    "processing": "The card payment is processing; the invoice is paid once Stripe confirms it.",
}


@require_POST
@org_view(MANAGE)
def invoice_pay(request, invoice_id: int):
    """The "Pay now with the card on file" button: the invoice's collection, run now.
    A second press finds the invoice paid (or its pending payment): one charge."""
    invoice = _invoice(request, invoice_id)
    try:
        outcome = services.invoice_pay_now(actor=request.actor, invoice_id=invoice.pk)
    except DomainError as exc:
        messages.error(request, exc.message)
        return _detail(invoice)
    if outcome == "succeeded":
        messages.success(request, "Paid with the card on file.")
    elif outcome == "no_payment_method":
        messages.error(
            request,
            format_html(
                'No card on file: <a href="{}">add a card</a>, or pay by bank transfer.',
                reverse("invoicing:payment_method"),
            ),
        )
    elif outcome == "failed":
        payment = selectors.payment_list(actor=request.actor, invoice_id=invoice.pk).first()
        reason = payment.failure_message if payment is not None else ""
        messages.error(request, f"The card was not charged: {reason or 'declined'}")
    elif outcome == "requires_action":
        messages.info(request, "The bank asks the cardholder to confirm this payment.")
        return redirect(reverse("invoicing:invoice_detail", args=[invoice.pk]) + "?authenticate=1")
    else:
        messages.info(request, PAY_NOW_MESSAGES.get(outcome, f"Card payment: {outcome}."))
    return _detail(invoice)


def _button(request, invoice, action, success: str):
    """Run one service call for a POST button; the outcome is a message."""
    try:
        action()
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, success)
    return _detail(invoice)


@require_POST
@org_view(MANAGE)
def invoice_refresh(request, invoice_id: int):
    invoice = _invoice(request, invoice_id)
    return _button(
        request,
        invoice,
        lambda: services.invoice_refresh(invoice_id=invoice.pk, actor=request.actor),
        "The draft was recomputed from the calls.",
    )


@org_view(MANAGE)
def invoice_finalize(request, invoice_id: int):
    """A confirmation page; the POST numbers the invoice and freezes it."""
    invoice = _invoice(request, invoice_id)
    if request.method != "POST":
        if invoice.status != InvoiceStatus.DRAFT:
            messages.error(request, f"This invoice is already {invoice.get_status_display()}.")
            return _detail(invoice)
        return render(request, "invoicing/invoice_finalize.html", {"invoice": invoice})
    try:  # the service refuses an open month, with the reason
        invoice = services.invoice_finalize(invoice_id=invoice.pk, actor=request.actor)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Invoice {invoice.number} finalized.")
    return _detail(invoice)


def _reason_action(request, invoice_id, *, prefix, service, success, template, title):
    invoice = _invoice(request, invoice_id)
    form = ReasonForm(request.POST or None, prefix=prefix)
    if request.method == "POST" and form.is_valid():
        try:
            service(invoice_id=invoice.pk, actor=request.actor, reason=form.cleaned_data["reason"])
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, success)
            return _detail(invoice)
    return render(
        request, template, {"invoice": invoice, "form": form, "title": title, "prefix": prefix}
    )


@org_view(MANAGE)
def invoice_void(request, invoice_id: int):
    return _reason_action(
        request,
        invoice_id,
        prefix="void",
        service=services.invoice_void,
        success="Invoice voided.",
        template="invoicing/invoice_reason.html",
        title="Void",
    )


@org_view(MANAGE)
def invoice_uncollectible(request, invoice_id: int):
    return _reason_action(
        request,
        invoice_id,
        prefix="uncollectible",
        service=services.invoice_mark_uncollectible,
        success="Invoice marked uncollectible.",
        template="invoicing/invoice_reason.html",
        title="Mark uncollectible",
    )


@org_view(MANAGE)
def invoice_payment(request, invoice_id: int):
    """Record a payment received by hand (a bank transfer, with its reference)."""
    invoice = _with_micro(_invoice(request, invoice_id), *INVOICE_MINOR)
    form = PaymentForm(request.POST or None, invoice=invoice)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            services.invoice_mark_paid(
                invoice_id=invoice.pk,
                actor=request.actor,
                reference=data["reference"],
                method=data["method"],
                amount_minor=data["amount"],
            )
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Payment {data['reference']} recorded.")
            return _detail(invoice)
    return render(request, "invoicing/invoice_payment.html", {"invoice": invoice, "form": form})


@require_GET
@org_view(VIEW)
def invoice_print(request, invoice_id: int):
    invoice = _invoice(request, invoice_id)
    context = _detail_context(request, invoice)
    context["seller"] = _seller()
    context["buyer"] = invoice.buyer or {"name": invoice.organization.name}
    return render(request, "invoicing/invoice_print.html", context)


def _seller():
    from django.conf import settings

    seller = dict(settings.INVOICING_SELLER)
    seller["address_lines"] = [s for s in seller.get("address", "").splitlines() if s]
    return seller


def _pdf_response(data: bytes, filename: str) -> HttpResponse:
    response = HttpResponse(data, content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@org_view(VIEW)
def invoice_pdf(request, invoice_id: int):
    try:
        invoice, data = selectors.invoice_pdf_bytes(actor=request.actor, invoice_id=invoice_id)
    except NotFound:
        raise Http404("No such invoice in this organization.") from None
    name = invoice.number or f"draft-{invoice.period}-{invoice.pk}"
    return _pdf_response(data, f"{name}.pdf")


# --- credit notes ------------------------------------------------------------------------


@org_view(MANAGE)
def credit_note_create(request, invoice_id: int):
    invoice = _invoice(request, invoice_id)
    lines = selectors.invoice_lines(invoice=invoice)
    form = CreditNoteForm(request.POST or None, invoice=invoice, lines=lines)
    if request.method == "POST" and form.is_valid():
        try:
            note = services.credit_note_create(
                invoice_id=invoice.pk, actor=request.actor, **form.service_kwargs()
            )
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Credit note {note.number} issued.")
            return _detail(invoice)
    return render(
        request,
        "invoicing/credit_note_form.html",
        {"invoice": invoice, "form": form, "remaining": invoice.total - invoice.credited},
    )


@org_view(MANAGE)
def incident_credit(request, invoice_id: int):
    """Credit every call of an incident (node, window, status class) at once."""
    actor = request.actor
    invoice = _invoice(request, invoice_id)
    form = IncidentCreditForm(
        request.POST or None,
        nodes=selectors.incident_nodes(actor=actor),
        timezone_name=actor.organization.timezone,
    )
    if request.method == "POST" and form.is_valid():
        try:
            note = services.credit_note_for_incident(
                invoice_id=invoice.pk, actor=actor, **form.service_kwargs()
            )
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            calls = sum(len(line.request_ids or []) for line in note.lines.all())
            messages.success(request, f"Credit note {note.number} issued for {calls} calls.")
            return _detail(invoice)
    return render(request, "invoicing/incident_credit.html", {"invoice": invoice, "form": form})


@require_GET
@org_view(VIEW)
def credit_note_pdf(request, credit_note_id: int):
    from invoicing.pdf import credit_note_pdf as render_pdf

    try:
        note = selectors.credit_note_get(actor=request.actor, credit_note_id=credit_note_id)
    except NotFound:
        raise Http404("No such credit note in this organization.") from None
    return _pdf_response(render_pdf(note), f"{note.number}.pdf")


# --- balance, ledger and settings --------------------------------------------------------

LEDGER_PAGE = 50


def _ledger_page(request):
    """One page of the ledger, newest first, by keyset (``before`` = an entry
    id): the ledger grows with every ingest batch, so no COUNT, no OFFSET."""
    qs = selectors.ledger_entries(actor=request.actor)
    before = selectors.parse_id(request.GET.get("before"))
    if before:
        anchor = qs.filter(pk=before).values_list("created_at", "id").first()
        if anchor:
            from django.db.models import Q

            qs = qs.filter(Q(created_at__lt=anchor[0]) | Q(created_at=anchor[0], id__lt=anchor[1]))
    rows = list(qs[: LEDGER_PAGE + 1])
    return rows[:LEDGER_PAGE], (rows[LEDGER_PAGE - 1].pk if len(rows) > LEDGER_PAGE else None)


def _render_balance(request, *, adjust_form=None, profile_form=None):
    actor = request.actor
    org = actor.organization
    profile = selectors.billing_profile_get(actor=actor)
    entries, older = _ledger_page(request)
    context = {
        "org": org,
        "balance": selectors.balance_get(actor=actor),
        "profile": profile,
        "entries": entries,
        "older": older,
        "first_page": not request.GET.get("before"),
        "may_manage": actor.can(MANAGE),
        "adjust_form": adjust_form or AdjustmentForm(currency=org.currency),
        "profile_form": profile_form
        or BillingProfileForm(
            initial=BillingProfileForm.initial_for(profile), currency=org.currency
        ),
        "exports": [exports.EXPORTS["ledger"]],
    }
    return render(request, "invoicing/balance.html", context)


@require_GET
@org_view(VIEW)
def balance(request):
    return _render_balance(request)


@require_POST
@org_view(MANAGE)
def balance_adjust(request):
    actor = request.actor
    form = AdjustmentForm(request.POST, currency=actor.organization.currency)
    if form.is_valid():
        try:
            entry = services.prepaid_adjust(actor=actor, **form.service_kwargs())
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"{entry.get_kind_display()} recorded.")
            return redirect("invoicing:balance")
    return _render_balance(request, adjust_form=form)


@require_POST
@org_view(MANAGE)
def billing_settings(request):
    actor = request.actor
    form = BillingProfileForm(request.POST, currency=actor.organization.currency)
    if form.is_valid():
        try:
            services.billing_profile_update(actor=actor, **form.service_kwargs())
        except DomainError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, "Billing settings saved.")
            return redirect("invoicing:balance")
    return _render_balance(request, profile_form=form)


# --- top-ups ---------------------------------------------------------------------------------


def _stripe_enabled() -> bool:
    from invoicing import stripe_adapter

    return stripe_adapter.enabled()


def _stripe_js_context() -> dict:
    """What a page that runs Stripe.js needs: its URL and our publishable key."""
    from django.conf import settings

    return {
        "stripe_js_url": settings.STRIPE_JS_URL,
        "publishable_key": settings.STRIPE_PUBLISHABLE_KEY,
    }


def _card_on_file(actor):
    """(card, error message): the card on file, or why Stripe could not say."""
    from invoicing.stripe_adapter import StripeError

    try:
        return selectors.card_on_file(actor=actor), ""
    except StripeError as exc:
        return None, f"The card on file cannot be shown just now: {exc.message}"


def _fresh_key(form):
    """A bound form rendered again gets a new one-time token (the one it
    carried may name a payment already)."""
    import secrets

    form.data = form.data.copy()
    form.data["request_key"] = secrets.token_urlsafe(24)
    return form


@org_view(VIEW)
def topup(request):
    """Card top-ups charge the card on file (Stripe on); a bank transfer
    received is recorded by finance by hand (credited at once). Never a fake
    payment: a card top-up stays pending until Stripe says it succeeded."""
    actor = request.actor
    if request.method == "GET" and "payment" in request.GET:
        return _topup_status(request)
    currency = actor.organization.currency
    stripe_on = _stripe_enabled()
    form = CardTopUpForm(currency=currency)
    manual_form = ManualTopUpForm(currency=currency, prefix="manual")
    payment = None
    if request.method == "POST":
        if not actor.can(MANAGE):
            return render(
                request, "403.html", {"reason": "Your role cannot top up the balance."}, status=403
            )
        if request.POST.get("action") == "manual":
            manual_form = ManualTopUpForm(request.POST, currency=currency, prefix="manual")
            recorded = _topup_manual(request, manual_form)
            if recorded is not None:
                return recorded
        elif not stripe_on:
            messages.error(request, "Card top-ups are off; record a bank transfer instead.")
            return redirect("invoicing:topup")
        else:
            posted = CardTopUpForm(request.POST, currency=currency)
            payment = _topup_card(request, posted)
            if payment is None:
                form = _fresh_key(posted)
            else:
                _with_micro(payment, "amount_minor")
    card, card_error = _card_on_file(actor) if stripe_on and actor.can(MANAGE) else (None, "")
    context = {
        "form": form,
        "manual_form": manual_form,
        "stripe_on": stripe_on,
        "payment": payment,
        "card": card,
        "card_error": card_error,
        "balance": selectors.balance_get(actor=actor),
        "recent": [
            _with_micro(p, "amount_minor")
            for p in selectors.payment_list(actor=actor, kind=PaymentKind.TOP_UP)[:20]
        ],
        "may_manage": actor.can(MANAGE),
        "prepaid": actor.organization.billing_mode == "prepaid",
    }
    if payment is not None and getattr(payment, "requires_action", False):
        context.update(_stripe_js_context(), client_secret=payment.client_secret)
    return render(request, "invoicing/topup.html", context)


def _topup_status(request):
    """One top-up's status (the htmx poll on the top-up page, every few
    seconds while it is pending); another organization's is not found."""
    payment_id = selectors.parse_id(request.GET.get("payment"))
    payment = (
        selectors.payment_list(actor=request.actor, kind=PaymentKind.TOP_UP)
        .filter(pk=payment_id)
        .first()
        if payment_id
        else None
    )
    if payment is None:
        raise Http404("No such top-up in this organization.")
    context = {"payment": payment}
    if request.htmx:  # the page's balance follows the poll
        context["oob_balance"] = selectors.balance_get(actor=request.actor)
    return render(request, "invoicing/_topup_status.html", context)


def _topup_card(request, form):
    """A card top-up charged to the card on file (``topup_charge_card``), or
    None with the form's errors."""
    from invoicing.stripe_adapter import StripeUnavailable

    if not form.is_valid():
        return None
    try:
        payment = services.topup_charge_card(
            actor=request.actor,
            amount_minor=form.cleaned_data["amount"],
            request_key=form.cleaned_data.get("request_key") or "",
        )
    except StripeUnavailable as exc:
        form.add_error(None, f"{exc.message} Nothing was charged; try again in a moment.")
        return None
    except DomainError as exc:
        apply_errors(form, exc)
        return None
    if getattr(payment, "duplicate", False):
        messages.info(request, "This top-up was submitted already; it was charged once.")
    elif payment.status == "failed":
        messages.error(request, f"The card was not charged: {payment.failure_message}")
    return payment


def _topup_manual(request, form):
    """Record a bank transfer received; a redirect, or None with the form's errors."""
    if not form.is_valid():
        return None
    try:
        from invoicing.services.topups import topup_record_manual
    except ImportError:
        form.add_error(None, "Record the transfer as a grant on the balance page.")
        return None
    try:
        payment = topup_record_manual(
            actor=request.actor,
            amount_minor=form.cleaned_data["amount"],
            reference=form.cleaned_data["reference"],
        )
    except DomainError as exc:
        apply_errors(form, exc)
        return None
    messages.success(request, f"Bank transfer {payment.reference} recorded; the balance rose.")
    return redirect("invoicing:topup")


# --- the card on file --------------------------------------------------------------------------


@org_view(VIEW)
def payment_method(request):
    """The card on file (brand, last 4, expiry). Billing managers add one
    (a SetupIntent confirmed on the page by Stripe.js, then checked here
    with Stripe), replace it or remove it."""
    actor = request.actor
    stripe_on = _stripe_enabled()
    setup = None
    if request.method == "POST":
        if not actor.can(MANAGE):
            return render(
                request, "403.html", {"reason": "Your role cannot change the card."}, status=403
            )
        if not stripe_on:
            messages.error(request, "Card payments are not set up; pay by bank transfer.")
            return redirect("invoicing:payment_method")
        action = request.POST.get("action")
        try:
            if action == "start":
                setup = services.card_setup_start(actor=actor)
            elif action == "confirm":
                return _card_confirmed(request)
            elif action == "remove":
                removed = services.card_remove(actor=actor)
                messages.success(
                    request, "Card removed." if removed else "There was no card on file."
                )
                return redirect("invoicing:payment_method")
            else:
                messages.error(request, "Unknown action.")
                return redirect("invoicing:payment_method")
        except DomainError as exc:
            messages.error(request, exc.message)
            return redirect("invoicing:payment_method")
    card, card_error = _card_on_file(actor) if stripe_on else (None, "")
    context = {
        "stripe_on": stripe_on,
        "card": card,
        "card_error": card_error,
        "setup": setup,
        "may_manage": actor.can(MANAGE),
    }
    if setup is not None:
        context.update(_stripe_js_context(), client_secret=setup.client_secret)
    return render(request, "invoicing/payment_method.html", context)


def _card_confirmed(request):
    """The page's Stripe.js confirmed a SetupIntent: Stripe is asked, not the page."""
    try:
        outcome = services.card_setup_complete(
            actor=request.actor, setup_intent_id=request.POST.get("setup_intent", "")
        )
    except NotFound:
        raise Http404("No such card setup in this organization.") from None
    except DomainError as exc:
        messages.error(request, f"The card was not saved: {exc.message}")
        return redirect("invoicing:payment_method")
    if outcome in ("succeeded", "already_succeeded"):
        messages.success(request, "Card saved: invoices and top-ups are charged to it.")
    elif outcome == "superseded":
        messages.info(request, "A card saved since is the one on file.")
    else:
        messages.info(request, f"The card is not confirmed yet (Stripe says {outcome}).")
    return redirect("invoicing:payment_method")


# --- CSV exports -------------------------------------------------------------------------------


def export_view(name: str):
    export = exports.EXPORTS[name]

    @require_GET
    @org_view(VIEW)
    def view(request):
        actor = request.actor
        form = PeriodStatusForm(request.GET, statuses=export.statuses, label=export.status_label)
        if not form.is_valid():
            return render(
                request,
                "invoicing/export_error.html",
                {"form": form, "export": export},
                status=400,
            )
        filters = exports.ExportFilters(
            period=form.cleaned_data["period"] or None, status=form.cleaned_data["status"] or None
        )
        response = StreamingHttpResponse(
            exports.csv_lines(
                export=export,
                actor=actor,
                filters=filters,
                tzinfo=org_zone(actor.organization.timezone),
            ),
            content_type="text/csv; charset=utf-8",
        )
        filename = exports.csv_filename(
            export=export, org_slug=actor.organization.slug, filters=filters
        )
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        response["Cache-Control"] = "no-store"
        return response

    view.__name__ = f"export_{name.replace('-', '_')}"
    return view

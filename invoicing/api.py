"""REST API for invoicing (``/api/v1/``): invoices and their actions, credit
notes, the ledger and the balance.

Same authentication, permissions and error shape as the rest of the API:
reads need ``Perm.BILLING_VIEW`` (finance, owners, admins), writes go
through ``invoicing.services`` (which check ``Perm.BILLING_MANAGE``);
querysets come from ``invoicing.selectors``, scoped to the caller's
organization, so another organization's ids are 404. A bad filter is a 400
naming the field. Lists are cursor-paginated on (created_at, id)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, permissions, status
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.facade import IsOrgMember, OrgViewSet, ValidationFailed
from invoicing import selectors, services
from invoicing.forms.lists import PeriodStatusForm
from invoicing.models import CreditNote, Invoice, InvoiceStatus, LedgerEntry, LedgerKind
from invoicing.serializers import (
    BalanceSerializer,
    CreditNoteInput,
    CreditNoteSerializer,
    InvoiceDetailSerializer,
    InvoiceSerializer,
    LedgerEntrySerializer,
    PaymentInput,
    PaymentSerializer,
    ReasonInput,
)
from invoicing.services._common import period_bounds

PERIOD = OpenApiParameter(
    "period",
    {"type": "string", "pattern": r"^2[0-9]{3}-(0[1-9]|1[0-2])$"},
    description="Month, YYYY-MM (2000 to 2999)",
)


def _filters(request, statuses, label="status", name="status") -> tuple[str | None, str | None]:
    data = request.query_params.copy()
    if name != "status" and name in data:
        data["status"] = data.pop(name)[-1]
    form = PeriodStatusForm(data, statuses=statuses, label=label)
    if not form.is_valid():
        fields = form.error_fields()
        if name != "status" and "status" in fields:
            fields[name] = fields.pop("status")
        raise ValidationFailed.from_fields(fields)
    return form.cleaned_data["period"] or None, form.cleaned_data["status"] or None


class BillingViewSet(OrgViewSet):
    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        selectors.require_billing_view(self.actor)


@extend_schema(
    parameters=[
        PERIOD,
        OpenApiParameter("status", str, enum=InvoiceStatus.values, description="Invoice status"),
    ]
)
class InvoiceViewSet(BillingViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = Invoice.objects.none()  # for the schema; get_queryset scopes
    serializer_class = InvoiceSerializer

    def get_serializer_class(self):
        return InvoiceSerializer if self.action == "list" else InvoiceDetailSerializer

    def get_queryset(self):
        if self.action == "list":
            period, status_ = _filters(self.request, tuple(InvoiceStatus))
            return selectors.invoice_list(actor=self.actor, period=period, status=status_)
        return selectors.invoice_list(actor=self.actor).prefetch_related(
            "lines", "credit_notes", "payments"
        )

    def _detail(self, invoice, code=status.HTTP_200_OK):
        invoice = self.get_queryset().get(pk=invoice.pk)
        return Response(InvoiceDetailSerializer(invoice).data, status=code)

    @extend_schema(request=None, responses=InvoiceDetailSerializer)
    @action(detail=True, methods=["post"])
    def refresh(self, request, pk=None):
        invoice = services.invoice_refresh(invoice_id=self.get_object().pk, actor=self.actor)
        return self._detail(invoice)

    @extend_schema(request=None, responses=InvoiceDetailSerializer)
    @action(detail=True, methods=["post"])
    def finalize(self, request, pk=None):
        invoice = self.get_object()  # the service refuses an open month (409 period_open)
        invoice = services.invoice_finalize(invoice_id=invoice.pk, actor=self.actor)
        return self._detail(invoice)

    @extend_schema(request=ReasonInput, responses=InvoiceDetailSerializer)
    @action(detail=True, methods=["post"])
    def void(self, request, pk=None):
        invoice = self.get_object()
        data = self._input(ReasonInput, request.data)
        invoice = services.invoice_void(invoice_id=invoice.pk, actor=self.actor, **data)
        return self._detail(invoice)

    @extend_schema(request=ReasonInput, responses=InvoiceDetailSerializer)
    @action(detail=True, methods=["post"], url_path="mark-uncollectible")
    def mark_uncollectible(self, request, pk=None):
        invoice = self.get_object()
        data = self._input(ReasonInput, request.data)
        invoice = services.invoice_mark_uncollectible(
            invoice_id=invoice.pk, actor=self.actor, **data
        )
        return self._detail(invoice)

    @extend_schema(request=PaymentInput, responses={201: PaymentSerializer})
    @action(detail=True, methods=["post"])
    def payments(self, request, pk=None):
        """Record a payment received by hand (bank transfer or other). A
        reference already recorded in the organization is a 400 on
        ``reference`` saying what it was recorded for."""
        invoice = self.get_object()
        data = self._input(PaymentInput, request.data)
        payment = services.invoice_mark_paid(
            invoice_id=invoice.pk,
            actor=self.actor,
            reference=data["reference"],
            method=data["method"],
            amount_minor=data.get("amount_minor"),
            paid_on=data.get("paid_on"),
        )
        return Response(PaymentSerializer(payment).data, status=status.HTTP_201_CREATED)


@extend_schema(
    parameters=[
        PERIOD,
        OpenApiParameter(
            "invoice",
            {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
            description="Only this invoice's credit notes",
        ),
    ]
)
class CreditNoteViewSet(BillingViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    queryset = CreditNote.objects.none()  # for the schema; get_queryset scopes
    serializer_class = CreditNoteSerializer

    def get_queryset(self):
        if self.action != "list":
            return selectors.credit_note_list(actor=self.actor).prefetch_related("lines")
        period, _ = _filters(self.request, ())
        invoice = self.request.query_params.get("invoice")
        invoice_id = None
        if invoice not in (None, ""):
            invoice_id = selectors.parse_id(invoice)
            if invoice_id is None:
                raise ValidationFailed.from_fields({"invoice": "An invoice id is a number."})
        return selectors.credit_note_list(
            actor=self.actor, invoice_id=invoice_id, period=period
        ).prefetch_related("lines")

    @extend_schema(request=CreditNoteInput, responses={201: CreditNoteSerializer})
    def create(self, request):
        data = self._input(CreditNoteInput, request.data)
        invoice_id = data.pop("invoice")
        if not selectors.invoice_list(actor=self.actor).filter(pk=invoice_id).exists():
            raise ValidationFailed.from_fields({"invoice": "No such invoice in this organization."})
        kwargs = {"reason": data["reason"]}
        if data.get("full"):
            kwargs["full"] = True
        elif "amount" in data:
            kwargs["amount"] = data["amount"]
        else:
            kwargs["line_amounts"] = data["lines"]
        note = services.credit_note_create(invoice_id=invoice_id, actor=self.actor, **kwargs)
        note = selectors.credit_note_get(actor=self.actor, credit_note_id=note.pk)
        return Response(CreditNoteSerializer(note).data, status=status.HTTP_201_CREATED)


@extend_schema(
    parameters=[
        OpenApiParameter("kind", str, enum=LedgerKind.values, description="Entry kind"),
        PERIOD,
    ]
)
class LedgerEntryViewSet(BillingViewSet, mixins.ListModelMixin):
    queryset = LedgerEntry.objects.none()  # for the schema; get_queryset scopes
    serializer_class = LedgerEntrySerializer

    def get_queryset(self):
        period, kind = _filters(self.request, tuple(LedgerKind), "kind", name="kind")
        since = until = None
        if period:
            since, until = period_bounds(period, self.actor.organization.timezone)
        return selectors.ledger_entries(actor=self.actor, kind=kind, since=since, until=until)


class BalanceView(APIView):
    permission_classes = (permissions.IsAuthenticated, IsOrgMember)

    @extend_schema(responses=BalanceSerializer, operation_id="balance_retrieve")
    def get(self, request):
        actor = request._request.actor
        profile = selectors.billing_profile_get(actor=actor)
        org = actor.organization
        return Response(
            BalanceSerializer(
                {
                    "balance": selectors.balance_get(actor=actor),
                    "currency": org.currency,
                    "low_balance_threshold": profile.low_balance_threshold,
                    "billing_mode": org.billing_mode,
                }
            ).data
        )

"""Shapes of the invoicing API. Money is integer: micro-units of ``currency``
for amounts computed from calls (``subtotal``, ``total``, line amounts,
ledger entries), the currency's minor unit (cents) in ``*_minor`` fields
(what is due, paid and credited), exactly as stored."""

from __future__ import annotations

from rest_framework import serializers

from invoicing.models import CreditNote, CreditNoteLine, Invoice, InvoiceLine, LedgerEntry, Payment

MAX_INT = 2**63 - 1  # what a 64-bit column holds

INVOICE_FIELDS = (
    "id", "number", "period", "period_start", "period_end", "status", "currency", "calls",
    "usage_amount", "adjustment_amount", "subtotal", "discount_ppm", "discount_amount",
    "tax_rate_ppm", "tax_amount", "total", "credits_applied", "amount_due_initial_minor",
    "credited", "credited_minor", "paid_minor", "amount_due_minor", "issued_at", "due_at",
    "paid_at", "voided_at", "created_at",
)  # fmt: skip


class InvoiceLineSerializer(serializers.ModelSerializer):
    unit_price_per_mtok = serializers.IntegerField(
        allow_null=True, help_text="micro-units per million tokens"
    )
    amount = serializers.IntegerField(help_text="micro-units")

    class Meta:
        model = InvoiceLine
        fields = (
            "id", "position", "kind", "description", "model", "token_class", "quantity",
            "unit_price_per_mtok", "amount",
        )  # fmt: skip
        read_only_fields = fields


class InvoiceSerializer(serializers.ModelSerializer):
    # A plain string in the schema: an enum named "status" would collide with
    # the sub-accounts' and get a hashed name.
    status = serializers.CharField(
        read_only=True, help_text="draft, finalized, paid, void or uncollectible"
    )
    amount_due_minor = serializers.IntegerField(
        read_only=True, help_text="still to pay, minor units"
    )

    class Meta:
        model = Invoice
        fields: tuple[str, ...] = INVOICE_FIELDS
        read_only_fields = fields


class CreditNoteBrief(serializers.ModelSerializer):
    class Meta:
        model = CreditNote
        fields = ("id", "number", "amount", "amount_minor", "effect", "reason", "created_at")
        read_only_fields = fields


class PaymentSerializer(serializers.ModelSerializer):
    status = serializers.CharField(
        read_only=True, help_text="pending, succeeded, failed or disputed"
    )

    class Meta:
        model = Payment
        fields = (
            "id", "kind", "method", "status", "currency", "amount_minor", "reference",
            "paid_on", "failure_message", "created_at",
        )  # fmt: skip
        read_only_fields = fields


class InvoiceDetailSerializer(InvoiceSerializer):
    lines = InvoiceLineSerializer(many=True, read_only=True)
    credit_notes = CreditNoteBrief(many=True, read_only=True)
    payments = PaymentSerializer(many=True, read_only=True)
    buyer = serializers.JSONField(read_only=True)

    class Meta(InvoiceSerializer.Meta):
        fields = (*INVOICE_FIELDS, "buyer", "lines", "credit_notes", "payments")
        read_only_fields = fields


class CreditNoteLineSerializer(serializers.ModelSerializer):
    class Meta:
        model = CreditNoteLine
        fields = ("id", "invoice_line", "description", "amount", "request_ids")
        read_only_fields = fields


class CreditNoteSerializer(serializers.ModelSerializer):
    invoice_number = serializers.CharField(source="invoice.number", read_only=True)
    lines = CreditNoteLineSerializer(many=True, read_only=True)

    class Meta:
        model = CreditNote
        fields = (
            "id", "number", "invoice", "invoice_number", "currency", "amount", "amount_minor",
            "due_reduction_minor", "refund_minor", "effect", "reason", "created_at", "lines",
        )  # fmt: skip
        read_only_fields = fields


class CreditNoteInput(serializers.Serializer):
    """Exactly one of ``full``, ``amount`` (gross micro-units) or ``lines``
    ({invoice line id: net micro-units})."""

    invoice = serializers.IntegerField(min_value=1, max_value=MAX_INT)
    reason = serializers.CharField(max_length=500)
    full = serializers.BooleanField(required=False, default=False)
    amount = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_INT, help_text="micro-units"
    )
    lines = serializers.DictField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_INT),
        required=False,
        allow_empty=False,
    )

    def validate_lines(self, value):
        out = {}
        for key, amount in value.items():
            if not str(key).isdigit() or int(key) > MAX_INT:
                raise serializers.ValidationError(f"{key!r} is not an invoice line id.")
            out[int(key)] = amount
        return out

    def validate(self, data):
        given = [k for k in ("amount", "lines") if k in data] + (["full"] if data["full"] else [])
        if len(given) != 1:
            raise serializers.ValidationError(
                {"non_field_errors": ["Give exactly one of full, amount or lines."]}
            )
        return data


class ReasonInput(serializers.Serializer):
    reason = serializers.CharField(max_length=500)


class PaymentInput(serializers.Serializer):
    reference = serializers.CharField(max_length=128)
    method = serializers.ChoiceField(choices=["bank_transfer", "other"], default="bank_transfer")
    amount_minor = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_INT,
        help_text="minor units; omitted: everything due",
    )
    paid_on = serializers.DateField(
        required=False,
        help_text="the day the money arrived (YYYY-MM-DD); omitted: today in the "
        "organization's time zone",
    )


class LedgerEntrySerializer(serializers.ModelSerializer):
    amount = serializers.IntegerField(help_text="signed micro-units")

    class Meta:
        model = LedgerEntry
        fields = ("id", "kind", "amount", "currency", "reference", "reason", "created_at")
        read_only_fields = fields


class BalanceSerializer(serializers.Serializer):
    balance = serializers.IntegerField(help_text="micro-units: the sum of the ledger")
    currency = serializers.CharField()
    low_balance_threshold = serializers.IntegerField(allow_null=True)
    billing_mode = serializers.CharField()

from django.urls import path

from invoicing import exports, views
from invoicing.views import sla

app_name = "invoicing"

urlpatterns = [
    path("billing/", views.invoice_list, name="invoices"),
    path("billing/invoices/", views.invoice_list, name="invoice_list"),
    path("billing/invoices/<int:invoice_id>/", views.invoice_detail, name="invoice_detail"),
    path(
        "billing/invoices/<int:invoice_id>/refresh/", views.invoice_refresh, name="invoice_refresh"
    ),
    path(
        "billing/invoices/<int:invoice_id>/finalize/",
        views.invoice_finalize,
        name="invoice_finalize",
    ),
    path("billing/invoices/<int:invoice_id>/void/", views.invoice_void, name="invoice_void"),
    path(
        "billing/invoices/<int:invoice_id>/uncollectible/",
        views.invoice_uncollectible,
        name="invoice_uncollectible",
    ),
    path(
        "billing/invoices/<int:invoice_id>/payment/", views.invoice_payment, name="invoice_payment"
    ),
    path("billing/invoices/<int:invoice_id>/pay/", views.invoice_pay, name="invoice_pay"),
    path("billing/invoices/<int:invoice_id>/print/", views.invoice_print, name="invoice_print"),
    path("billing/invoices/<int:invoice_id>/pdf", views.invoice_pdf, name="invoice_pdf"),
    path(
        "billing/invoices/<int:invoice_id>/credit-notes/new/",
        views.credit_note_create,
        name="credit_note_create",
    ),
    path(
        "billing/invoices/<int:invoice_id>/incident-credit/",
        views.incident_credit,
        name="incident_credit",
    ),
    path(
        "billing/credit-notes/<int:credit_note_id>/pdf",
        views.credit_note_pdf,
        name="credit_note_pdf",
    ),
    path(
        "billing/refunds/<int:payment_id>/mark-paid/",
        views.refund_mark_paid,
        name="refund_mark_paid",
    ),
    path("billing/sla/", sla.sla_page, name="sla"),
    path("billing/sla/failed-calls.csv", sla.sla_failed_calls, name="sla_failed_calls"),
    path("billing/sla/decide/", sla.sla_decide, name="sla_decide"),
    path("billing/sla/evaluate/", sla.sla_staff_evaluate, name="sla_staff_evaluate"),
    path("billing/sla/target/", sla.sla_staff_target, name="sla_staff_target"),
    path("billing/balance/", views.balance, name="balance"),
    path("billing/balance/adjust/", views.balance_adjust, name="balance_adjust"),
    path("billing/settings/", views.billing_settings, name="billing_settings"),
    path("billing/top-up/", views.topup, name="topup"),
    path("billing/payment-method/", views.payment_method, name="payment_method"),
    *[
        path(
            f"billing/exports/{export.name}.csv",
            views.export_view(export.name),
            name=export.url_name.removeprefix("invoicing:"),
        )
        for export in exports.EXPORTS.values()
    ],
]

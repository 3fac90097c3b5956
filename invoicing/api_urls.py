from django.urls import path
from rest_framework.routers import SimpleRouter

from invoicing import api

router = SimpleRouter()
router.include_format_suffixes = False
router.register("invoices", api.InvoiceViewSet, basename="invoice")
router.register("credit-notes", api.CreditNoteViewSet, basename="credit-note")
router.register("ledger", api.LedgerEntryViewSet, basename="ledger-entry")

urlpatterns = [
    path("balance/", api.BalanceView.as_view(), name="balance"),
    *router.urls,
]

from django.apps import AppConfig

from console.kernel import hooks


class InvoicingConfig(AppConfig):
    name = "invoicing"
    verbose_name = "Invoicing"

    def ready(self) -> None:
        # Cross-app reactions (console.kernel.hooks): usage ingest's totals debit the
        # prepaid ledger; the gateway asks for the prepaid balance.
        # deferred: imports models, not loadable before the app registry is ready
        from invoicing.selectors import prepaid_balance

        # deferred: imports models, not loadable before the app registry is ready
        from invoicing.services.ledger import ledger_usage_debit

        hooks.CALLS_INGESTED.connect(ledger_usage_debit)
        hooks.PREPAID_BALANCE.provide(prepaid_balance)

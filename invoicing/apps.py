from django.apps import AppConfig


class InvoicingConfig(AppConfig):
    name = "invoicing"
    verbose_name = "Invoicing"

    def ready(self) -> None:
        # Cross-app reactions (console.kernel.hooks): usage ingest's totals debit the
        # prepaid ledger; the gateway asks for the prepaid balance.
        from console.kernel import hooks
        from invoicing.selectors import prepaid_balance
        from invoicing.services.ledger import ledger_usage_debit

        hooks.connect(hooks.CALLS_INGESTED, ledger_usage_debit)
        hooks.provide(hooks.PREPAID_BALANCE, prepaid_balance)

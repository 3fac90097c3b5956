from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "usage"
    verbose_name = "Usage"

    def ready(self) -> None:
        # Ingest caches prices, organizations and keys; drop them in this
        # process as soon as one changes (other workers follow within the TTL).
        from django.db.models.signals import post_delete, post_save

        from accounts.facade import ApiKey, Organization
        from console.kernel import hooks
        from usage.catalog import catalogue_entries
        from usage.ingest.directory import invalidate_directory
        from usage.models import Price
        from usage.prices import invalidate_price_book
        from usage.spend import key_spend

        hooks.KEY_SPEND.provide(key_spend)
        hooks.MODEL_CATALOGUE.provide(catalogue_entries)

        for sender in (Organization, ApiKey):
            post_save.connect(
                invalidate_directory, sender=sender, dispatch_uid=f"usage-dir-{sender}"
            )
            post_delete.connect(
                invalidate_directory, sender=sender, dispatch_uid=f"usage-dir-del-{sender}"
            )
        post_save.connect(invalidate_price_book, sender=Price, dispatch_uid="usage-prices")
        post_delete.connect(invalidate_price_book, sender=Price, dispatch_uid="usage-prices-del")

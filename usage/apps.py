from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save

from console.kernel import hooks


class UsageConfig(AppConfig):
    name = "usage"
    verbose_name = "Usage"

    def ready(self) -> None:
        # Ingest caches prices, organizations and keys; drop them in this
        # process as soon as one changes (other workers follow within the TTL).
        # deferred, each of these: they import models, and the app registry is
        # not ready while the app configs are imported
        from accounts.facade import ApiKey, Organization  # deferred: models (see above)
        from usage.catalog import catalogue_entries  # deferred: models (see above)
        from usage.ingest.directory import invalidate_directory  # deferred: models
        from usage.models import Price  # deferred: models (see above)
        from usage.prices import invalidate_price_book  # deferred: models (see above)
        from usage.spend import key_spend  # deferred: models (see above)

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

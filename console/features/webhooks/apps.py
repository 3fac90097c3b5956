from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "console.features.webhooks"
    label = "webhooks"
    verbose_name = "Outbound webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # deferred: services imports the models, not loadable before the app registry is
        from console.features.webhooks.services import outbound_event_record
        from console.kernel import hooks  # deferred with it: the receiver's signal

        hooks.OUTBOUND_EVENT.connect(outbound_event_record)

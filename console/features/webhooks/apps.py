from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "console.features.webhooks"
    label = "webhooks"
    verbose_name = "Outbound webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from console.features.webhooks.services import outbound_event_record
        from console.kernel import hooks

        hooks.OUTBOUND_EVENT.connect(outbound_event_record)

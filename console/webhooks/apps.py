from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "console.webhooks"
    label = "webhooks"
    verbose_name = "Outbound webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from console import hooks
        from console.webhooks.services import outbound_event_record

        hooks.connect(hooks.OUTBOUND_EVENT, outbound_event_record)

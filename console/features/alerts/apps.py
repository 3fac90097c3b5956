from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "console.features.alerts"
    label = "alerts"
    default_auto_field = "django.db.models.BigAutoField"
    verbose_name = "Alerts"

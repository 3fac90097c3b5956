from django.apps import AppConfig


class CapacityConfig(AppConfig):
    name = "console.features.capacity"
    label = "capacity"
    verbose_name = "Capacity planning"
    default_auto_field = "django.db.models.BigAutoField"

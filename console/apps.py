from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        # The Celery app, loaded in every Django process so ``shared_task`` binds
        # to it (``celery -A console`` finds ``console.kernel.celery`` by itself). Not in
        # ``console/__init__``: the simulator imports ``console.kernel.tokens`` without
        # paying for Celery. Here, not at module level: the app registry must be
        # ready before the apps' tasks are registered (services enqueue by name).
        from console.kernel import celery, observability, redact

        redact.install()  # before anything can log a secret
        observability.setup()  # Sentry and span export, when configured (issue 20)
        celery.register_tasks()

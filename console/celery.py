"""The Celery application. Broker and options come from Django settings
(``CELERY_*``); with no broker configured it is kombu's filesystem transport
under ``var/broker`` — a real broker that needs no server process.

Services enqueue work by task name (``registered_task("invoicing.collect_invoice")
.delay(...)``), never by importing their app's ``tasks`` module: tasks import
services, services never import tasks, so the two never form a cycle. Every
Django process registers every app's tasks when it starts
(``ConsoleConfig.ready`` runs ``register_tasks``).

Beat runs ``console.beat_lock.LockedScheduler`` (``CELERY_BEAT_SCHEDULER``):
exactly one beat per deployment, a second one refuses to start."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def register_tasks() -> None:
    """Import every installed app's ``tasks`` module now (a worker does it on
    start; a web or gateway process would not until something imported one).
    Needs the app registry: call it from ``AppConfig.ready``."""
    app.autodiscover_tasks(force=True)


def registered_task(name: str):
    """The task registered as ``name`` (its ``name=`` in ``shared_task``), for a
    service to ``.delay`` or ``.apply_async`` without importing the tasks module."""
    return app.tasks[name]

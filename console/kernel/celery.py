"""The Celery application. Broker and options come from Django settings
(``CELERY_*``); with no broker configured it is kombu's filesystem transport
under ``var/broker`` — a real broker that needs no server process — made safe
by ``console.kernel.broker_fs`` (atomic writes, a quarantine for a bad message file),
installed here as kombu's ``filesystem`` transport for every process that uses
this app: the worker, beat, and the gateway's usage emitter.

Services enqueue work by task name (``registered_task("invoicing.collect_invoice")
.delay(...)``), never by importing their app's ``tasks`` module: tasks import
services, services never import tasks, so the two never form a cycle. Every
Django process registers every app's tasks when it starts
(``ConsoleConfig.ready`` runs ``register_tasks``).

Beat runs ``console.kernel.beat_lock.LockedScheduler`` (``CELERY_BEAT_SCHEDULER``):
exactly one beat per deployment, a second one refuses to start."""

import logging
import os
import time

from celery import Celery, signals

from console.kernel import broker_fs, logs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

# Before any connection resolves the "filesystem" transport (console.settings
# does it too, for a process that opens a kombu connection without this app).
broker_fs.install()

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Workers and beat log through Django's LOGGING (LOG_FORMAT), like the web and
# gateway processes: a receiver of setup_logging stops Celery from replacing
# the root logger's handlers with its own (console.kernel.logs).
signals.setup_logging.connect(logs.configure_worker_logging, weak=False)

# One line per task run (logger console.access.task): its id, name, state and time.
task_logger = logging.getLogger("console.access.task")
_task_started: dict[str, float] = {}


@signals.task_prerun.connect(weak=False)
def _task_prerun(task_id=None, **_kwargs) -> None:
    if task_id:
        _task_started[task_id] = time.perf_counter()


@signals.task_postrun.connect(weak=False)
def _task_postrun(task_id=None, task=None, state=None, **_kwargs) -> None:
    started = _task_started.pop(task_id, None)
    if started is None or not task_logger.isEnabledFor(logging.INFO):
        return
    name = getattr(task, "name", "?")
    task_logger.info(
        "task %s %s",
        name,
        state,
        extra={
            "task_id": task_id,
            "task_name": name,
            "state": state,
            "duration_ms": round((time.perf_counter() - started) * 1000, 2),
            "_in_message": ("task_name", "state"),
        },
    )


def register_tasks() -> None:
    """Import every installed app's ``tasks`` module now (a worker does it on
    start; a web or gateway process would not until something imported one).
    Needs the app registry: call it from ``AppConfig.ready``."""
    app.autodiscover_tasks(force=True)


def registered_task(name: str):
    """The task registered as ``name`` (its ``name=`` in ``shared_task``), for a
    service to ``.delay`` or ``.apply_async`` without importing the tasks module."""
    return app.tasks[name]

"""The Celery application. Broker and options come from Django settings
(``CELERY_*``); with no broker configured it is kombu's filesystem transport
under ``var/broker`` — a real broker that needs no server process."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

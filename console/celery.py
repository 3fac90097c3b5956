"""The entry point ``celery -A console`` finds (Celery looks up ``console.celery``):
the application itself lives in the kernel (``console.kernel.celery``), where the
apps below the project shell may use it (``registered_task``)."""

from console.kernel.celery import app

__all__ = ["app"]

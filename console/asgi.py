"""ASGI entry point: one port for the console, its API and (once mounted) the
gateway bridge. Django answers every path that no faster app claims."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_application = get_asgi_application()

application = django_application

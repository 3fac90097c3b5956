"""Django settings. Everything configurable comes from the environment through
``console.kernel.config``; with no environment at all the product runs embedded
(SQLite in ``var/``, a filesystem Celery broker, in-process caches).

The settings live in topic modules, assembled here in the order they are
evaluated (a later module reads an earlier one's values; billing and features add
their tasks to workers' CELERY_BEAT_SCHEDULE). DJANGO_SETTINGS_MODULE stays
``console.settings``.
"""

# In evaluation order, not sorted:
# isort: off
from console.settings.base import *  # noqa: F403
from console.settings.workers import *  # noqa: F403
from console.settings.billing import *  # noqa: F403
from console.settings.features import *  # noqa: F403
from console.settings.gateway import *  # noqa: F403
from console.settings.web import *  # noqa: F403
from console.settings.observability import *  # noqa: F403
# isort: on

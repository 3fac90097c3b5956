"""Collected static files: ``collectstatic`` when a source changed, not on every start.

The console's static files are served by WhiteNoise from ``STATIC_ROOT`` under
content-hashed names (``console.3f2a….css``), each with gzip and brotli
copies, so that a browser keeps them for a year and downloads the compressed
one (``CompressedManifestStaticFilesStorage``, see ``console/settings/web.py``).
Templates ask ``{% static %}`` for a file, which reads the hashed name from
the manifest that ``collectstatic`` writes: without a collected ``STATIC_ROOT``
no page renders.

Collecting takes a while (brotli at its best quality on plotly.js), so
:func:`collect_static` runs ``collectstatic`` only when what it would collect
changed: a fingerprint of every source file (its path, size and modification
time, and the storage settings) is kept beside the manifest. ``manage.py up``
and the test suite call it; a deployment runs ``collectstatic`` itself, or
this, before starting the web servers. A file lock keeps two processes from
collecting into the same folder at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command

FINGERPRINT_NAME = ".sources-fingerprint"


def sources_fingerprint() -> str:
    """What ``collectstatic`` would collect and how, as one digest."""
    entries = []
    for finder in finders.get_finders():
        for path, storage in finder.list(["CVS", ".*", "*~"]):
            prefix = getattr(storage, "prefix", None) or ""
            stat = os.stat(storage.path(path))
            entries.append((f"{prefix}/{path}" if prefix else path, stat.st_size, stat.st_mtime_ns))
    config = {
        "storage": settings.STORAGES["staticfiles"],
        "keep_only_hashed": getattr(settings, "WHITENOISE_KEEP_ONLY_HASHED_FILES", False),
        "static_url": settings.STATIC_URL,
    }
    blob = json.dumps([config, sorted(entries)], sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def collect_static() -> bool:
    """Run ``collectstatic`` into ``STATIC_ROOT`` unless it already holds
    exactly today's sources. True if it collected."""
    root = Path(settings.STATIC_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    marker = root / FINGERPRINT_NAME
    # Beside the folder, not in it: collectstatic --clear empties the folder.
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        want = sources_fingerprint()
        manifest = root / "staticfiles.json"
        if manifest.exists() and marker.exists() and marker.read_text().strip() == want:
            return False
        marker.unlink(missing_ok=True)
        call_command("collectstatic", interactive=False, clear=True, verbosity=0)
        marker.write_text(want + "\n")
        return True

"""What other apps may use of ``console.features.capacity``: its one public face.

Published: the models (a load test and its steps) and the services that
start, cancel and read them (scoped to the actor's organization), and the
knee detector. Nothing below the console's top imports it.
"""

from __future__ import annotations

from console.features.capacity.knee import find_knee
from console.features.capacity.models import Billing, LoadTest, LoadTestStep, Status
from console.features.capacity.services import (
    get_load_test,
    load_test_cancel,
    load_test_start,
    load_tests,
)

__all__ = [
    "Billing",
    "LoadTest",
    "LoadTestStep",
    "Status",
    "find_knee",
    "get_load_test",
    "load_test_cancel",
    "load_test_start",
    "load_tests",
]

"""What other apps may use of ``console.features.capacity``: its one public face,
plain functions only (no model: nothing outside the feature reads or writes a
load test's rows).

The feature is otherwise reached through its pages and API (``console.urls``
includes its URL modules) and its Celery queue. Published: the knee detector
``find_knee`` (the step where p99 latency rises while throughput stops growing),
a pure function of (throughput, p99) points.
"""

from __future__ import annotations

from console.features.capacity.knee import find_knee

__all__ = ["find_knee"]

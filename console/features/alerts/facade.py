"""What other parts of the console may use of ``console.features.alerts``: its one
public face, plain functions and data only (no model: nothing outside the feature
reads or writes its rows).

The feature is otherwise reached through its pages and API (``console.urls``
includes its URL modules) and beat's ``alerts.evaluate`` task; it sends what it
fires through ``console.kernel.hooks.OUTBOUND_EVENT``. Published: ``evaluate``
(one evaluation of every enabled rule, what that task runs every minute) and its
``EvaluationSummary`` (counts of rules, incidents fired and resolved, failures).
"""

from __future__ import annotations

from console.features.alerts.services import EvaluationSummary, evaluate

__all__ = ["EvaluationSummary", "evaluate"]

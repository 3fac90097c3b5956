"""What other parts of the console may use of ``console.features.alerts``: its one
public face. Published: the models (``AlertRule``, ``Incident``) with their
choices, and ``evaluate`` (one evaluation of every enabled rule, what beat's
``alerts.evaluate`` task runs every minute)."""

from __future__ import annotations

from console.features.alerts.models import AlertRule, Incident, Kind, Scope
from console.features.alerts.services import FIRED, RESOLVED, EvaluationSummary, evaluate

__all__ = [
    "FIRED",
    "RESOLVED",
    "AlertRule",
    "EvaluationSummary",
    "Incident",
    "Kind",
    "Scope",
    "evaluate",
]

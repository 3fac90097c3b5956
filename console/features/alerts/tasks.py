"""Beat's every-minute evaluation of the alert rules."""

from celery import shared_task

from console.features.alerts import services


@shared_task(name="alerts.evaluate", ignore_result=True)
def evaluate_alerts() -> dict:
    summary = services.evaluate()
    return {
        "rules": summary.rules,
        "fired": summary.fired,
        "resolved": summary.resolved,
        "failed": summary.failed,
    }

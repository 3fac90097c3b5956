from django.urls import path

from console.features.alerts import views

app_name = "alerts"

urlpatterns = [
    path("alerts/", views.rules, name="rules"),
    path("alerts/new/", views.rule_new, name="rule_new"),
    path("alerts/history/", views.history, name="history"),
    path("alerts/<int:rule_id>/", views.rule_edit, name="rule_edit"),
    path("alerts/<int:rule_id>/delete/", views.rule_delete, name="rule_delete"),
]

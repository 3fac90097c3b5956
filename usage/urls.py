from django.urls import path

from usage import views

app_name = "usage"

urlpatterns = [
    path("usage/calls/", views.call_list, name="calls"),
    path("usage/calls/tail/", views.call_tail, name="calls_tail"),
    path("usage/calls/export.csv", views.call_export, name="calls_export"),
    path("usage/calls/<str:request_id>/", views.call_detail, name="call_detail"),
    path("usage/models/", views.model_list, name="models"),
]

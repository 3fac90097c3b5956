from django.urls import path

from usage import api

urlpatterns = [
    path("calls/", api.CallListView.as_view(), name="call-list"),
    # Before the detail route, which would otherwise take "export.csv" as an id.
    path("calls/export.csv", api.CallExportView.as_view(), name="call-export"),
    path("calls/<str:request_id>/", api.CallDetailView.as_view(), name="call-detail"),
    path("spend/attribution/", api.SpendAttributionView.as_view(), name="spend-attribution"),
]

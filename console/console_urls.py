from django.urls import path

from console import views

app_name = "console"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("livez", views.livez, name="livez"),
    path("healthz", views.health, name="health"),
    path("readyz", views.readyz, name="readyz"),
]

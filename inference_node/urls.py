from django.urls import path  # noqa: F401

app_name = "inference_node"

urlpatterns: list = []

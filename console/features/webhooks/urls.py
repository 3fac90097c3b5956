from django.urls import path

from console.features.webhooks import views

app_name = "webhooks"

urlpatterns = [
    path("webhooks/", views.destination_list, name="destinations"),
    path("webhooks/new/", views.destination_create, name="destination_create"),
    path("webhooks/<int:destination_id>/", views.destination_edit, name="destination_edit"),
    path(
        "webhooks/<int:destination_id>/delete/",
        views.destination_delete,
        name="destination_delete",
    ),
    path(
        "webhooks/<int:destination_id>/rotate-secret/",
        views.destination_rotate,
        name="destination_rotate",
    ),
    path("webhooks/<int:destination_id>/test/", views.destination_test, name="destination_test"),
    path("webhooks/deliveries/", views.delivery_list, name="deliveries"),
    path(
        "webhooks/deliveries/<int:delivery_id>/replay/",
        views.delivery_replay,
        name="delivery_replay",
    ),
]

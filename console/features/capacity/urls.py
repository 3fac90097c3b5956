from django.urls import path

from console.features.capacity import views

app_name = "capacity"

urlpatterns = [
    path("capacity/", views.load_test_list, name="list"),
    path("capacity/<int:load_test_id>/", views.load_test_detail, name="detail"),
    path("capacity/<int:load_test_id>/progress/", views.load_test_progress, name="progress"),
    path("capacity/<int:load_test_id>/cancel/", views.load_test_cancel, name="cancel"),
]

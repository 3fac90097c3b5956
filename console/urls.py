from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("console.console_urls")),
    path("", include("accounts.urls")),
    path("api/v1/", include("accounts.api_urls")),
    path("django-admin/", admin.site.urls),
]

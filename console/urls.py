from django.contrib import admin
from django.urls import include, path

# An unmatched /api/v1/ path answers JSON; other paths the console's 404 page.
handler404 = "console.api_errors.page_not_found"

urlpatterns = [
    path("", include("console.console_urls")),
    path("", include("accounts.urls")),
    path("", include("inference_node.urls")),
    path("", include("usage.urls")),
    path("", include("console.features.analytics.urls")),
    path("", include("console.features.capacity.urls")),
    path("", include("invoicing.webhook_urls")),
    path("", include("invoicing.urls")),
    path("", include("console.features.webhooks.urls")),
    path("", include("console.features.alerts.urls")),
    path("api/v1/", include("accounts.api_urls")),
    path("api/v1/", include("inference_node.api_urls")),
    path("api/v1/", include("usage.api_urls")),
    path("api/v1/", include("invoicing.api_urls")),
    path("api/v1/", include("console.features.webhooks.api_urls")),
    path("api/v1/", include("console.features.analytics.api_urls")),
    path("api/v1/", include("console.features.capacity.api_urls")),
    path("api/v1/", include("console.features.alerts.api_urls")),
    path("django-admin/", admin.site.urls),
]

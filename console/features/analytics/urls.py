from django.urls import path

from console.features.analytics import margin, marketplace, public_pages, views

app_name = "analytics"

urlpatterns = [
    path("analytics/", views.index, name="index"),
    # Platform staff only; before the pages' pattern, which it is not one of.
    path("analytics/margin/", margin.margin_page, name="margin"),
    path("analytics/margin/export.csv", margin.margin_csv, name="margin_csv"),
    # Every member; and the two public pages (no sign-in, off unless enabled).
    path("marketplace/", marketplace.marketplace, name="marketplace"),
    path("public/models/", public_pages.public_marketplace, name="public_marketplace"),
    path("public/status/", public_pages.public_status, name="public_status"),
    *(path(f"analytics/{name}/", view, name=name) for name, view in views.PAGE_VIEWS.items()),
    *(
        path(f"analytics/charts/{name}/", view, name=f"chart_{name}")
        for name, view in views.CHART_VIEWS.items()
    ),
]

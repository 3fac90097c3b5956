from django.urls import path

from console.analytics import views

app_name = "analytics"

urlpatterns = [
    path("analytics/", views.index, name="index"),
    *(path(f"analytics/{name}/", view, name=name) for name, view in views.PAGE_VIEWS.items()),
    *(
        path(f"analytics/charts/{name}/", view, name=f"chart_{name}")
        for name, view in views.CHART_VIEWS.items()
    ),
]

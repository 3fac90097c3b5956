from django.urls import path

from console.analytics.marketplace import MarketplaceAPIView

urlpatterns = [
    path("marketplace/", MarketplaceAPIView.as_view(), name="marketplace"),
]

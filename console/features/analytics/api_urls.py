from django.urls import path

from console.features.analytics.marketplace import MarketplaceAPIView

urlpatterns = [
    path("marketplace/", MarketplaceAPIView.as_view(), name="marketplace"),
]

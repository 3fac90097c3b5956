from rest_framework.routers import SimpleRouter

from console.features.webhooks import api

router = SimpleRouter()
router.include_format_suffixes = False
router.register("webhooks/destinations", api.DestinationViewSet, basename="webhook-destination")
router.register("webhooks/events", api.EventViewSet, basename="webhook-event")
router.register("webhooks/deliveries", api.DeliveryViewSet, basename="webhook-delivery")

urlpatterns = router.urls

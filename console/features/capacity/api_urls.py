from rest_framework.routers import SimpleRouter

from console.features.capacity import api

router = SimpleRouter()
router.include_format_suffixes = False
router.register("load-tests", api.LoadTestViewSet, basename="load-test")

urlpatterns = router.urls

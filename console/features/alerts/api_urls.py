from rest_framework.routers import SimpleRouter

from console.features.alerts import api

router = SimpleRouter()
router.include_format_suffixes = False
router.register("alert-rules", api.AlertRuleViewSet, basename="alert-rule")
router.register("alert-incidents", api.IncidentViewSet, basename="alert-incident")

urlpatterns = router.urls

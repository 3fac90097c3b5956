from rest_framework.routers import SimpleRouter

from inference_node import api

router = SimpleRouter()
router.include_format_suffixes = False
router.register("nodes", api.NodeViewSet, basename="node")

urlpatterns = router.urls

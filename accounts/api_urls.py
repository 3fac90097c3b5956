from django.urls import path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import SimpleRouter

from accounts import api

router = SimpleRouter()
router.include_format_suffixes = False
router.register("keys", api.ApiKeyViewSet, basename="api-key")
router.register("sub-accounts", api.SubAccountViewSet, basename="sub-account")
router.register("members", api.MemberViewSet, basename="member")
router.register("invitations", api.InvitationViewSet, basename="invitation")

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    *router.urls,
]

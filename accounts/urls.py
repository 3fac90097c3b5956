from django.contrib.auth import views as auth_views
from django.urls import path

from accounts import key_views, password_reset, signin_views, two_factor_views, views

app_name = "accounts"

urlpatterns = [
    path("login/", signin_views.LoginView.as_view(), name="login"),
    path("login/code/", two_factor_views.login_code, name="login_code"),
    path("account/two-factor/", two_factor_views.settings_page, name="two_factor"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/setlang/", signin_views.set_language, name="set_language"),
    path("password/", signin_views.PasswordChangeView.as_view(), name="password_change"),
    path("password/reset/", password_reset.PasswordResetView.as_view(), name="password_reset"),
    path(
        "password/reset/sent/",
        password_reset.PasswordResetDoneView.as_view(),
        name="password_reset_done",
    ),
    path(
        "password/reset/<uidb64>/<token>/",
        password_reset.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "password/reset/done/",
        password_reset.PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
    path("org/switch/", views.organization_switch, name="organization_switch"),
    path("org/settings/", views.organization_settings, name="organization_settings"),
    path("members/", views.member_list, name="members"),
    path("members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("members/<int:membership_id>/remove/", views.member_remove, name="member_remove"),
    path(
        "invitations/<int:invitation_id>/revoke/", views.invitation_revoke, name="invitation_revoke"
    ),
    path("invite/<str:token>/", views.invitation_accept, name="invitation_accept"),
    path("sub-accounts/", views.sub_account_list, name="sub_accounts"),
    path("sub-accounts/<int:sub_account_id>/", views.sub_account_detail, name="sub_account_detail"),
    path("keys/", key_views.api_key_list, name="api_keys"),
    path("keys/new/", key_views.api_key_create, name="api_key_create"),
    path("keys/<int:key_id>/", key_views.api_key_detail, name="api_key_detail"),
    path("keys/<int:key_id>/rotate/", key_views.api_key_rotate, name="api_key_rotate"),
    path(
        "keys/<int:key_id>/secret/", key_views.api_key_collect_secret, name="api_key_collect_secret"
    ),
    path("keys/<int:key_id>/revoke/", key_views.api_key_revoke, name="api_key_revoke"),
    path("audit/", views.audit_log, name="audit"),
    path("tokens/", views.access_tokens, name="access_tokens"),
]

from django.apps import AppConfig
from django.conf import settings


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        # The Django admin's sign-in goes through the console's login throttle
        # (accounts.throttle); its URL, name and page stay the admin's own. Set
        # before the URLconf is first loaded, which reads ``site.login``.
        from django.contrib import admin  # deferred: imports models (registry not ready)

        # deferred: imports models, not loadable before the app registry is ready
        from accounts.signin_views import throttled_login

        if not getattr(admin.site.login, "throttled", False):
            admin.site.login = throttled_login(admin.site.login)
            admin.site.login.throttled = True

        from django.contrib.auth.signals import user_logged_in  # deferred: imports models

        user_logged_in.connect(remember_language, dispatch_uid="accounts.remember_language")


def remember_language(sender, request, user, **kwargs) -> None:
    """Signing in: a user who never chose a language keeps the one the
    sign-in page was switched to (its cookie); one who chose keeps theirs
    (``UserLanguageMiddleware`` applies it)."""
    # deferred: accounts.middleware imports models (the app registry is not ready
    # when this app module is imported)
    from accounts.middleware import supported_language

    if request is None or getattr(user, "language", None) is None or user.language:
        return
    chosen = supported_language(request.COOKIES.get(settings.LANGUAGE_COOKIE_NAME))
    if chosen:
        user.language = chosen
        user.save(update_fields=["language"])

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        # The Django admin's sign-in goes through the console's login throttle
        # (accounts.throttle); its URL, name and page stay the admin's own. Set
        # before the URLconf is first loaded, which reads ``site.login``.
        from django.contrib import admin

        from accounts.views import throttled_login

        if not getattr(admin.site.login, "throttled", False):
            admin.site.login = throttled_login(admin.site.login)
            admin.site.login.throttled = True

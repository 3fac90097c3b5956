"""The web side: the server guard, public pages, sign-in, e-mail, languages and
static files, the API and its schema, and the security headers and cookies."""

from __future__ import annotations

from pathlib import Path

from console.kernel import config
from console.settings.base import BASE_DIR, DEBUG, PRODUCTION, VAR_DIR

# --- web server guard (issue 19: slow clients, huge bodies) -----------------
# console.server: the request head must arrive within this many seconds (408, closed).
CONSOLE_HEADER_TIMEOUT_SECONDS = config.env_float("CONSOLE_HEADER_TIMEOUT_SECONDS", 10.0, minimum=0)
# ... and the body within this many seconds of the head (closed; 0: no limit).
CONSOLE_BODY_TIMEOUT_SECONDS = config.env_float("CONSOLE_BODY_TIMEOUT_SECONDS", 30.0, minimum=0)
# An idle kept-alive connection is closed after this many seconds.
CONSOLE_KEEPALIVE_TIMEOUT_SECONDS = config.env_float(
    "CONSOLE_KEEPALIVE_TIMEOUT_SECONDS", 5.0, minimum=0.1
)
# Open connections per client address and server process (TCP peer; 0: no cap).
CONSOLE_MAX_CONNECTIONS_PER_ADDRESS = config.env_int(
    "CONSOLE_MAX_CONNECTIONS_PER_ADDRESS", 512, minimum=0
)
# Open connections in all, per server process (0: no cap): past it a new one gets 503.
CONSOLE_MAX_CONNECTIONS = config.env_int("CONSOLE_MAX_CONNECTIONS", 4096, minimum=0)
# console.body_limit: bodies of non-gateway requests bigger than this get 413 unread.
CONSOLE_MAX_BODY_BYTES = config.env_int("CONSOLE_MAX_BODY_BYTES", 4 * 1024 * 1024, minimum=1024)
# /readyz (console.kernel.probes): seconds each check (database, cache, broker) may take
# before it counts as failed.
CONSOLE_READYZ_TIMEOUT_SECONDS = config.env_float(
    "CONSOLE_READYZ_TIMEOUT_SECONDS", 2.0, minimum=0.1
)
# The public pages (console.features.analytics.public_pages), no sign-in: off answers 404. The
# marketplace shows models, list prices and platform-wide figures; the status page each
# model's up / degraded / down state now and per day. Off by default: publishing them
# (model names, outages) is the operator's decision. The marketplace's platform-wide
# figures (and these pages) are kept this many seconds (0: not kept), so that page
# views, anonymous ones above all, do not each re-read 30 days of rollups.
CONSOLE_PUBLIC_MARKETPLACE = config.env_bool("CONSOLE_PUBLIC_MARKETPLACE", False)
CONSOLE_PUBLIC_STATUS = config.env_bool("CONSOLE_PUBLIC_STATUS", False)
CONSOLE_MARKETPLACE_CACHE_SECONDS = config.env_int(
    "CONSOLE_MARKETPLACE_CACHE_SECONDS", 60, minimum=0
)

# --- auth -----------------------------------------------------------------
AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "console:overview"
LOGOUT_REDIRECT_URL = "accounts:login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
if config.env_bool("CONSOLE_FAST_PASSWORD_HASHER", False):
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
INVITATION_TTL_HOURS = config.env_int("INVITATION_TTL_HOURS", 72, minimum=1)
# Sign-in throttling (accounts.throttle): failed attempts are counted per account,
# per client address and per known device (a browser that signed in before), each
# for LOGIN_FAILURE_WINDOW_SECONDS after its latest failure. Past LOGIN_MAX_FAILURES,
# the next attempt waits 2^(failures - LOGIN_MAX_FAILURES) seconds, at most
# LOGIN_MAX_DELAY_SECONDS; earlier ones get 429 and the time to wait.
LOGIN_MAX_FAILURES = config.env_int("LOGIN_MAX_FAILURES", 5, minimum=1)
LOGIN_FAILURE_WINDOW_SECONDS = config.env_int("LOGIN_FAILURE_WINDOW_SECONDS", 900, minimum=1)
LOGIN_MAX_DELAY_SECONDS = config.env_int("LOGIN_MAX_DELAY_SECONDS", 600, minimum=1)
# Password reset by e-mail (accounts/password_reset.py): a link is good for
# PASSWORD_RESET_TIMEOUT seconds and once; at most PASSWORD_RESET_PER_ACCOUNT
# e-mails per address and PASSWORD_RESET_PER_CLIENT requests per client
# address in each PASSWORD_RESET_WINDOW_SECONDS.
PASSWORD_RESET_TIMEOUT = config.env_int("PASSWORD_RESET_TIMEOUT", 3600, minimum=60)
PASSWORD_RESET_PER_ACCOUNT = config.env_int("PASSWORD_RESET_PER_ACCOUNT", 3, minimum=1)
PASSWORD_RESET_PER_CLIENT = config.env_int("PASSWORD_RESET_PER_CLIENT", 20, minimum=1)
PASSWORD_RESET_WINDOW_SECONDS = config.env_int("PASSWORD_RESET_WINDOW_SECONDS", 3600, minimum=60)

# The console's name in page titles, the header and e-mails: a reseller shows its own.
CONSOLE_BRAND = config.env_str("CONSOLE_BRAND", "Token Console")

# --- two-factor sign-in (issue 19; accounts.two_factor) ----------------------
# The name authenticator apps show for the console's entries.
OTP_TOTP_ISSUER = config.env_str("OTP_TOTP_ISSUER", CONSOLE_BRAND)

# --- e-mail ---------------------------------------------------------------
# The default writes each message to a file under var/mail, not to the worker's
# output: mail carries one-time links (invitations) that must not reach the logs.
EMAIL_BACKEND = config.env_str("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
EMAIL_HOST = config.env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = config.env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = config.env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = config.env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = config.env_bool("EMAIL_USE_TLS", False)
EMAIL_FILE_PATH = str(VAR_DIR / "mail")
DEFAULT_FROM_EMAIL = config.env_str("DEFAULT_FROM_EMAIL", "console@localhost")

# --- i18n, static ---------------------------------------------------------
# English and Simplified Chinese (issue 18): the console's frame and pages
# through Django's translation machinery, catalogues in locale/ (compiled by
# `up`, the tests and CI). A visitor gets the language of the cookie the
# switcher sets, else the browser's; a signed-in user the one they chose.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(config.env_str("CONSOLE_STATIC_ROOT") or VAR_DIR / "staticfiles").resolve()
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Static files are collected into STATIC_ROOT (CONSOLE_STATIC_ROOT moves it)
# with content-hashed names and gzip and brotli copies: `collectstatic`, which
# `up` and the tests run when a source changed (console.staticassets).
# WhiteNoise serves a hashed name as immutable for ten years and the compressed
# copy the browser accepts; {% static %} names the hashed file.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
# Only under DJANGO_DEBUG: serve straight from the source folders, re-read on change.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
# Pages name only the hashed files: the plain copies need not be kept (nor compressed).
WHITENOISE_KEEP_ONLY_HASHED_FILES = True

# --- API ------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.api_auth.PersonalAccessTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "console.kernel.pagination.CreatedCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "console.api_errors.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # The API reads JSON only (a form body cannot say null; issue 19's schema work).
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Token-billing console API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Two models' "status" choices; named here so `check --deploy` stays clean.
    "ENUM_NAME_OVERRIDES": {
        "SubAccountStatusEnum": "accounts.models.SubAccountStatus",
        "NodeStatusEnum": "inference_node.models.NodeStatus",
        "WebhookDestinationKindEnum": "console.features.webhooks.models.DestinationKind",
        "LoadTestStatusEnum": "console.features.capacity.models.Status",
        "AlertKindEnum": "console.features.alerts.models.Kind",
        "AlertScopeEnum": "console.features.alerts.models.Scope",
    },
    # --- API schema conformance (issue 19): the error answers of every operation
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "console.api_schema.add_error_responses",
    ],
}

# --- security -------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
# Pages and htmx take the token from the page (base.html), so no script needs the cookie.
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# Send the Content-Security-Policy (console.csp) as Report-Only: to try a policy
# change on a live site without breaking pages.
CSP_REPORT_ONLY = config.env_bool("CSP_REPORT_ONLY", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = config.env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = config.env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    # "__Host-": the browser keeps them only if Secure, for this host and path "/".
    SESSION_COOKIE_NAME = "__Host-sessionid"
    CSRF_COOKIE_NAME = "__Host-csrftoken"

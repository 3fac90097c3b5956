"""The project's core: paths, secrets, hosts, installed apps, middleware, templates
and the databases. The other topic modules of ``console.settings`` read these."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from console.kernel import config

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(config.env_str("CONSOLE_VAR_DIR") or BASE_DIR / "var").resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

PRODUCTION = config.env_bool("CONSOLE_PRODUCTION", False)
DEBUG = config.env_bool("DJANGO_DEBUG", False)

SECRET_KEY = config.env_str("DJANGO_SECRET_KEY")
API_KEY_PEPPER = config.env_str("API_KEY_PEPPER")
if PRODUCTION:
    missing = [
        n
        for n, v in (("DJANGO_SECRET_KEY", SECRET_KEY), ("API_KEY_PEPPER", API_KEY_PEPPER))
        if not v
    ]
    if missing:
        raise ImproperlyConfigured(
            f"CONSOLE_PRODUCTION is set but {', '.join(missing)} is missing; "
            "production secrets must come from the environment"
        )
SECRET_KEY = SECRET_KEY or config.read_or_create_secret(VAR_DIR / "secret_key")
# The pepper keys the HMAC of every API key secret. Changing it invalidates all keys.
API_KEY_PEPPER = API_KEY_PEPPER or config.read_or_create_secret(VAR_DIR / "api_key_pepper")
# Fernet keys that seal vendor credentials and node tokens at rest (console.kernel.crypto):
# the first seals, every one opens (rotation: new key first, `manage.py reseal_secrets`).
CONSOLE_SECRET_KEYS = config.env_list("CONSOLE_SECRET_KEYS", [])
if PRODUCTION and not CONSOLE_SECRET_KEYS:
    raise ImproperlyConfigured(
        "CONSOLE_PRODUCTION is set but CONSOLE_SECRET_KEYS is missing; "
        "production secrets must come from the environment"
    )
CONSOLE_SECRET_KEYS = CONSOLE_SECRET_KEYS or [
    config.read_or_create_fernet_key(VAR_DIR / "secret_box_key")
]

ALLOWED_HOSTS = config.env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = config.env_list("CSRF_TRUSTED_ORIGINS", [])
CONSOLE_BASE_URL = config.env_str("CONSOLE_BASE_URL", "http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.admin",
    "rest_framework",
    "drf_spectacular",
    "django_htmx",
    "console",
    "accounts",
    "inference_node",
    "usage",
    "invoicing",
    "gateway_bridge",
    # --- outbound webhooks and chat destinations (issue 21)
    "console.features.webhooks",
    "console.features.capacity",
    # --- alert rules (issue 21): evaluated by beat every minute (console.features.alerts)
    "console.features.alerts",
    # --- two-factor sign-in (issue 19): django-otp's TOTP devices (accounts.two_factor)
    "django_otp",
    "django_otp.plugins.otp_totp",
]

MIDDLEWARE = [
    # /healthz and /readyz, answered before the HTTPS redirect and the ALLOWED_HOSTS
    # check: probes come by IP over plain HTTP (console.kernel.probes), and stay out of the
    # access log.
    "console.kernel.probes.ProbeMiddleware",
    # One access-log line per request, with its request id (issue 20): this early, so
    # it times the whole stack and sees every answer, redirects included.
    "console.kernel.request_log.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "console.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The language (issue 18): after the session, before CommonMiddleware; the
    # signed-in user's own choice replaces the cookie's after authentication.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "accounts.middleware.UserLanguageMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "accounts.middleware.CurrentOrganizationMiddleware",
    # two-factor sign-in (issue 19): an organization may require it of its members
    "accounts.middleware.RequireTwoFactorMiddleware",
    # API schema conformance (issue 19): a repeated query parameter is a 400
    "console.api_errors.SingleQueryParameterMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"
ASGI_APPLICATION = "console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.context_processors.organization",
                "console.context_processors.brand",
            ],
        },
    },
]

# --- database -------------------------------------------------------------
DATABASE_URL = config.env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {
        "default": config.parse_database_url(
            DATABASE_URL,
            pool=config.env_bool("DATABASE_POOL", True),
            pool_max_size=config.env_int("DATABASE_POOL_MAX_SIZE", 10, minimum=1),
        )
    }
else:
    DATABASES = {"default": config.sqlite_database(VAR_DIR / "console.sqlite3")}
# Behind PgBouncer in transaction pooling, a server-side cursor (the streamed
# exports' chunked reads) would outlive the transaction that owns its server
# connection: read in chunks client-side instead.
DATABASE_TRANSACTION_POOLING = config.env_bool("DATABASE_TRANSACTION_POOLING", False)
# A read replica for the call logs, analytics and exports (console.kernel.db_router).
DATABASE_REPLICA_URL = config.env_str("DATABASE_REPLICA_URL")
if DATABASE_REPLICA_URL:
    if not DATABASE_URL:
        raise ImproperlyConfigured("DATABASE_REPLICA_URL needs DATABASE_URL (the primary)")
    DATABASES["replica"] = config.parse_database_url(
        DATABASE_REPLICA_URL,
        pool=config.env_bool("DATABASE_POOL", True),
        pool_max_size=config.env_int("DATABASE_POOL_MAX_SIZE", 10, minimum=1),
        name="DATABASE_REPLICA_URL",
    )
    # Tests read the replica's alias from the primary's test database.
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
for _database in DATABASES.values():
    if _database["ENGINE"] == "django.db.backends.postgresql" and DATABASE_TRANSACTION_POOLING:
        _database["DISABLE_SERVER_SIDE_CURSORS"] = True
DATABASE_ROUTERS = ["console.kernel.db_router.ReplicaRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

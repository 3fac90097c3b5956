"""Django settings. Everything configurable comes from the environment through
``console.config``; with no environment at all the product runs embedded
(SQLite in ``var/``, a filesystem Celery broker, in-process caches)."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from console import config

BASE_DIR = Path(__file__).resolve().parent.parent
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
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "accounts.middleware.CurrentOrganizationMiddleware",
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
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- caches and broker ----------------------------------------------------
REDIS_URL = config.env_str("REDIS_URL")
if REDIS_URL:
    config.parse_redis_url(REDIS_URL)
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": config.env_str("CACHE_KEY_PREFIX", "console"),
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = config.env_str("CELERY_BROKER_URL") or REDIS_URL or "filesystem://"
config.parse_broker_url(CELERY_BROKER_URL)
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
        "polling_interval": 0.2,
    }
CELERY_TASK_DEFAULT_QUEUE = config.env_str("CELERY_QUEUE", "console")
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE: dict = {
    "accounts-expire-keys": {"task": "accounts.expire_keys", "schedule": 60.0},
    "usage-prune-calls": {"task": "usage.prune_calls", "schedule": 3600.0},
}

# --- usage ----------------------------------------------------------------
# Call records older than this many days are deleted (rollups stay); 0 keeps them forever.
USAGE_RETENTION_DAYS = config.env_int("USAGE_RETENTION_DAYS", 0, minimum=0)
USAGE_PRUNE_BATCH = config.env_int("USAGE_PRUNE_BATCH", 10_000, minimum=1)
# Events that claim to start further in the future than this are dead-lettered.
USAGE_MAX_FUTURE_SKEW_SECONDS = config.env_int("USAGE_MAX_FUTURE_SKEW_SECONDS", 300, minimum=0)
# How long the ingest worker trusts its cached price book, organizations and keys.
USAGE_PRICEBOOK_TTL_SECONDS = config.env_int("USAGE_PRICEBOOK_TTL_SECONDS", 30, minimum=0)

# --- inference nodes ------------------------------------------------------
# How often beat probes every active and draining node, how long one request
# of a probe may take, and how many probes in a row flip a node's health.
NODE_PROBE_INTERVAL_SECONDS = config.env_int("NODE_PROBE_INTERVAL_SECONDS", 5, minimum=1)
NODE_PROBE_TIMEOUT_SECONDS = config.env_int("NODE_PROBE_TIMEOUT_SECONDS", 2, minimum=1)
NODE_UNHEALTHY_AFTER = config.env_int("NODE_UNHEALTHY_AFTER", 3, minimum=1)
NODE_HEALTHY_AFTER = config.env_int("NODE_HEALTHY_AFTER", 2, minimum=1)
NODE_PROBE_CONCURRENCY = config.env_int("NODE_PROBE_CONCURRENCY", 50, minimum=1)
CELERY_BEAT_SCHEDULE["inference-node-probe"] = {
    "task": "inference_node.probe_nodes",
    "schedule": float(NODE_PROBE_INTERVAL_SECONDS),
    # A round nobody picked up in time is stale; the next one replaces it.
    "options": {"expires": float(NODE_PROBE_INTERVAL_SECONDS)},
}

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

# --- e-mail ---------------------------------------------------------------
EMAIL_BACKEND = config.env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = config.env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = config.env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = config.env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = config.env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = config.env_bool("EMAIL_USE_TLS", False)
EMAIL_FILE_PATH = str(VAR_DIR / "mail")
DEFAULT_FROM_EMAIL = config.env_str("DEFAULT_FROM_EMAIL", "console@localhost")

# --- i18n, static ---------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the finders so `up` needs no collectstatic step.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- API ------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.api_auth.PersonalAccessTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "console.pagination.CreatedCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "console.api_errors.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Token-billing console API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
}

# --- security -------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
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

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": config.env_str("LOG_LEVEL", "INFO").upper()},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

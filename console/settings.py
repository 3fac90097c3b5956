"""Django settings. Everything configurable comes from the environment through
``console.kernel.config``; with no environment at all the product runs embedded
(SQLite in ``var/``, a filesystem Celery broker, in-process caches)."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from console.kernel import config, logs

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

# --- caches and broker ----------------------------------------------------
REDIS_URL = config.env_str("REDIS_URL")
if REDIS_URL:
    config.parse_redis_url(REDIS_URL)
    CACHES = {
        "default": {
            # Django's RedisCache for one Redis; Sentinel and Cluster URLs through
            # console.kernel.redis_url's clients (console.kernel.redis_cache).
            "BACKEND": "console.kernel.redis_cache.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": config.env_str("CACHE_KEY_PREFIX", "console"),
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = config.env_str("CELERY_BROKER_URL") or REDIS_URL or "filesystem://"
CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = config.broker_url(CELERY_BROKER_URL)
if CELERY_BROKER_URL.startswith("filesystem://"):
    # The embedded broker (console.kernel.broker_fs): kombu's filesystem transport with
    # atomic writes (temporary file, fsync, rename) and a quarantine for a
    # message file it cannot read, installed as kombu's "filesystem" transport
    # in this process (console.kernel.celery does it too), whether the URL was left
    # unset or set to filesystem:// (the same folders, the same file format).
    from console.kernel import broker_fs

    broker_fs.install()
    for sub in ("queue", "processed", "control", "quarantine"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "quarantine_folder": str(BROKER_DIR / "quarantine"),
        "store_processed": False,
        "polling_interval": 0.2,
    }
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://", "sentinel://")):
    # Sentinel: kombu's sentinel transport (master_name from the URL) follows a
    # failover to the new primary.
    # A task taken by a worker that dies (SIGKILL, OOM, a lost machine) goes back to
    # the queue after this many seconds (RabbitMQ does it at once when the
    # connection drops). It must exceed the longest task (CELERY_TASK_TIME_LIMIT).
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        **CELERY_BROKER_TRANSPORT_OPTIONS,
        "visibility_timeout": config.env_int("CELERY_VISIBILITY_TIMEOUT_SECONDS", 900, minimum=10),
    }
elif CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://")):
    # RabbitMQ. Publisher confirms: a publish returns only once the broker has
    # the message (a persistent message to a durable queue: on disk) and raises
    # when the broker refuses it (basic.nack), so a batch the gateway handed
    # over is either confirmed or spooled (gateway_bridge.emitter), never lost
    # unseen. Celery's queues are durable and its messages persistent by
    # default; a worker that dies mid-task loses its connection and RabbitMQ
    # puts the unacknowledged message back at once (acks late, below).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True}
# Seconds to open a broker connection (Celery's own publishes and workers;
# the gateway's usage emitter uses its own, shorter timeouts).
CELERY_BROKER_CONNECTION_TIMEOUT = config.env_float(
    "CELERY_BROKER_CONNECTION_TIMEOUT_SECONDS", 4.0, minimum=0.1
)
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
# Exactly one beat per deployment: its scheduler takes a lock first and a second beat
# refuses to start (console.kernel.beat_lock: a PostgreSQL advisory lock, or a file lock in
# VAR_DIR with SQLite). false: no lock (a transaction-pooling PgBouncer in front).
CELERY_BEAT_SCHEDULER = "console.kernel.beat_lock:LockedScheduler"
CONSOLE_BEAT_LOCK = config.env_bool("CONSOLE_BEAT_LOCK", True)
CELERY_BEAT_SCHEDULE: dict = {
    "accounts-expire-keys": {"task": "accounts.expire_keys", "schedule": 60.0},
    "usage-prune-calls": {"task": "usage.prune_calls", "schedule": 3600.0},
    "usage-ensure-call-partitions": {"task": "usage.ensure_call_partitions", "schedule": 86400.0},
}

# --- capacity planning (stepped load tests, console.features.capacity) -------------
# Where a load test sends its calls: the gateway over loopback (the same base URL
# the README's snippets use), and the Celery queue its job runs on (a worker of
# its own: a test holds its worker for minutes, which would starve ingest).
CAPACITY_GATEWAY_URL = config.env_str("CAPACITY_GATEWAY_URL", "http://127.0.0.1:8000").rstrip("/")
CAPACITY_QUEUE = config.env_str("CAPACITY_QUEUE", "loadtests")
# Bounds of one test: its whole duration (steps x seconds each), the clients of a
# step, and how many tests one organization may run at once.
CAPACITY_MAX_DURATION_SECONDS = config.env_int("CAPACITY_MAX_DURATION_SECONDS", 600, minimum=1)
CAPACITY_MAX_CLIENTS = config.env_int("CAPACITY_MAX_CLIENTS", 400, minimum=1)
CAPACITY_RUNS_PER_ORG = config.env_int("CAPACITY_RUNS_PER_ORG", 1, minimum=1)

# --- usage ----------------------------------------------------------------
# Call records older than this many days are deleted (rollups stay); 0 keeps them forever.
USAGE_RETENTION_DAYS = config.env_int("USAGE_RETENTION_DAYS", 0, minimum=0)
USAGE_PRUNE_BATCH = config.env_int("USAGE_PRUNE_BATCH", 10_000, minimum=1)
# PostgreSQL: monthly partitions of the call table kept ready this many months ahead.
USAGE_PARTITION_MONTHS_AHEAD = config.env_int("USAGE_PARTITION_MONTHS_AHEAD", 3, minimum=1)
# Events that claim to start further in the future than this are dead-lettered.
USAGE_MAX_FUTURE_SKEW_SECONDS = config.env_int("USAGE_MAX_FUTURE_SKEW_SECONDS", 300, minimum=0)
# How long the ingest worker trusts its cached price book, organizations and keys.
USAGE_PRICEBOOK_TTL_SECONDS = config.env_int("USAGE_PRICEBOOK_TTL_SECONDS", 30, minimum=0)

# --- invoicing ------------------------------------------------------------
# Hours after every time zone's month has ended before beat drafts its invoices
# (late usage events still arrive in that window).
INVOICING_GRACE_HOURS = config.env_int("INVOICING_GRACE_HOURS", 6, minimum=0)
# Who issues the invoices (printed on every invoice and credit note).
INVOICING_SELLER = {
    "name": config.env_str("INVOICING_SELLER_NAME", "Token Billing Console"),
    "address": config.env_str("INVOICING_SELLER_ADDRESS").replace("\\n", "\n"),
    "tax_id": config.env_str("INVOICING_SELLER_TAX_ID"),
    # Where customers write about an invoice (printed under the seller's address).
    "email": config.env_str("INVOICING_SELLER_EMAIL"),
}
# How to pay, printed on every invoice with an amount due (bank details; "\n" for new lines).
INVOICING_PAYMENT_INSTRUCTIONS = config.env_str("INVOICING_PAYMENT_INSTRUCTIONS").replace(
    "\\n", "\n"
)
# The invoice and credit-note PDFs' fonts (TrueType/OpenType files; empty = the fonts the
# fontpkg-noto-sans and noto-cjk-sans-otc packages install, then Debian's Noto and DejaVu).
# Without a Unicode font the PDFs fall back to Latin-only Helvetica and log a warning.
INVOICING_PDF_FONT = config.env_str("INVOICING_PDF_FONT")
# The fallback for characters the main font lacks (Chinese, Japanese, Korean); a .ttc/.otc
# collection's Simplified Chinese face is used when it has one.
INVOICING_PDF_CJK_FONT = config.env_str("INVOICING_PDF_CJK_FONT")
# Largest single top-up, in currency units (a typo guard).
INVOICING_MAX_TOP_UP = config.env_int("INVOICING_MAX_TOP_UP", 100_000, minimum=1)
# Stripe is off unless a secret key is set; without it finance records payments by hand.
STRIPE_SECRET_KEY = config.env_str("STRIPE_SECRET_KEY")
STRIPE_PUBLISHABLE_KEY = config.env_str("STRIPE_PUBLISHABLE_KEY")
# Stripe.js for the card pages; Stripe requires it from js.stripe.com (never vendored).
STRIPE_JS_URL = config.env_str("STRIPE_JS_URL", "https://js.stripe.com/v3/")
STRIPE_WEBHOOK_SECRET = config.env_str("STRIPE_WEBHOOK_SECRET")
# Point stripe-python elsewhere (localstripe in tests); empty = api.stripe.com.
STRIPE_API_BASE = config.env_str("STRIPE_API_BASE")
# Webhook signatures older than this are refused (Stripe's default tolerance).
STRIPE_WEBHOOK_TOLERANCE_SECONDS = config.env_int(
    "STRIPE_WEBHOOK_TOLERANCE_SECONDS", 300, minimum=1
)
# How far ahead of our clock a webhook signature's timestamp may be (clock skew);
# later ones are refused.
STRIPE_WEBHOOK_FUTURE_TOLERANCE_SECONDS = config.env_int(
    "STRIPE_WEBHOOK_FUTURE_TOLERANCE_SECONDS", 300, minimum=0
)
if PRODUCTION and STRIPE_SECRET_KEY and not STRIPE_WEBHOOK_SECRET:
    raise ImproperlyConfigured("STRIPE_SECRET_KEY is set but STRIPE_WEBHOOK_SECRET is missing")
CELERY_BEAT_SCHEDULE["invoicing-run-monthly"] = {
    "task": "invoicing.run_monthly",
    "schedule": 3600.0,
    "options": {"expires": 3000.0},
}
# Card refunds, collections and top-ups left pending by a Stripe outage or a lost webhook.
CELERY_BEAT_SCHEDULE["invoicing-retry-pending-payments"] = {
    "task": "invoicing.retry_pending_payments",
    "schedule": 900.0,
    "options": {"expires": 800.0},
}

# Finalized invoices past their due date with an amount due: invoice.overdue, once each.
CELERY_BEAT_SCHEDULE["invoicing-notify-overdue"] = {
    "task": "invoicing.notify_overdue",
    "schedule": 3600.0,
    "options": {"expires": 3000.0},
}

# The SLA ledger (invoicing.services.sla): the platform's default monthly availability
# target in parts per million (999000 = 99.9 %); platform staff override it per organization.
SLA_AVAILABILITY_TARGET_PPM = config.env_int(
    "SLA_AVAILABILITY_TARGET_PPM", 999_000, minimum=500_000
)
if SLA_AVAILABILITY_TARGET_PPM > 1_000_000:
    raise ImproperlyConfigured("SLA_AVAILABILITY_TARGET_PPM is at most 1000000 (100 %)")
# The platform's default bound on a month's p99 time to first token, in milliseconds
# (0: none). A month over it is breached too (the first credit tier).
SLA_TTFT_P99_MS = config.env_int("SLA_TTFT_P99_MS", 0, minimum=0)
# Each organization's month just ended (in its time zone) is evaluated once its invoicing
# grace period is over; a breach drafts a credit for finance to approve.
CELERY_BEAT_SCHEDULE["invoicing-sla-evaluate"] = {
    "task": "invoicing.sla_evaluate_closed",
    "schedule": 3600.0,
    "options": {"expires": 3000.0},
}

# --- alerts ---------------------------------------------------------------
# Every enabled alert rule is evaluated once a minute (console.features.alerts.services.evaluate).
CELERY_BEAT_SCHEDULE["alerts-evaluate"] = {
    "task": "alerts.evaluate",
    "schedule": 60.0,
    "options": {"expires": 55.0},
}

# --- inference nodes ------------------------------------------------------
# How often beat probes every active and draining node, how long one request
# of a probe may take, and how many probes in a row flip a node's health.
NODE_PROBE_INTERVAL_SECONDS = config.env_int("NODE_PROBE_INTERVAL_SECONDS", 5, minimum=1)
NODE_PROBE_TIMEOUT_SECONDS = config.env_int("NODE_PROBE_TIMEOUT_SECONDS", 2, minimum=1)
NODE_UNHEALTHY_AFTER = config.env_int("NODE_UNHEALTHY_AFTER", 3, minimum=1)
NODE_HEALTHY_AFTER = config.env_int("NODE_HEALTHY_AFTER", 2, minimum=1)
NODE_PROBE_CONCURRENCY = config.env_int("NODE_PROBE_CONCURRENCY", 50, minimum=1)
# Whether organizations' nodes may be on private, loopback, link-local or other
# non-public addresses (the gateway and the prober would call them from inside
# this network). Off unless staff turn it on; shared platform nodes are never limited.
NODE_ALLOW_PRIVATE_URLS = config.env_bool("NODE_ALLOW_PRIVATE_URLS", False)
CELERY_BEAT_SCHEDULE["inference-node-probe"] = {
    "task": "inference_node.probe_nodes",
    "schedule": float(NODE_PROBE_INTERVAL_SECONDS),
    # A round nobody picked up in time is stale; the next one replaces it.
    "options": {"expires": float(NODE_PROBE_INTERVAL_SECONDS)},
}

# --- outbound webhooks (issue 21: console.features.webhooks) ---------------------------
# One POST to a destination: seconds to connect, and for the whole exchange.
WEBHOOK_CONNECT_TIMEOUT_SECONDS = config.env_float(
    "WEBHOOK_CONNECT_TIMEOUT_SECONDS", 5.0, minimum=0.1
)
WEBHOOK_TIMEOUT_SECONDS = config.env_float("WEBHOOK_TIMEOUT_SECONDS", 10.0, minimum=0.1)
# Retries: exponential backoff with full jitter (a random wait up to
# base * 2**attempt, at most the cap) for this many hours, then abandoned.
WEBHOOK_RETRY_BASE_SECONDS = config.env_float("WEBHOOK_RETRY_BASE_SECONDS", 30.0, minimum=0.1)
WEBHOOK_RETRY_MAX_DELAY_SECONDS = config.env_float(
    "WEBHOOK_RETRY_MAX_DELAY_SECONDS", 3600.0, minimum=1
)
WEBHOOK_RETRY_HOURS = config.env_float("WEBHOOK_RETRY_HOURS", 24.0, minimum=0)
# A destination is marked failing after this many failed attempts in a row.
WEBHOOK_FAILING_AFTER = config.env_int("WEBHOOK_FAILING_AFTER", 5, minimum=1)
# How often beat sends the deliveries whose retry is due.
WEBHOOK_SWEEP_SECONDS = config.env_float("WEBHOOK_SWEEP_SECONDS", 30.0, minimum=1)
CELERY_BEAT_SCHEDULE["webhooks-deliver-due"] = {
    "task": "webhooks.deliver_due",
    "schedule": WEBHOOK_SWEEP_SECONDS,
    "options": {"expires": WEBHOOK_SWEEP_SECONDS},
}

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
# The public pages (console.features.analytics.marketplace), no sign-in: off answers 404. The
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

# --- gateway bridge ---------------------------------------------------------
# Requests bigger than this get 413 before they are parsed.
GATEWAY_MAX_BODY_BYTES = config.env_int("GATEWAY_MAX_BODY_BYTES", 4 * 1024 * 1024, minimum=1024)
# Fair admission (issue 19, gateway_bridge.pipeline.fair): bodies of at least this many
# bytes take one of their organization's slots before they are read (429 when none is
# free) and are validated in a parse worker process before the event loop parses them.
GATEWAY_LARGE_BODY_BYTES = config.env_int("GATEWAY_LARGE_BODY_BYTES", 256 * 1024, minimum=1024)
GATEWAY_LARGE_BODY_CONCURRENCY = config.env_int("GATEWAY_LARGE_BODY_CONCURRENCY", 2, minimum=1)
# Parse worker processes per gateway process (0: large bodies are parsed on the loop).
GATEWAY_PARSE_WORKERS = config.env_int("GATEWAY_PARSE_WORKERS", 1, minimum=0)
# Peers (IPs or CIDRs) whose X-Forwarded-For is believed; everyone else's is ignored.
GATEWAY_TRUSTED_PROXIES = config.env_list("GATEWAY_TRUSTED_PROXIES")
# Upstream timeouts, seconds: connect, response head, gap between stream events, whole call.
GATEWAY_CONNECT_TIMEOUT = config.env_float("GATEWAY_CONNECT_TIMEOUT", 2.0, minimum=0.01)
GATEWAY_FIRST_BYTE_TIMEOUT = config.env_float("GATEWAY_FIRST_BYTE_TIMEOUT", 60.0, minimum=0.01)
GATEWAY_IDLE_TIMEOUT = config.env_float("GATEWAY_IDLE_TIMEOUT", 30.0, minimum=0.01)
GATEWAY_TOTAL_TIMEOUT = config.env_float("GATEWAY_TOTAL_TIMEOUT", 600.0, minimum=0.01)
# Retries before the first byte reached the client (connect errors, timeouts, 429, 5xx).
GATEWAY_RETRIES = config.env_int("GATEWAY_RETRIES", 2, minimum=0)
GATEWAY_RETRY_BACKOFF_SECONDS = config.env_float("GATEWAY_RETRY_BACKOFF_SECONDS", 0.05, minimum=0)
# Output budget of a call that sets no max_tokens: it is reserved, and sent to the node.
GATEWAY_DEFAULT_MAX_TOKENS = config.env_int("GATEWAY_DEFAULT_MAX_TOKENS", 4096, minimum=1)
# How long a call waits for a free node slot before 503.
GATEWAY_QUEUE_TIMEOUT = config.env_float("GATEWAY_QUEUE_TIMEOUT", 10.0, minimum=0)
GATEWAY_QUEUE_MAX_DEPTH = config.env_int("GATEWAY_QUEUE_MAX_DEPTH", 1000, minimum=0)
# Routing: prefix_affinity | round_robin | least_outstanding, and per-model overrides
# as "model=policy" pairs.
GATEWAY_ROUTING_POLICY = config.env_str("GATEWAY_ROUTING_POLICY", "prefix_affinity")
GATEWAY_ROUTING_OVERRIDES = dict(
    item.split("=", 1) for item in config.env_list("GATEWAY_ROUTING_OVERRIDES") if "=" in item
)
GATEWAY_LOAD_FACTOR = config.env_float("GATEWAY_LOAD_FACTOR", 1.25, minimum=1.0)
GATEWAY_AFFINITY_PREFIX_CHARS = config.env_int("GATEWAY_AFFINITY_PREFIX_CHARS", 256, minimum=1)
# Circuit breaker per node.
GATEWAY_BREAKER_ERROR_RATE = config.env_float("GATEWAY_BREAKER_ERROR_RATE", 0.15, minimum=0)
GATEWAY_BREAKER_MIN_CALLS = config.env_int("GATEWAY_BREAKER_MIN_CALLS", 100, minimum=1)
GATEWAY_BREAKER_WINDOW_SECONDS = config.env_int("GATEWAY_BREAKER_WINDOW_SECONDS", 60, minimum=1)
GATEWAY_BREAKER_OPEN_SECONDS = config.env_float("GATEWAY_BREAKER_OPEN_SECONDS", 30.0, minimum=0)
# How long a process trusts a cached key; Redis pub/sub invalidates sooner.
GATEWAY_KEY_CACHE_SECONDS = config.env_float(
    "GATEWAY_KEY_CACHE_SECONDS", 60.0 if REDIS_URL else 1.0, minimum=0
)
# Limits store: "redis" (shared by every gateway process) or "memory" (this process).
GATEWAY_LIMITS_STORE = config.env_str("GATEWAY_LIMITS_STORE", "redis" if REDIS_URL else "memory")
if GATEWAY_LIMITS_STORE not in ("redis", "memory"):
    raise ImproperlyConfigured("GATEWAY_LIMITS_STORE must be redis or memory")
if GATEWAY_LIMITS_STORE == "redis" and not REDIS_URL:
    raise ImproperlyConfigured("GATEWAY_LIMITS_STORE=redis needs REDIS_URL")
# Usage events: batch size and delay, and the spool directory for broker outages.
GATEWAY_EMIT_MAX_BATCH = config.env_int("GATEWAY_EMIT_MAX_BATCH", 500, minimum=1)
GATEWAY_EMIT_MAX_DELAY = config.env_float("GATEWAY_EMIT_MAX_DELAY", 0.25, minimum=0.001)
GATEWAY_SPOOL_DIR = Path(config.env_str("GATEWAY_SPOOL_DIR") or VAR_DIR / "spool")
# Each finished call's usage event also appended to a journal file in the
# spool directory (one write, no fsync): a killed gateway's queued events survive.
GATEWAY_USAGE_JOURNAL = config.env_bool("GATEWAY_USAGE_JOURNAL", True)
# Response cache entries kept in process when there is no Redis.
GATEWAY_RESPONSE_CACHE_ENTRIES = config.env_int("GATEWAY_RESPONSE_CACHE_ENTRIES", 10_000, minimum=0)
# Responses API: how long a stored response (store: true) can be retrieved and
# continued (previous_response_id), and how many are kept in process without Redis.
GATEWAY_RESPONSES_RETENTION_SECONDS = config.env_int(
    "GATEWAY_RESPONSES_RETENTION_SECONDS", 30 * 24 * 3600, minimum=1
)
GATEWAY_RESPONSES_MAX_ENTRIES = config.env_int("GATEWAY_RESPONSES_MAX_ENTRIES", 10_000, minimum=0)
# /metrics answers "Authorization: Bearer <GATEWAY_METRICS_TOKEN>" only (see below).
GATEWAY_METRICS_TOKEN = config.env_str("GATEWAY_METRICS_TOKEN")

# --- gateway hardening (issue 19) -------------------------------------------
# /metrics names every node and key-change counter: closed (401) unless a
# token is set and sent, or it is opened on purpose for an internal scraper.
GATEWAY_METRICS_PUBLIC = config.env_bool("GATEWAY_METRICS_PUBLIC", False)
# The gateway processes of one host (uvicorn --workers N) share their metrics
# through this directory: a scrape of any of them shows the whole host. Each
# separately scraped server needs its own (issue 20).
GATEWAY_METRICS_DIR = Path(config.env_str("GATEWAY_METRICS_DIR") or VAR_DIR / "metrics")
# Distinct models a process names in gateway_requests_total's model label
# (the rest count as "other").
GATEWAY_METRICS_MAX_MODELS = config.env_int("GATEWAY_METRICS_MAX_MODELS", 100, minimum=1)
# Deadline of each command of the limits' Redis client (seconds): past it the
# call gets 503 limits_unavailable instead of waiting on a stalled Redis.
GATEWAY_LIMITS_REDIS_TIMEOUT = config.env_float("GATEWAY_LIMITS_REDIS_TIMEOUT", 0.25, minimum=0.001)
# On Sentinel and Cluster: replicas that must acknowledge (WAIT) an admission or a
# settle before it counts, so a failover cannot lose it and let a cap overrun; with
# fewer the call gets 503 limits_unavailable. 0 trades that guarantee for
# availability while a primary has no replica. Ignored on one Redis.
GATEWAY_LIMITS_REDIS_REPLICAS = config.env_int("GATEWAY_LIMITS_REDIS_REPLICAS", 1, minimum=0)
# Presented keys found unusable are remembered (by their keyed hash) this long,
# at most this many, so a flood of garbage keys reaches the database once each.
GATEWAY_NEGATIVE_KEY_CACHE_SECONDS = config.env_int(
    "GATEWAY_NEGATIVE_KEY_CACHE_SECONDS", 300, minimum=0
)
GATEWAY_NEGATIVE_KEY_CACHE_ENTRIES = config.env_int(
    "GATEWAY_NEGATIVE_KEY_CACHE_ENTRIES", 100_000, minimum=0
)
# --- end of gateway hardening ------------------------------------------------

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

# --- observability (issue 20) -----------------------------------------------
# LOG_FORMAT: "json" (one JSON object a line, for a log pipeline) or "plain"
# (for a person at a terminal). Default: json with CONSOLE_PRODUCTION, plain
# otherwise (`manage.py up` on a laptop). The same handlers serve the web, the
# gateway and Celery (console.kernel.logs). ACCESS_LOG=false silences the per-request
# lines (console.access, gateway_bridge.access) and leaves the rest.
LOG_FORMAT = config.env_str("LOG_FORMAT", "json" if PRODUCTION else "plain").lower()
if LOG_FORMAT not in ("json", "plain"):
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r} is not one of: json, plain")
LOG_LEVEL = config.env_str("LOG_LEVEL", "INFO").upper()
ACCESS_LOG = config.env_bool("ACCESS_LOG", True)
LOGGING = logs.logging_config(log_format=LOG_FORMAT, level=LOG_LEVEL, access_log=ACCESS_LOG)
# Error reporting: with SENTRY_DSN set and sentry-sdk installed, errors go to
# Sentry (Django and Celery integrations, no personal data); console.kernel.observability.
SENTRY_DSN = config.env_str("SENTRY_DSN")
SENTRY_ENVIRONMENT = config.env_str("SENTRY_ENVIRONMENT", "production" if PRODUCTION else "local")
SENTRY_TRACES_SAMPLE_RATE = config.env_float("SENTRY_TRACES_SAMPLE_RATE", 0.0, minimum=0.0)
# OpenTelemetry: with OTEL_EXPORTER_OTLP_ENDPOINT set and the SDK installed
# (pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http), spans
# of each gateway call and usage ingest are exported over OTLP/HTTP. The SDK
# reads the other OTEL_* variables itself (headers, sampler, resource).
OTEL_EXPORTER_OTLP_ENDPOINT = config.env_str("OTEL_EXPORTER_OTLP_ENDPOINT")
OTEL_SERVICE_NAME = config.env_str("OTEL_SERVICE_NAME", "token-billing-console")

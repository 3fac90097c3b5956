"""Caches, the Celery broker and its workers (Redis, RabbitMQ or the embedded
filesystem broker), beat's base schedule, and the capacity planner's queue."""

from __future__ import annotations

from console.kernel import config
from console.settings.base import VAR_DIR

# --- caches and broker ----------------------------------------------------
# One Redis for every role below unless a role names its own (docs/configuration.md
# says which eviction policy each role's Redis needs).
REDIS_URL = config.env_str("REDIS_URL")
if REDIS_URL:
    config.parse_redis_url(REDIS_URL)
# Django's cache and the gateway's response cache: any eviction policy (allkeys-lru).
CACHE_REDIS_URL = config.env_str("CACHE_REDIS_URL") or REDIS_URL
# Cross-process notices (key revocations, price and node changes): holds no data.
PUBSUB_REDIS_URL = config.env_str("PUBSUB_REDIS_URL") or REDIS_URL
for _name, _url in (("CACHE_REDIS_URL", CACHE_REDIS_URL), ("PUBSUB_REDIS_URL", PUBSUB_REDIS_URL)):
    if _url and _url != REDIS_URL:
        config.parse_redis_url(_url, _name)
if CACHE_REDIS_URL:
    CACHES = {
        "default": {
            # Django's RedisCache for one Redis; Sentinel and Cluster URLs through
            # console.kernel.redis_url's clients (console.kernel.redis_cache).
            "BACKEND": "console.kernel.redis_cache.RedisCache",
            "LOCATION": CACHE_REDIS_URL,
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

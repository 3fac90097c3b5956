"""How the rest of the product tells running gateways that something they
cache changed.

Publishers (Django signal handlers, services) call ``publish`` after the
change has committed. Every gateway in this process hears it at once through
``subscribe``d callbacks; with Redis configured the message also goes to the
``<prefix>:gateway:events`` channel, which every gateway process listens to
(``gateway_bridge.state`` runs the listener), so a revoked key stops working
everywhere within the pub/sub delay (milliseconds), and within
``GATEWAY_KEY_CACHE_SECONDS`` even if a message is lost.

Messages are short strings: ``key:<id>``, ``sub:<id>``, ``org:<id>``,
``prices``, ``nodes``, ``balance:<org id>:<delta>``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from accounts.facade import ApiKey, Organization, SubAccount
from inference_node.facade import Node, connect_node_rows_changed
from usage.facade import connect_catalog_changes

logger = logging.getLogger(__name__)

Listener = Callable[[str], None]
_listeners: list[Listener] = []
_lock = threading.Lock()
_redis: Any = None  # a redis-py client, made on the first publish


def channel() -> str:
    prefix = settings.CACHES["default"].get("KEY_PREFIX") or "console"
    return f"{prefix}:gateway:events"


def subscribe(listener: Listener) -> Callable[[], None]:
    """Call ``listener(message)`` for every message published in this process
    (and, through the gateway's Redis listener, in others). Returns an
    unsubscribe function."""
    with _lock:
        _listeners.append(listener)

    def unsubscribe() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return unsubscribe


def deliver(message: str) -> None:
    """Hand ``message`` to this process's listeners (never raises)."""
    for listener in list(_listeners):
        try:
            listener(message)
        except Exception:
            logger.exception("gateway listener failed on %r", message)


def _redis_client() -> Any:
    global _redis
    if _redis is None:
        # deferred: only with a pub/sub Redis; the embedded setup never loads it
        from console.kernel import redis_url

        _redis = redis_url.sync_client(
            settings.PUBSUB_REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
    return _redis


def listen(
    stop: threading.Event,
    on_message: Listener,
    *,
    on_subscribed: Callable[[], None] | None = None,
) -> None:
    """Hand every message on the Redis channel to ``on_message`` until ``stop``
    is set (blocking: run it on a thread), resubscribing after any Redis error
    (``on_subscribed()`` after each subscription). On Sentinel it listens on
    the current primary (a failover drops the connection; the next
    subscription asks the sentinels again); on Cluster, on one node: a
    PUBLISH on any node reaches every node's subscribers."""
    # deferred: only with a pub/sub Redis; the embedded setup never loads it
    from console.kernel import redis_url

    while not stop.is_set():
        client = None
        try:
            client = redis_url.sync_client(
                settings.PUBSUB_REDIS_URL, socket_timeout=5, socket_connect_timeout=2
            )
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(channel())
            if on_subscribed is not None:
                on_subscribed()
            while not stop.is_set():
                message = pubsub.get_message(timeout=1.0)
                if message is None:
                    continue
                data = message.get("data")
                if isinstance(data, bytes):
                    on_message(data.decode("utf-8", "replace"))
        except Exception:
            if stop.is_set():
                break
            logger.warning("gateway: Redis listener lost; reconnecting", exc_info=True)
            stop.wait(0.2)
        finally:
            try:
                if client is not None:
                    client.close()
            except Exception:
                logger.debug("gateway: error closing the Redis listener", exc_info=True)


def publish(message: str) -> None:
    """Send ``message`` now: to this process's listeners and, with Redis, to
    every gateway process. A Redis failure is logged, not raised: the cache
    TTL is the safety net."""
    deliver(message)
    if settings.PUBSUB_REDIS_URL:
        try:
            _redis_client().publish(channel(), message)
        except Exception:
            logger.warning("gateway: could not publish %r to Redis", message, exc_info=True)


def publish_on_commit(message: str) -> None:
    transaction.on_commit(lambda: publish(message))


def key_changed(key_id: int) -> None:
    """An API key changed (the signal handlers call this for every save)."""
    publish_on_commit(f"key:{key_id}")


def connect_signals() -> None:
    """Wire the models the gateway caches to ``publish`` (AppConfig.ready)."""

    def on_key(sender: object, instance: Any, **kwargs: object) -> None:
        key_changed(instance.pk)

    def on_sub(sender: object, instance: Any, **kwargs: object) -> None:
        publish_on_commit(f"sub:{instance.pk}")

    def on_org(sender: object, instance: Any, **kwargs: object) -> None:
        publish_on_commit(f"org:{instance.pk}")

    def on_prices(sender: object, instance: Any, **kwargs: object) -> None:
        publish_on_commit("prices")

    def on_nodes(sender: object, instance: Any, **kwargs: object) -> None:
        publish_on_commit("nodes")

    for model, handler in (
        (ApiKey, on_key),
        (SubAccount, on_sub),
        (Organization, on_org),
        (Node, on_nodes),
    ):
        uid = f"gateway-{model._meta.label_lower}"
        post_save.connect(handler, sender=model, dispatch_uid=uid + "-save", weak=False)
        post_delete.connect(handler, sender=model, dispatch_uid=uid + "-delete", weak=False)
    connect_catalog_changes(on_prices, dispatch_uid="gateway")
    # a node's models, and its keys added, disabled or removed (the admin too)
    connect_node_rows_changed(on_nodes, dispatch_uid="gateway")

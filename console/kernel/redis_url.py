"""``REDIS_URL``: one Redis, a Sentinel-managed primary or a Redis Cluster,
and the redis-py clients for each (the Django cache, pub/sub, the gateway's
caches; the limits store has its own pipelined clients in
``gateway_bridge.limits.resp``).

Accepted forms::

    redis://[user:password@]host:6379/0         one Redis (unix:// too)
    rediss://[user:password@]host:6379/0        one Redis over TLS
    redis+sentinel://[user:password@]host:26379[,host:26379]/service_name[/db]
    sentinel://host:26379;sentinel://host:26380/0?master_name=service_name
                                                (kombu's form; the master name
                                                as a query parameter)
    redis+cluster://[user:password@]host:7000[,host:7001]

The user and password are the data nodes' (the sentinels are asked without).
A malformed URL raises ``ValueError`` naming what is wrong (settings turn it
into ``ImproperlyConfigured``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

PLAIN, SENTINEL, CLUSTER = "plain", "sentinel", "cluster"
FORMS = (
    "redis://host:6379/0, rediss://host:6379/0, "
    "redis+sentinel://host:26379[,host:26379]/service_name[/db], "
    "sentinel://host:26379[;sentinel://host:26379]/db?master_name=service_name or "
    "redis+cluster://host:7000[,host:7001]"
)


@dataclass(frozen=True)
class RedisTarget:
    kind: str  # PLAIN | SENTINEL | CLUSTER
    url: str  # as configured
    hosts: tuple[tuple[str, int], ...] = ()  # sentinels or cluster seed nodes
    service: str = ""  # the Sentinel master name
    db: int = 0
    username: str | None = None
    password: str | None = None

    @property
    def highly_available(self) -> bool:
        return self.kind != PLAIN


def _hosts(netlocs: list[str], default_port: int, name: str) -> tuple[tuple[str, int], ...]:
    out = []
    for netloc in netlocs:
        hostport = netloc.rpartition("@")[2]
        host, sep, port = hostport.rpartition(":")
        if not sep:
            host, port = hostport, str(default_port)
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{name} has an invalid host:port {hostport!r}; use {FORMS}")
        out.append((host, int(port)))
    return tuple(out)


def _credentials(netloc: str) -> tuple[str | None, str | None]:
    if "@" not in netloc:
        return None, None
    userinfo = netloc.rpartition("@")[0]
    user, sep, password = userinfo.partition(":")
    if not sep:
        return None, unquote(user) or None  # redis://secret@host: a password alone
    return unquote(user) or None, unquote(password) or None


def _db(text: str, name: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{name} names database {text!r}; a database is a number (0-15)")
    return int(text)


def parse(url: str, name: str = "REDIS_URL") -> RedisTarget:
    """``url`` as a ``RedisTarget``; ``ValueError`` with the accepted forms
    when it is not one of them."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or not rest:
        raise ValueError(f"{name} is not a URL: use {FORMS}")
    if scheme in {"redis", "rediss", "unix"}:
        return _parse_plain(url, name)
    if scheme == "redis+sentinel":
        return _parse_sentinel(url, rest, name)
    if scheme == "sentinel":  # kombu: sentinel://h1:p1;sentinel://h2:p2/db?master_name=...
        return _parse_kombu_sentinel(url, name)
    if scheme == "redis+cluster":
        return _parse_cluster(url, rest, name)
    raise ValueError(f"{name} has unsupported scheme {scheme!r}; use {FORMS}")


def _parse_plain(url: str, name: str) -> RedisTarget:
    """One Redis: ``redis://``, ``rediss://`` or ``unix://``, taken as is once its port reads."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise ValueError(f"{name} has an invalid port; use {FORMS}") from None
    return RedisTarget(PLAIN, url)


def _parse_sentinel(url: str, rest: str, name: str) -> RedisTarget:
    """``redis+sentinel://[user:password@]host:26379[,host:26379]/service_name[/db]``."""
    netloc, _, path = rest.partition("/")
    segments = [s for s in path.split("?")[0].split("/") if s]
    if not segments:
        raise ValueError(f"{name} names no Sentinel service: use {FORMS}")
    if len(segments) > 2:
        raise ValueError(f"{name} has too many path segments: use {FORMS}")
    user, password = _credentials(netloc)
    return RedisTarget(
        SENTINEL,
        url,
        _hosts(netloc.rpartition("@")[2].split(","), 26379, name),
        service=unquote(segments[0]),
        db=_db(segments[1], name) if len(segments) == 2 else 0,
        username=user,
        password=password,
    )


def _parse_kombu_sentinel(url: str, name: str) -> RedisTarget:
    """Kombu's ``sentinel://h1:p1;sentinel://h2:p2/db?master_name=service_name``."""
    query = parse_qs(urlsplit(url).query)
    service = (query.get("master_name") or [""])[0]
    if not service:
        raise ValueError(f"{name} in kombu's sentinel:// form needs ?master_name=; use {FORMS}")
    netlocs: list[str] = []
    db, user, password = 0, None, None
    for part in url.split("?")[0].split(";"):
        p_scheme, _, p_rest = part.strip().partition("://")
        if p_scheme.lower() != "sentinel" or not p_rest:
            raise ValueError(f"{name} mixes sentinel:// with {p_scheme!r}; use {FORMS}")
        netloc, _, path = p_rest.partition("/")
        if path.strip("/"):
            db = _db(path.strip("/"), name)
        u, p = _credentials(netloc)
        user, password = u or user, p or password
        netlocs.append(netloc.rpartition("@")[2])
    return RedisTarget(
        SENTINEL,
        url,
        _hosts(netlocs, 26379, name),
        service=service,
        db=db,
        username=user,
        password=password,
    )


def _parse_cluster(url: str, rest: str, name: str) -> RedisTarget:
    """``redis+cluster://[user:password@]host:7000[,host:7001]`` (database 0 only)."""
    netloc, _, path = rest.partition("/")
    if path.strip("/") not in {"", "0"}:
        raise ValueError(f"{name}: Redis Cluster has database 0 only")
    user, password = _credentials(netloc)
    return RedisTarget(
        CLUSTER,
        url,
        _hosts(netloc.rpartition("@")[2].split(","), 6379, name),
        username=user,
        password=password,
    )


def sync_client(url: str, **options: Any) -> Any:
    """A redis-py client for ``url`` (``redis.Redis``, a Sentinel-resolved
    ``redis.Redis`` that follows failovers, or ``redis.cluster.RedisCluster``);
    ``options`` are redis-py's (``socket_timeout``, ...)."""
    # deferred: redis-py loads only in a process that opens a client (not the settings')
    import redis

    target = parse(url)
    if target.kind == PLAIN:
        return redis.Redis.from_url(url, **options)
    if target.kind == SENTINEL:
        # deferred: as redis above
        from redis.sentinel import Sentinel

        sentinel = Sentinel(list(target.hosts), sentinel_kwargs=_sentinel_options(options))
        return sentinel.master_for(
            target.service,
            db=target.db,
            username=target.username,
            password=target.password,
            **options,
        )
    # deferred: as redis above
    from redis.cluster import ClusterNode, RedisCluster

    nodes = [ClusterNode(h, p) for h, p in target.hosts]
    return RedisCluster(
        startup_nodes=nodes, username=target.username, password=target.password, **options
    )


def async_client(url: str, **options: Any) -> Any:
    """``sync_client``'s asyncio twin (``redis.asyncio``)."""
    # deferred: redis-py loads only in a process that opens a client (not the settings')
    import redis.asyncio as aioredis

    target = parse(url)
    if target.kind == PLAIN:
        return aioredis.Redis.from_url(url, **options)
    if target.kind == SENTINEL:
        # deferred: as redis.asyncio above
        from redis.asyncio.sentinel import Sentinel

        sentinel = Sentinel(list(target.hosts), sentinel_kwargs=_sentinel_options(options))
        return sentinel.master_for(
            target.service,
            db=target.db,
            username=target.username,
            password=target.password,
            **options,
        )
    # deferred: as redis.asyncio above
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    nodes = [ClusterNode(h, p) for h, p in target.hosts]
    return RedisCluster(
        startup_nodes=nodes, username=target.username, password=target.password, **options
    )


def _sentinel_options(options: dict) -> dict:
    return {k: v for k, v in options.items() if k in {"socket_timeout", "socket_connect_timeout"}}


def broker(url: str, name: str = "CELERY_BROKER_URL") -> tuple[str, dict]:
    """Celery's broker URL and transport options for a Redis ``url``: as is
    for one Redis, kombu's ``sentinel://`` transport (``master_name``) for
    Sentinel. Kombu has no Redis Cluster transport: a cluster URL is refused."""
    target = parse(url, name)
    if target.kind == CLUSTER:
        raise ValueError(
            f"{name} is a Redis Cluster URL; Celery's broker cannot run on Redis Cluster. "
            "Set CELERY_BROKER_URL to a Sentinel URL (redis+sentinel://...), one Redis "
            "(redis://...) or RabbitMQ (amqp://...)"
        )
    if target.kind == PLAIN:
        return url, {}
    cred = ""
    if target.password:
        cred = f"{quote(target.username or '', safe='')}:{quote(target.password, safe='')}@"
    urls = ";".join(f"sentinel://{cred}{h}:{p}/{target.db}" for h, p in target.hosts)
    return urls, {"master_name": target.service}

"""Django's Redis cache on any ``REDIS_URL`` form (``console.kernel.redis_url``): one
Redis exactly as Django's own backend; a Sentinel URL through a client that
follows the primary across failovers; a Cluster URL through redis-py's
RedisCluster, with the multi-key operations done key by key (the keys of one
``get_many`` may live on different nodes)."""

from __future__ import annotations

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient

from console.kernel import redis_url


class _HighlyAvailableClient(RedisCacheClient):
    def __init__(self, servers, **options):
        super().__init__(servers, **options)
        self._target = redis_url.parse(servers[0], "the cache LOCATION")
        self._ha = None

    def get_client(self, key=None, *, write=False):
        if self._ha is None:
            options = dict(self._pool_options)
            if self._target.kind == redis_url.CLUSTER:
                options.pop("parser_class", None)
            self._ha = redis_url.sync_client(self._target.url, **options)
        return self._ha

    def get_many(self, keys):
        if self._target.kind != redis_url.CLUSTER:
            return super().get_many(keys)
        client = self.get_client()
        out = {}
        for key in keys:
            value = client.get(key)
            if value is not None:
                out[key] = self._serializer.loads(value)
        return out

    def set_many(self, data, timeout):
        if self._target.kind != redis_url.CLUSTER:
            return super().set_many(data, timeout)
        for key, value in data.items():
            self.set(key, value, timeout)

    def delete_many(self, keys):
        if self._target.kind != redis_url.CLUSTER:
            return super().delete_many(keys)
        client = self.get_client(write=True)
        for key in keys:
            client.delete(key)


class RedisCache(DjangoRedisCache):
    def __init__(self, server, params):
        if isinstance(server, str) and redis_url.parse(server).highly_available:
            # One URL naming several sentinels or nodes: not a list of servers.
            super().__init__([server], params)
            self._class = _HighlyAvailableClient
        else:
            super().__init__(server, params)

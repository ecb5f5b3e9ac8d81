"""The cache of a deployment with Redis: Django's Redis cache, which a lost Redis only empties.

Production settings point ``CACHES`` here. What the cache holds — django-allauth's counts of
login, sign-up and password-reset attempts — is disposable, as everything in Redis is
(docs/design.md#processes): while Redis cannot be reached, reads miss and writes are dropped
(logged), so logging in
still works, counted by nothing, instead of answering 500.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.core.cache.backends.redis import RedisCache
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _or(fallback: Callable[..., T]) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Call the method; when Redis does not answer, log it and return ``fallback(self, *args)``."""

    def decorate(method: Callable[..., T]) -> Callable[..., T]:
        @wraps(method)
        def call(self: TolerantRedisCache, *args: Any, **kwargs: Any) -> T:
            try:
                return method(self, *args, **kwargs)
            except RedisError:
                logger.warning("cache %s not done: Redis did not answer", method.__name__, exc_info=True)
                return fallback(self, *args, **kwargs)

        return call

    return decorate


def _default(self: TolerantRedisCache, key: Any, default: Any = None, *args: Any, **kwargs: Any) -> Any:
    return default


def _missing(self: TolerantRedisCache, key: Any, *args: Any, **kwargs: Any) -> int:
    raise ValueError(f"Key {key!r} not found.")


class TolerantRedisCache(RedisCache):
    """:class:`django.core.cache.backends.redis.RedisCache` that treats a Redis it cannot reach as
    an empty cache that keeps nothing: ``get`` gives the default, ``get_many`` nothing, ``has_key``
    and ``touch`` and ``delete`` False, ``incr`` the missing key's ``ValueError``; ``set`` and
    ``set_many`` and ``delete_many`` and ``clear`` do nothing; ``add`` says it added (a lock taken
    with it is had, so no caller waits on a Redis that is gone). Each is logged as a warning."""

    get = _or(_default)(RedisCache.get)
    get_many = _or(lambda self, keys, *a, **k: {})(RedisCache.get_many)
    has_key = _or(lambda self, *a, **k: False)(RedisCache.has_key)
    touch = _or(lambda self, *a, **k: False)(RedisCache.touch)
    delete = _or(lambda self, *a, **k: False)(RedisCache.delete)
    incr = _or(_missing)(RedisCache.incr)
    set = _or(lambda self, *a, **k: None)(RedisCache.set)
    set_many = _or(lambda self, data, *a, **k: list(data))(RedisCache.set_many)
    delete_many = _or(lambda self, *a, **k: None)(RedisCache.delete_many)
    clear = _or(lambda self, *a, **k: None)(RedisCache.clear)
    add = _or(lambda self, *a, **k: True)(RedisCache.add)

"""Django with django-redis: a view under ``@locked`` that shares django-redis's connection
pool and excludes django-redis's own ``cache.lock()``.

- The provider is a zero-argument function, called on first use (after Django has loaded its
  settings), returning the connection django-redis already pools for the "default" cache.
- django-redis's ``cache.lock("order:9")`` takes the key ``:1:order:9``: the cache's
  ``<KEY_PREFIX>:<VERSION>:<key>``, with KEY_PREFIX "" and VERSION 1 by default. ``@locked``
  takes ``prefix + name``, so ``prefix=":1:"`` names that same key and the two exclude each
  other both ways (both hold a plain string token with an expiry). With KEY_PREFIX = "shop"
  it would be ``prefix="shop:1:"``.
- A busy order is refused at once (``wait=0``); the middleware answers ``LockNotAcquired``
  with 409 Conflict and ``Retry-After``.

The settings are in code so the file runs alone; in a project they go in settings.py, the
``register_provider`` call in an ``AppConfig.ready()`` and the middleware in MIDDLEWARE. Run
``python examples/recipes/django_recipe.py`` for a self-contained demonstration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

import django
import redis
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client
from django.urls import path

# django-redis ships no type information; the one function used here is typed where it is used.
from django_redis import get_redis_connection  # type: ignore[import-untyped]  # pyright: ignore[reportMissingTypeStubs]
from redis.lock import Lock as RedisLock

from redlock_deco import Lock, LockNotAcquired, locked, register_provider
from redlock_deco.testing import redis_url

# Seconds a refused client should wait: a guess, since a held lock says nothing of when its
# holder will be done (it is renewed for as long as the view runs).
RETRY_AFTER = 1
CACHE_KEY_PREFIX = ":1:"  # what django-redis puts before a key: KEY_PREFIX:VERSION:


def django_redis_client() -> redis.Redis:
    """The Redis connection of django-redis's "default" cache, from its pool."""
    client: redis.Redis = get_redis_connection("default")
    return client


register_provider("default", django_redis_client)  # a callable: resolved on first use


class DjangoRedisCache(Protocol):
    """What django-redis's cache adds to Django's (whose types know only BaseCache)."""

    def lock(self, key: str, timeout: float | None = None) -> RedisLock: ...


redis_cache = cast(DjangoRedisCache, cache)  # Django's cache, seen as django-redis's


@locked("order:{order_id}", prefix=CACHE_KEY_PREFIX, ttl=30, wait=0)
def ship(request: HttpRequest, order_id: int) -> HttpResponse:
    return JsonResponse({"order": order_id, "shipped": True})  # the work: charge, label...


class LockBusyMiddleware:
    """Answers a busy lock with 409 Conflict and Retry-After."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, error: Exception) -> HttpResponse | None:
        if not isinstance(error, LockNotAcquired):
            return None
        response = JsonResponse({"detail": f"{error.name} is busy"}, status=409)
        response["Retry-After"] = str(RETRY_AFTER)
        return response


urlpatterns = [path("orders/<int:order_id>/ship", ship)]


def setup(url: str) -> None:
    """Configure Django for this one-file app, its cache on the Redis at ``url``."""
    settings.configure(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=[f"{__name__}.LockBusyMiddleware"],
        ALLOWED_HOSTS=["testserver"],  # the host name of Django's test client
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}},
    )
    django.setup()


def main() -> int:
    with redis_url() as url:
        setup(url)
        browser = Client()
        # Other code holds the order the django-redis way: the view is refused...
        with redis_cache.lock("order:9", timeout=30):
            refused = browser.post("/orders/9/ship")
        shipped = browser.post("/orders/9/ship")
        with Lock("order:9", prefix=CACHE_KEY_PREFIX):  # ...and the other way round
            taken = redis_cache.lock("order:9").acquire(blocking=False)
    print("cache.lock held:", refused.status_code, refused["Retry-After"], refused.json())
    print("then:", shipped.status_code, shipped.json())
    print("Lock held: cache.lock(...).acquire(blocking=False) ->", taken)
    return 0 if (refused.status_code, shipped.status_code, taken) == (409, 200, False) else 1


if __name__ == "__main__":
    raise SystemExit(main())

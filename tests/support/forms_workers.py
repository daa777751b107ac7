"""Callable forms run in separate processes (multiprocessing "spawn": fresh interpreters).

The classes and functions live at module level so that their ``name=None`` lock names
(``forms_workers.Account.charge``...) are the same in every process that imports them.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Any

import redis

from redlock_deco import current_lease, locked, register_provider


def section(client: redis.Redis, form: str) -> int:
    """A non-atomic read-modify-write of ``count:<form>``, gauged by ``inside:<form>``.

    Returns how many holders were inside at once (1 under a working lock)."""
    inside = int(client.incr(f"inside:{form}"))
    value = int(client.get(f"count:{form}") or 0)
    time.sleep(0.002)  # widen the race window: without the lock, updates get lost
    client.set(f"count:{form}", value + 1)
    client.decr(f"inside:{form}")
    return inside


def bump(client: redis.Redis, form: str, order_id: int) -> int:
    return section(client, form)


class Account:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def charge(self, form: str, order_id: int) -> int:
        return section(self.client, form)

    def __call__(self, form: str, order_id: int) -> int:
        return section(self.client, form)


class AsyncHandler:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    async def __call__(self, form: str, order_id: int) -> int:
        await asyncio.sleep(0)
        return section(self.client, form)


def lease_name(*args: Any) -> str:
    """The name of the lease protecting the current call."""
    lease = current_lease()
    assert lease is not None
    return lease.name


class Named:
    """Bodies reporting the lock name their ``name=None`` decoration rendered."""

    def meth(self) -> str:
        return lease_name()

    def __call__(self) -> str:
        return lease_name()


def default_names() -> dict[str, str]:
    """``name=None`` names of a bound method, a partial and a callable object, as rendered."""
    return {
        "bound_method": locked()(Named().meth)(),
        "partial": locked()(functools.partial(lease_name, "pre-filled"))(),
        "callable_object": locked()(Named())(),
    }


def contend(url: str, times: int, barrier: Any) -> dict[str, Any]:
    """Run each form ``times`` times, started together with the other process. Returns the
    most holders seen inside at once per form, and this process's ``name=None`` names."""
    register_provider("default", url)
    client = redis.Redis.from_url(url)
    template = locked("order:{form}:{order_id}", wait=30)
    forms: dict[str, Callable[..., Any]] = {
        "function": functools.partial(template(bump), client),
        "partial": template(functools.partial(bump, client)),
        "bound_method": template(Account(client).charge),  # a new object in every process
        "callable_object": template(Account(client)),
    }
    handler = template(AsyncHandler(client))
    barrier.wait(30)
    peaks = {form: max(call(form, 42) for _ in range(times)) for form, call in forms.items()}

    async def run_async() -> int:
        return max([await handler("async_callable_object", 42) for _ in range(times)])

    peaks["async_callable_object"] = asyncio.run(run_async())
    names = default_names()
    client.close()
    return {"peaks": peaks, "names": names}


def contend_into(url: str, times: int, barrier: Any, out: Any) -> None:
    out.put(contend(url, times, barrier))

"""Owners for tests/integration/test_shared_stateful.py and the reader/writer exclusion
checker of tests/integration/test_shared_faults.py.

An owner is a long-lived thread (sync) or task (asyncio) that acts on one lock name through
``Lock`` objects of both modes -- ``shared=True`` (a reader) or not (a writer) -- and two
variants (see ``VARIANTS``), so ownership per thread or task is real. The objects are shared
by every owner (ownership is per owner, not per object). Commands are tuples
``(op, mode, variant, arg)``; replies are ``("ok", value)``, ``("raised", class name,
message)`` for our own ``LockError``s, or ``("error", traceback)`` for anything else.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import traceback
from typing import Any

import redis

import redlock_deco
import redlock_deco.asyncio
from redlock_deco import Lock, LockError

from .lease_commands import (
    NOT_COMMON,
    describe,
    release_everything,
    release_everything_async,
    run_common,
    run_common_async,
)
from .stateful import LoopOwners, QueueOwner

NAME = "doc"
MODES = ("r", "w")  # reader (shared=True), writer (exclusive)
# "manual" leases are never renewed and expire after their short ttl; "renewed" ones are
# kept alive by the renewer.
VARIANTS: dict[str, dict[str, Any]] = {
    "manual": {"ttl": 0.3, "auto_renew": False},
    "renewed": {"ttl": 2.0, "auto_renew": True},
}
CALL_TIMEOUT = 15.0


def make(mode: str, variant: str, *, is_async: bool = False) -> Any:
    cls: Any = redlock_deco.asyncio.Lock if is_async else Lock
    return cls(NAME, wait=0, shared=mode == "r", **VARIANTS[variant])


def wrap_error(exc: BaseException) -> tuple[Any, ...]:
    if isinstance(exc, LockError):
        return ("raised", type(exc).__name__, str(exc))
    return ("error", "".join(traceback.format_exception(exc)))


# -- sync owners (threads) -----------------------------------------------------------------


class ThreadOwner(QueueOwner):
    """A worker thread acting on the shared objects; commands go through queues."""

    def __init__(self, name: str, objects: dict[tuple[str, str], Any]) -> None:
        self.objects = objects
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.outbox: queue.Queue[Any] = queue.Queue()
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            cmd = self.inbox.get()
            if cmd is None:
                return
            try:
                reply: tuple[Any, ...] = ("ok", self._run(*cmd))
            except Exception as exc:
                reply = wrap_error(exc)
            self.outbox.put(reply)

    def _run(self, op: str, mode: str = "r", variant: str = "manual", arg: Any = None) -> Any:
        if op == "reset":
            return release_everything(self.objects.values())
        obj = self.objects[(mode, variant)]
        if op == "acquire":
            granted = obj.acquire()
            return granted, describe(obj.lease)
        if (value := run_common(obj, op, arg)) is not NOT_COMMON:
            return value
        if op == "holders":
            return obj.holders(), obj.locked()
        raise ValueError(f"unknown command {op!r}")


def sync_owners(names: tuple[str, ...]) -> dict[str, ThreadOwner]:
    objects = {(mode, variant): make(mode, variant) for mode in MODES for variant in VARIANTS}
    return {name: ThreadOwner(f"owner-{name}", objects) for name in names}


# -- asyncio owners (tasks of one loop) --------------------------------------------------------


class AsyncOwners(LoopOwners):
    """Owner tasks of one loop sharing every lock object (ownership is per task)."""

    def obj(self, mode: str, variant: str) -> Any:
        if (mode, variant) not in self.objects:
            self.objects[(mode, variant)] = make(mode, variant, is_async=True)
        return self.objects[(mode, variant)]

    async def _run(self, op: str, mode: str = "r", variant: str = "manual", arg: Any = None) -> Any:
        if op == "reset":
            return await release_everything_async(self.objects.values())
        obj = self.obj(mode, variant)
        if op == "acquire":
            granted = await obj.acquire()
            return granted, describe(obj.lease)
        if (value := await run_common_async(obj, op, arg)) is not NOT_COMMON:
            return value
        if op == "holders":
            return await obj.holders(), await obj.locked()
        raise ValueError(op)


# -- the reader/writer exclusion checker under network faults (test_shared_faults.py) -------


def rw_sections(spec: dict[str, Any], role: dict[str, Any]) -> dict[str, Any]:
    """Run @locked(NAME, shared=role["shared"]) sections until ``spec["stop"]`` appears.

    Like tests/workers.py's ``guarded_sections``: the section logs ``+R id`` / ``+W id`` on
    entry and ``-id`` on exit through ``spec["checker"]`` (a direct connection), so the log's
    order is the server's own. Outcomes per section: ``clean``, ``lost`` (LockLost) or
    ``error`` (a connection error after it ran); calls that never entered count as ``busy``
    or ``failed``.
    """
    import random

    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from redlock_deco import LockLost, LockNotAcquired, locked, register_provider

    checker = redis.Redis.from_url(spec["checker"])
    worker = role["name"]
    tag = "R" if role["shared"] else "W"
    rand = random.Random(worker)
    result: dict[str, Any] = {"worker": worker, "sections": {}, "busy": 0, "failed": 0}
    client = redis.Redis.from_url(
        role["url"],
        retry=Retry(NoBackoff(), role["retries"]),
        socket_timeout=role["timeout"],
        socket_connect_timeout=role["timeout"],
    )
    register_provider("default", client)

    @locked(NAME, shared=role["shared"], ttl=spec["ttl"], wait=2.0)
    def section(sid: str) -> None:
        checker.rpush(spec["events"], f"+{tag}{sid}")
        result["sections"][sid] = "error"
        if rand.random() < role["long"]:
            time.sleep(spec["ttl"] * rand.choice([1.5, 3.0]))
        else:
            time.sleep(rand.uniform(0.001, 0.03))
        checker.rpush(spec["events"], f"-{sid}")

    checker.incr(spec["ready"])
    for n in itertools.count():
        if checker.exists(spec["stop"]):
            break
        sid = f"{worker}.{n}"
        try:
            section(sid)
        except LockNotAcquired:
            result["busy"] += 1
        except LockLost:
            result["sections"][sid] = "lost"
        except redis.RedisError:
            result["failed"] += sid not in result["sections"]
        else:
            result["sections"][sid] = "clean"
        time.sleep(rand.uniform(0, 0.01))
    # The client stays open: a background clean-up of an acquire cut short may still run.
    checker.close()
    return result


# -- crashed and stopped readers (test_shared_faults.py) ---------------------------------------


def hold_shared(url: str, ttl: float, seconds: float, ready: Any, out: Any) -> None:
    """Hold NAME shared through a call of ``seconds`` (renewed, ``ttl``); the parent kills
    or stops us meanwhile. Reports how the call ended."""
    from redlock_deco import LockLost, locked, register_provider

    register_provider("default", url)

    @locked(NAME, shared=True, ttl=ttl, wait=5)
    def long_read() -> None:
        ready.set()
        time.sleep(seconds)

    try:
        long_read()
        out.put("completed")
    except LockLost:
        out.put("LockLost")

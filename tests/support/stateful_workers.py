"""Owners for the state machines of tests/test_stateful.py.

An owner is a long-lived thread, process or asyncio task that holds its own ``Lock`` /
``Semaphore`` objects and runs the commands the machine sends it, so ownership per thread
(or task, or process) is real. Commands are tuples ``(op, kind, name, variant, arg)``; the
reply is ``("ok", value)``, ``("raised", exception class name, message)`` for our own
``LockError``s, or ``("error", traceback)`` for anything else (which fails the machine).

The process owner runs :func:`serve_process` in a fresh interpreter (multiprocessing spawn).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import redlock_deco
import redlock_deco.asyncio
from redlock_deco import Lock, LockError, Semaphore

LIMIT = 2
# The lease options of each object variant: "manual" leases are never renewed and expire
# after their short ttl; "renewed" ones are kept alive by the renewer.
VARIANTS: dict[str, dict[str, Any]] = {
    "manual": {"ttl": 0.3, "auto_renew": False},
    "renewed": {"ttl": 1.0, "auto_renew": True},
}


def make(kind: str, name: str, variant: str, *, is_async: bool = False) -> Any:
    """A lock or a semaphore (limit LIMIT) of one variant, that never waits."""
    options = VARIANTS[variant]
    if kind == "lock":
        cls: Any = redlock_deco.asyncio.Lock if is_async else Lock
        return cls(name, wait=0, **options)
    cls = redlock_deco.asyncio.Semaphore if is_async else Semaphore
    return cls(name, limit=LIMIT, wait=0, **options)


def describe(lease: Any) -> tuple[str, bool, float] | None:
    """What the machine compares of a lease: token, lost flag, remaining seconds."""
    return None if lease is None else (lease.token, lease.lost, lease.remaining())


def wrap(run: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", run())
    except LockError as exc:
        return ("raised", type(exc).__name__, str(exc))
    except Exception:
        return ("error", traceback.format_exc())


class SyncOwner:
    """Runs commands on sync primitives in the calling thread (its owner)."""

    def __init__(self, shared: dict[tuple[str, str, str], Any] | None = None) -> None:
        self.shared = shared if shared is not None else {}  # objects several threads use
        self.objects: dict[tuple[str, str, str], Any] = {}

    def obj(self, kind: str, name: str, variant: str) -> Any:
        key = (kind, name, variant)
        if key in self.shared:
            return self.shared[key]
        if key not in self.objects:
            self.objects[key] = make(kind, name, variant)
        return self.objects[key]

    def execute(self, cmd: tuple[Any, ...]) -> tuple[Any, ...]:
        return wrap(lambda: self._run(*cmd))

    def _run(
        self, op: str, kind: str = "", name: str = "", variant: str = "", arg: Any = None
    ) -> Any:
        if op == "reset":
            return self.reset()
        obj = self.obj(kind, name, variant)
        if op == "acquire":
            ok = obj.acquire()
            return ok, describe(obj.lease)
        if op == "release":
            obj.release()
            return None
        if op == "extend":
            obj.extend(arg)
            return None
        if op == "owned":
            owned = obj.owned()
            return owned, describe(obj.lease)
        if op == "probe":
            return describe(obj.lease)
        if op == "holders":
            return obj.holders()
        raise ValueError(f"unknown command {op!r}")

    def reset(self) -> tuple[int, int]:
        """Release everything this owner holds through any object; (released, not owned)."""
        released = failed = 0
        for obj in [*self.objects.values(), *self.shared.values()]:
            for _ in range(100):
                if obj.lease is None:
                    break
                try:
                    obj.release()
                    released += 1
                except LockError:
                    failed += 1
        self.objects.clear()
        return released, failed


def serve_thread(inbox: Any, outbox: Any, shared: dict[tuple[str, str, str], Any]) -> None:
    """A worker thread: run commands until ``None`` arrives."""
    owner = SyncOwner(shared)
    while True:
        cmd = inbox.get()
        if cmd is None:
            return
        outbox.put(owner.execute(cmd))


def serve_process(conn: Any, url: str) -> None:
    """A worker process (spawn): run commands from ``conn`` until ``None`` arrives."""
    redlock_deco.register_provider("default", url)
    owner = SyncOwner()
    conn.send(("ok", "ready"))
    while True:
        cmd = conn.recv()
        if cmd is None:
            break
        conn.send(owner.execute(cmd))
    owner.reset()
    conn.close()

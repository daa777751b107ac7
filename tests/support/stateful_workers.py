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

from .lease_commands import NOT_COMMON, describe, release_everything, run_common

LIMIT = 2
# The lease options of each object variant: "manual" leases are never renewed and expire
# after their short ttl; "renewed" ones are kept alive by the renewer.
VARIANTS: dict[str, dict[str, Any]] = {
    "manual": {"ttl": 0.3, "auto_renew": False},
    "renewed": {"ttl": 2.0, "auto_renew": True},
}


def make(kind: str, name: str, variant: str, *, is_async: bool = False) -> Any:
    """A lock or a semaphore (limit LIMIT) of one variant, that never waits."""
    options = VARIANTS[variant]
    if kind == "lock":
        cls: Any = redlock_deco.asyncio.Lock if is_async else Lock
        return cls(name, wait=0, **options)
    cls = redlock_deco.asyncio.Semaphore if is_async else Semaphore
    return cls(name, limit=LIMIT, wait=0, **options)


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
        if op == "holders":
            return obj.holders()
        if (value := run_common(obj, op, arg)) is not NOT_COMMON:
            return value
        raise ValueError(f"unknown command {op!r}")

    def reset(self) -> tuple[int, int]:
        """Release everything this owner holds through any object; (released, not owned)."""
        released = release_everything([*self.objects.values(), *self.shared.values()])
        self.objects.clear()
        return released


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

"""Who holds what, per owner: a thread for sync code, an asyncio task for async code.

Locks are re-entrant: one lease per (provider, key) and owner, counted. (Semaphores are not;
which object took which slot is kept by the primitive objects themselves.) Each owner also has
a stack of the protected sections it is inside, for ``current_lease()``.

Async ownership is keyed by the task object itself, not by a context variable: a context is
copied into child tasks, which would let a task spawned inside a locked section believe it
holds its parent's lock. (redis-py's asyncio Lock keeps its token in a thread-local, so all
tasks of a loop share it and can release each other's lock.)

Re-entrancy is decided here without any round trip. The tables are reset in a forked child: a
child is a different process and must take its own locks, never inherit its parent's.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import weakref
from typing import Any

from .lease import Lease

HoldingKey = tuple[str, str]  # (provider name, Redis key)
Holdings = dict[HoldingKey, Lease]
Calls = list[tuple[int, Lease]]  # protected sections entered, innermost last, with a sequence

_local = threading.local()
Tables = tuple[Holdings, Calls]
_tasks: weakref.WeakKeyDictionary[asyncio.Task[Any], Tables] = weakref.WeakKeyDictionary()
_sequence = itertools.count()


def _thread_tables() -> Tables:
    try:
        tables: Tables = _local.tables
    except AttributeError:
        tables = _local.tables = ({}, [])
    return tables


def _task_tables() -> Tables:
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("redlock_deco.asyncio primitives must be used inside an asyncio task")
    tables = _tasks.get(task)
    if tables is None:
        tables = _tasks[task] = ({}, [])
    return tables


def thread_holdings() -> Holdings:
    """The locks the current thread holds (re-entrantly), by (provider, key)."""
    return _thread_tables()[0]


def task_holdings() -> Holdings:
    """The locks the current asyncio task holds (re-entrantly), by (provider, key)."""
    return _task_tables()[0]


def enter_call(lease: Lease, *, task: bool) -> Calls:
    """Record that the calling thread (or task) is inside a section protected by ``lease``;
    returns the stack to pop from when it leaves."""
    calls = (_task_tables() if task else _thread_tables())[1]
    calls.append((next(_sequence), lease))
    return calls


def thread_calls() -> Calls:
    return _thread_tables()[1]


def task_calls() -> Calls:
    return _task_tables()[1]


def current_lease() -> Lease | None:
    """The innermost lease held by the calling thread or task, inside a protected call.

    Sync code running inside a task and a task's loop running inside a locked sync call both
    happen: the most recently entered of the two stacks' tops is the innermost.
    """
    candidates = [_thread_tables()[1]]
    try:
        if asyncio.current_task() is not None:
            candidates.append(_task_tables()[1])
    except RuntimeError:
        pass  # no running loop in this thread
    tops = [calls[-1] for calls in candidates if calls]
    return max(tops, key=lambda entry: entry[0])[1] if tops else None


def _after_fork_in_child() -> None:
    global _local
    _local = threading.local()
    _tasks.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)

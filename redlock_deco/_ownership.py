"""Who holds what, per owner: a thread for sync code, an asyncio task for async code.

Locks are re-entrant: one lease per (provider, key) and owner, counted. (Semaphores are not;
which object took which slot is kept by the primitive objects themselves.) Each owner also has
a stack of the protected sections it is inside, for ``current_lease()``.

Async ownership is keyed by the task object itself, not by a context variable: a context is
copied into child tasks, which would let a task spawned inside a locked section believe it
holds its parent's lock. (redis-py's asyncio Lock keeps its token in a thread-local, so all
tasks of a loop share it and can release each other's lock.) The tables live in
:mod:`redlock_deco._process`, which resets them in a forked child.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, TypeVar, overload

from . import _process as process
from ._errors import LockError
from ._lifecycle import Lease
from ._process import Calls, Holdings

Section = tuple[Calls, tuple[int, Lease]]  # where a protected section was recorded, and how
_sequence = itertools.count()


def thread_holdings() -> Holdings:
    """The locks the current thread holds (re-entrantly), by (provider, key)."""
    return process.thread_tables()[0]


def task_holdings(task: asyncio.Task[object] | None = None) -> Holdings:
    """The locks the current (or the given) asyncio task holds, by (provider, key)."""
    return process.task_tables(task)[0]


def enter_call(lease: Lease, *, task: bool) -> Section:
    """Record that the calling thread (or task) is inside a section protected by ``lease``;
    hand the result to :func:`leave_call` when it leaves."""
    calls = (process.task_tables() if task else process.thread_tables())[1]
    entry = (next(_sequence), lease)
    calls.append(entry)
    return calls, entry


def leave_call(section: Section) -> None:
    """Forget one protected section, wherever it sits in its stack.

    By identity, not by popping the top: sections can end out of order (a generator
    suspended inside a ``with Lock`` outlives the call that started it), and popping would
    drop the wrong entry and leave a stale one behind.
    """
    calls, entry = section
    for index in range(len(calls) - 1, -1, -1):
        if calls[index] is entry:
            del calls[index]
            return


def leave_calls(sections: list[Section]) -> None:
    for section in reversed(sections):
        leave_call(section)


_NO_DEFAULT: Any = object()
D = TypeVar("D")


@overload
def current_lease() -> Lease: ...
@overload
def current_lease(default: D) -> Lease | D: ...
def current_lease(default: Any = _NO_DEFAULT) -> Any:
    """The innermost lease held by the calling thread or task, inside a protected call.

    Inside a ``@locked``/``@limited`` call or a ``with Lock(...)``/``Semaphore(...)`` block
    there always is one: ``.name``, ``.key``, ``.token``, ``.fencing_token``, ``.remaining()``,
    ``.lost``. Outside one, it raises :class:`LockError` -- a lease read there is a bug (say, in
    a thread or task started inside the call, which does not inherit it), better reported
    than answered with None -- unless ``default`` is given, which is returned instead (as
    :meth:`contextvars.ContextVar.get` does): ``current_lease(None)``.

    Sync code running inside a task and a task's loop running inside a locked sync call both
    happen: the most recently entered of the two stacks' tops is the innermost.
    """
    candidates = [process.thread_tables()[1]]
    try:
        if asyncio.current_task() is not None:
            candidates.append(process.task_tables()[1])
    except RuntimeError:
        pass  # no running loop in this thread
    tops = [calls[-1] for calls in candidates if calls]
    if tops:
        return max(tops, key=lambda entry: entry[0])[1]
    if default is not _NO_DEFAULT:
        return default
    raise LockError(
        "current_lease() was called outside any protected call of this thread or task: call "
        "it inside a @locked/@limited function or a `with Lock(...)` block (a thread or task "
        "started inside one does not inherit its lease), or pass a default, as in "
        "current_lease(None), to get that instead",
        name="",  # no lock is concerned: there is none
        key="",
    )

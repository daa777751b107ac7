"""Per-event-loop background tasks, kept alive until they finish.

asyncio holds only weak references to tasks: a task nobody references can be collected while
pending, and its coroutine is then closed mid-flight (seen here: a client-closing task, closed
early, cut a live connection). ``background`` keeps a strong reference until the task is done.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any

_running: set[asyncio.Task[Any]] = set()


def background(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """Start ``coro`` on the running loop and keep it referenced until it is done.

    Tasks of loops that were closed without cancelling them (``loop.close()`` rather than
    ``asyncio.run``) will never finish: they are let go here, so their loops can be freed.
    """
    for stale in [t for t in _running if t.get_loop().is_closed()]:
        _running.discard(stale)
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task


def forget_closed(table: Any) -> None:
    """Drop the entries of a per-loop table whose loop is closed (and so never runs again)."""
    for loop in [loop for loop in list(table) if loop.is_closed()]:
        table.pop(loop, None)


def _after_fork_in_child() -> None:
    _running.clear()  # the parent's loops do not run in the child


os.register_at_fork(after_in_child=_after_fork_in_child)

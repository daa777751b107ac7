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
    """Start ``coro`` on the running loop and keep it referenced until it is done."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task


def _after_fork_in_child() -> None:
    _running.clear()  # the parent's loops do not run in the child


os.register_at_fork(after_in_child=_after_fork_in_child)

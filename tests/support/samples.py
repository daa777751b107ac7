"""Small things tests on both sides (tests/core and tests/integration) use: sample objects
and decorators a user might write, the shape of a token, a polling helper."""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings

from redlock_deco._worker import SerialWorker


class Opaque:
    """No __str__: formats as its default repr, ``<support.samples.Opaque object at 0x...>``."""


LOOKALIKE = "crash: <Foo object at 0x7f3a2b>"  # a user's text, not an object's repr (b03)

# A token: host, pid, process id, 128 random bits.
TOKEN = re.compile(r"^(?P<host>.+):(?P<pid>\d+):(?P<procid>[0-9a-f]{8}):(?P<secret>[0-9a-f]{32})$")

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def traced(func: Callable[..., Any]) -> Callable[..., Any]:
    """Any ordinary decorator written with functools.wraps (logging, tracing, retries)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def every_constructor() -> list[Any]:
    """Each way to make a primitive, sync and asyncio, taking keyword options."""
    import redlock_deco.asyncio as aio
    from redlock_deco import Lock, Semaphore, limited, locked

    return [
        lambda **kw: locked("x", **kw),
        lambda **kw: limited("x", limit=2, **kw),
        lambda **kw: Lock("x", **kw),
        lambda **kw: Semaphore("x", limit=2, **kw),
        lambda **kw: aio.Lock("x", **kw),
        lambda **kw: aio.Semaphore("x", limit=2, **kw),
    ]


def wait_until(check: Callable[[], object], timeout: float, every: float = 0.02) -> bool:
    """Poll ``check`` every ``every`` seconds; False if it is still false after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


def thread_of(work: SerialWorker) -> threading.Thread:
    """The thread a SerialWorker runs its calls on now."""
    return work.submit(threading.current_thread).result(timeout=5)

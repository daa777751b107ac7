"""What the reply searches (test_reply_search.py, sync, and test_async_reply_search.py) share."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import pytest
import redis

F = TypeVar("F", bound=Callable[..., object])

RUNS = int(os.environ.get("REDLOCK_DECO_REPLY_RUNS", "6"))  # seeds per kind of client
NOT_A_NUMBER = "nan-key"  # INCR on it: an error reply, at run time (inside a transaction too)

# Half the cut steps run while the server is busy this long in a script of another
# connection's (BUSY): the cut command's reply is then still on its way when the next command
# is written, past redis-py's own "anything to read?" test at checkout (which a reply already
# there meets).
# (CLIENT PAUSE ends only at the server's next cron tick: 100 ms.)
BUSY_MS = 5
# (Bounded by a count too: Valkey's TIME inside a script is the script's start, for good.)
BUSY = """
local start = redis.call('TIME')
for _ = 1, 6000 do
    local now = redis.call('TIME')
    if (now[1] - start[1]) * 1000000 + (now[2] - start[2]) >= tonumber(ARGV[1]) * 1000 then
        return 1
    end
end
return 1
"""


def interruptible(frame: FrameType) -> bool:
    """A line a real signal could land on, in redis-py or in the library's connection
    guard, outside a finaliser (the collector runs those on any thread it likes)."""
    name: str = frame.f_globals.get("__name__", "")
    if not (name.startswith("redis.") or name == "redlock_deco._pools"):
        return False
    if name.startswith("redis.observability"):
        return False
    caller: FrameType | None = frame
    while caller is not None:
        if caller.f_code.co_name == "__del__":
            return False
        caller = caller.f_back
    return True


def seeds(runs: int) -> list[int]:
    fixed = os.environ.get("REDLOCK_DECO_SEED")
    if fixed is not None:
        return [int(fixed)]
    first = random.randrange(1 << 30)
    return [first + n for n in range(runs)]


def searching(kinds: list[str]) -> Callable[[F], F]:
    """A search test's marks: per kind of client, the README command's share of seeds and ten
    times as many in the interrupts CI leg (``runs``). A cut as redis-py opens a socket (or as
    it drops one) leaves the socket to the collector: redis-py's to close, not what a search
    looks for."""

    def marked(test: F) -> F:
        for mark in (
            pytest.mark.parametrize("kind", kinds),
            pytest.mark.parametrize(
                "runs",
                [
                    pytest.param(RUNS, id="few"),
                    pytest.param(10 * RUNS, id="many", marks=pytest.mark.interrupts),
                ],
            ),
            pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
            pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
            pytest.mark.timeout(300),
        ):
            test = mark(test)
        return test

    return marked


class Lines:
    """A step's interruptible lines as a search's tracer sees them: how many, and which lie
    between a write and its read (the window the count of replies owed is for)."""

    def __init__(self) -> None:
        self.lines = 0
        self.windows: list[tuple[int, int]] = []  # (first, last) line between write and read
        self._written = 0

    def saw(self, frame: FrameType) -> int:
        """Counts a line of ``frame``'s; its number in the step."""
        self.lines += 1
        name = frame.f_code.co_name
        if name == "send_packed_command" and not self._written:
            self._written = self.lines
        elif name == "read_response" and self._written:
            self.windows.append((self._written, self.lines))
            self._written = 0
        return self.lines


def queue(
    pipe: Any,
    pairs: list[tuple[str, str]],
    value: Callable[[], bytes],
    written: dict[str, set[bytes]],
    after: dict[str, set[bytes | None]],
    read: Callable[[Any, str], object] = lambda pipe, key: pipe.get(key),
) -> list[Any]:
    """Queues ``pairs`` (what, key) on ``pipe`` -- a SET of a new value, a GET, or an INCR
    that fails -- and returns the replies expected (a set: any of them), with ``written``
    (what a cut may have written) and ``after`` (what each key may hold after) updated."""
    expected: list[Any] = []
    for what, key in pairs:
        if what == "set":
            new = value()
            written.setdefault(key, set()).add(new)
            pipe.set(key, new)
            after[key] = {new}
            expected.append(True)
        elif what == "get":
            read(pipe, key)
            expected.append(set(after[key]))
        else:
            pipe.incr(NOT_A_NUMBER)
            expected.append(redis.ResponseError)
    return expected

"""A waiter queue as tests read and write it: a sorted set whose members are the waiters'
entries ("token|ttl|limit") and whose scores are their places (see ``lua/waiters.lua``)."""

from __future__ import annotations

from typing import Any


def enqueue(client: Any, queue: str, entry: str) -> None:
    """Queue ``entry`` behind everyone, as a waiter's join does."""
    last = client.zrange(queue, -1, -1, withscores=True)
    client.zadd(queue, {entry: (last[0][1] if last else 0) + 1}, nx=True)

"""A grant subscription's close, cut at one of its lines (for the tests of every topology)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import redis
from support.elsewhere import AtLine

from redlock_deco import _waiting as waiting

# The lines cut: redis-py's PubSub.reset (which a cluster's reset runs too) and the pool that
# has the subscription forget its connection first.
CUT_IN = {redis.client.PubSub.reset.__code__, waiting._ForgettingPool.release.__code__}


def checked_out(pool: Any) -> Any:
    """A connection of ``pool``'s, checked out (redis-py 5 names the command it is for)."""
    try:
        return pool.get_connection()
    except TypeError:
        return pool.get_connection("_")


def _cut() -> None:
    raise KeyboardInterrupt


def close_cut_at(client: Any, at: int) -> int:
    """Subscribe to grants through ``client`` as the library does, close the subscription with
    a KeyboardInterrupt at its ``at``-th line (0: none) kept until another user has checked
    a connection out of the same pool; then the subscription's finaliser may run. That
    user's connection must stay open, its own, and not listed as free. Returns how many
    lines the close ran."""
    pubsub = waiting._subscriber(client)
    waiting.subscribe(pubsub)
    assert pubsub.get_message(timeout=5)["type"] in ("subscribe", b"subscribe")
    pool = pubsub.connection_pool
    assert type(pool) is waiting._ForgettingPool, f"not forgetting: {pool!r}"
    pool = pool._pool
    kept: list[BaseException] = []
    with AtLine(CUT_IN, at, _cut) as inside:
        try:
            waiting._closed(pubsub)
        except KeyboardInterrupt as exc:
            kept.append(exc)
    del pubsub
    other = checked_out(pool)
    other.send_command("PING")
    kept.clear()
    gc.collect()
    assert other._sock is not None, f"line {at}: the other user's connection was closed"
    assert other.read_response() in (b"PONG", "PONG"), f"line {at}"
    assert other not in pool._available_connections, f"line {at}: listed as free while in use"
    pool.release(other)
    lines: int = inside.lines
    return lines


def every_cut(client_of: Callable[[], Any]) -> None:
    """:func:`close_cut_at` at each line of the close in turn, each on a new client."""

    def run(at: int) -> int:
        client = client_of()
        try:
            return close_cut_at(client, at)
        finally:
            client.close()

    lines = run(0)
    assert lines > 5
    for at in range(1, lines + 1):
        run(at)

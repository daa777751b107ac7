"""Drivers: execute the protocol core's steps on a real client. They only do I/O.

The sync driver lives here; the asyncio driver sits beside it so the two stay identical in
shape. Both run EVALSHA and fall back to EVAL on NOSCRIPT (a restarted or flushed server has
forgotten the script; EVAL runs it and caches it again).
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

from redis.exceptions import NoScriptError

from .protocol import Block, Call, Eval, Sleep, Step, Steps

T = TypeVar("T")

# Longest single BLPOP when the client has no socket timeout; between slices the waiter
# re-checks the lock, which bounds the damage of any wake-up that went astray.
MAX_BLOCK = 2.0


def max_block_for(client: Any) -> float:
    """Longest safe BLPOP on ``client``: well inside its socket timeout, if it has one."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if kwargs is None:  # RedisCluster keeps them on its nodes manager
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None) or {}
    timeout = kwargs.get("socket_timeout")
    if isinstance(timeout, (int, float)) and timeout > 0:
        return min(MAX_BLOCK, timeout / 2)
    return MAX_BLOCK


class SyncTarget:
    """One sync client and what the driver derives from it once."""

    __slots__ = ("client", "max_block")

    def __init__(self, client: Any) -> None:
        self.client = client
        self.max_block = max_block_for(client)

    def execute(self, step: Step) -> Any:
        client = self.client
        if type(step) is Eval:
            keys = step.keys
            try:
                return client.execute_command(
                    "EVALSHA", step.script.sha, len(keys), *keys, *step.args
                )
            except NoScriptError:
                return client.execute_command(
                    "EVAL", step.script.source, len(keys), *keys, *step.args
                )
        if type(step) is Block:
            return client.execute_command("BLPOP", step.key, f"{step.timeout:.3f}")
        if type(step) is Call:
            return client.execute_command(*step.args)
        if type(step) is Sleep:
            time.sleep(step.seconds)
            return None
        raise TypeError(f"unknown protocol step {step!r}")  # pragma: no cover


def run(steps: Steps[T], target: SyncTarget) -> T:
    """Drive an algorithm to its result on a sync client."""
    try:
        step = next(steps)
        while True:
            step = steps.send(target.execute(step))
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        steps.close()

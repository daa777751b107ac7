"""Drivers: execute the protocol core's steps on a real client. They only do I/O.

What a step means on the wire is decided once, by :func:`command` and :func:`fallback`; the
sync and asyncio drivers below are the same dozen lines, one with ``await``. Scripts run with
EVALSHA and fall back to EVAL on NOSCRIPT (a restarted or flushed server forgot the script;
EVAL runs it and caches it again).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

from redis.exceptions import NoScriptError

from .protocol import Block, Call, Eval, Sleep, Step, Steps

T = TypeVar("T")
Args = tuple[str | int, ...]

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


def command(step: Eval | Call | Block) -> Args:
    """The Redis command that carries out ``step``."""
    if type(step) is Eval:
        return ("EVALSHA", step.script.sha, len(step.keys), *step.keys, *step.args)
    if type(step) is Block:
        return ("BLPOP", step.key, f"{step.timeout:.3f}")
    if type(step) is Call:
        return step.args
    raise TypeError(f"unknown protocol step {step!r}")  # pragma: no cover


def fallback(step: Eval | Call | Block) -> Args:
    """What to send instead when the server answered NOSCRIPT to ``command(step)``."""
    assert type(step) is Eval
    return ("EVAL", step.script.source, len(step.keys), *step.keys, *step.args)


class SyncTarget:
    """One sync client and what the driver derives from it once."""

    __slots__ = ("client", "max_block")

    def __init__(self, client: Any) -> None:
        self.client = client
        self.max_block = max_block_for(client)

    def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        try:
            return self.client.execute_command(*command(step))
        except NoScriptError:
            return self.client.execute_command(*fallback(step))


class AsyncTarget:
    """One ``redis.asyncio`` client (bound to one event loop) and what derives from it."""

    __slots__ = ("client", "max_block")

    def __init__(self, client: Any) -> None:
        self.client = client
        self.max_block = max_block_for(client)

    async def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        try:
            return await self.client.execute_command(*command(step))
        except NoScriptError:
            return await self.client.execute_command(*fallback(step))


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


async def run_async(steps: Steps[T], target: AsyncTarget) -> T:
    """Drive an algorithm to its result on an asyncio client."""
    try:
        step = next(steps)
        while True:
            step = steps.send(await target.execute(step))
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        steps.close()

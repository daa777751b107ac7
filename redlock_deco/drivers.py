"""Drivers: execute the protocol core's steps on a real client. They only do I/O.

What a step means on the wire is decided once, by :func:`command` and :func:`fallback`; the
sync and asyncio drivers below are the same dozen lines, one with ``await``. Scripts run with
EVALSHA and fall back to EVAL on NOSCRIPT (a restarted or flushed server forgot the script;
EVAL runs it and caches it again).
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from redis.exceptions import NoScriptError

from .protocol import SINGLE, Algorithms, Block, Call, Eval, Fanout, Sleep, Step, Steps
from .quorum import Quorum

T = TypeVar("T")
Args = tuple[str | int, ...]

# How long a quorum round waits for each master: short against any sensible ttl, so a dead
# or paused master costs a round this much, not a socket timeout.
NODE_TIMEOUT = 0.25

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


def command(step: Step) -> Args:
    """The Redis command that carries out ``step``."""
    if type(step) is Eval:
        return ("EVALSHA", step.script.sha, len(step.keys), *step.keys, *step.args)
    if type(step) is Block:
        return ("BLPOP", step.key, f"{step.timeout:.3f}")
    if type(step) is Call:
        return step.args
    raise TypeError(f"unknown protocol step {step!r}")  # pragma: no cover


def fallback(step: Step) -> Args:
    """What to send instead when the server answered NOSCRIPT to ``command(step)``."""
    assert type(step) is Eval
    return ("EVAL", step.script.source, len(step.keys), *step.keys, *step.args)


def routing(client: Any, step: Step) -> dict[str, Any]:
    """Keyword arguments sending a keyless command to the node of ``step.route`` (clusters
    route by key, and WAIT has none: it must reach the primary that took the write)."""
    if type(step) is Call and step.route is not None and hasattr(client, "get_node_from_key"):
        return {"target_nodes": client.get_node_from_key(step.route)}
    return {}


class SyncTarget:
    """One sync client and what the driver derives from it once."""

    __slots__ = ("client", "max_block")
    algorithms: Algorithms = SINGLE

    def __init__(self, client: Any) -> None:
        self.client = client
        self.max_block = max_block_for(client)

    def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        if type(step) is Call and step.route is not None:
            return self.client.execute_command(*step.args, **routing(self.client, step))
        try:
            return self.client.execute_command(*command(step))
        except NoScriptError:
            return self.client.execute_command(*fallback(step))


class AsyncTarget:
    """One ``redis.asyncio`` client (bound to one event loop) and what derives from it."""

    __slots__ = ("client", "max_block")
    algorithms: Algorithms = SINGLE

    def __init__(self, client: Any) -> None:
        self.client = client
        self.max_block = max_block_for(client)

    async def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        if type(step) is Call and step.route is not None:
            return await self.client.execute_command(*step.args, **routing(self.client, step))
        try:
            return await self.client.execute_command(*command(step))
        except NoScriptError:
            return await self.client.execute_command(*fallback(step))


class QuorumSyncTarget:
    """Independent masters, each a SyncTarget, driven together for the quorum algorithms."""

    max_block = MAX_BLOCK  # unused: a quorum waits with backoff, never with BLPOP

    def __init__(self, nodes: list[SyncTarget], node_timeout: float = NODE_TIMEOUT) -> None:
        self.nodes = nodes
        self.node_timeout = node_timeout
        self.algorithms: Algorithms = Quorum(len(nodes))
        # One serial worker per master: a hung master blocks only its own queue (a shared
        # pool would fill up with calls stuck on it), and its commands keep their order, so
        # a late acquire there is always followed by the release queued after it.
        self._workers = [
            ThreadPoolExecutor(1, thread_name_prefix="redlock-deco-quorum") for _ in nodes
        ]

    def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        assert isinstance(step, Fanout), step
        futures = [
            worker.submit(node.execute, step.step)
            for worker, node in zip(self._workers, self.nodes, strict=True)
        ]
        deadline = time.monotonic() + self.node_timeout
        replies: list[object] = []
        for future in futures:
            try:
                replies.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except Exception as exc:  # failed or too late: that master grants nothing
                replies.append(exc)
        return replies


class QuorumAsyncTarget:
    """Independent masters, each an AsyncTarget, driven together for the quorum algorithms."""

    max_block = MAX_BLOCK

    def __init__(self, nodes: list[AsyncTarget], node_timeout: float = NODE_TIMEOUT) -> None:
        self.nodes = nodes
        self.node_timeout = node_timeout
        self.algorithms: Algorithms = Quorum(len(nodes))

    async def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        assert isinstance(step, Fanout), step
        return await asyncio.gather(
            *(asyncio.wait_for(node.execute(step.step), self.node_timeout) for node in self.nodes),
            return_exceptions=True,
        )


def run(steps: Steps[T], target: SyncTarget | QuorumSyncTarget) -> T:
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


async def run_async(steps: Steps[T], target: AsyncTarget | QuorumAsyncTarget) -> T:
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

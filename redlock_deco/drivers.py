"""Drivers: execute the protocol core's steps on a real client. They only do I/O.

What a step means on the wire is decided once, by :func:`command` and :func:`fallback`; the
sync and asyncio drivers below are the same dozen lines, one with ``await``. Scripts run with
EVALSHA and fall back to EVAL on NOSCRIPT (a restarted or flushed server forgot the script;
EVAL runs it and caches it again).

Connection lanes (:func:`lane_sizes`): a client's pool has a fixed number of connections
(redis-py 8: 100, and a full non-blocking pool *raises*). Waiters blocked in BLPOP and
acquirers retrying hold pooled connections too, so 120 waiters once left a holder's release
failing with "Too many connections" and the lock stuck for its ttl. Commands are therefore
sorted into lanes, each with its own share of the pool: *holding* (release, extend, renew,
owned: a reserve waiters can never take), *acquiring* (attempts, waiter bookkeeping) and
*blocking* (BLPOP; a waiter that finds no free blocking place waits for one at most as long
as its block would have lasted, then simply re-checks the lock, as after any wake-up).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Protocol, TypeVar

from redis.exceptions import NoScriptError

from .protocol import SINGLE, Algorithms, Block, Call, Eval, Sleep, Step, Steps
from .worker import SerialWorker

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


# Pools at least this large are treated as unbounded (redis-py 5's default is 2**31): no
# lanes, and no per-command cost for them.
UNBOUNDED_POOL = 10_000


def pool_size(client: Any) -> int | None:
    """How many connections ``client``'s pool may open, or None if practically unbounded."""
    size = getattr(getattr(client, "connection_pool", None), "max_connections", None)
    return size if isinstance(size, int) and 0 < size < UNBOUNDED_POOL else None


def lane_sizes(pool: int) -> tuple[int, int, int]:
    """(holding, acquiring, blocking) places of a pool of ``pool`` connections.

    Together never more than the pool (at least one each, for absurdly small pools).
    """
    holding = max(1, min(16, pool // 4))
    blocking = max(1, min(32, (pool - holding) // 2))
    acquiring = max(1, pool - holding - blocking)
    return holding, acquiring, blocking


# Waiters on a pool too small for a blocking lane poll at this interval instead of blocking.
SMALL_POOL_POLL = 0.05


def make_lanes(pool: int | None, semaphore: Any) -> list[Any] | None:
    """One ``semaphore(n)`` per lane (None for an unbounded pool). A pool of 1 or 2 has no
    blocking lane (None): a waiter blocked in BLPOP there would hold the only connection
    acquirers or the holder need while the lock may already be free, so waiters poll every
    SMALL_POOL_POLL instead. A single connection is shared by holders and acquirers."""
    if pool is None:
        return None
    if pool >= 3:
        return [semaphore(n) for n in lane_sizes(pool)]
    shared = semaphore(1)
    return [semaphore(1) if pool == 2 else shared, shared, None]


def lane_of(step: Step) -> int:
    """0 holding, 1 acquiring, 2 blocking."""
    if type(step) is Block:
        return 2
    return 1 if type(step) is Eval and step.script.waiting else 0


class SyncTarget:
    """One sync client and what the driver derives from it once."""

    __slots__ = ("checked", "client", "lanes", "max_block", "renewal_worker")
    algorithms: Algorithms = SINGLE

    def __init__(self, client: Any) -> None:
        self.client = client
        self.max_block = max_block_for(client)
        self.lanes = make_lanes(pool_size(client), threading.BoundedSemaphore)
        self.renewal_worker: SerialWorker | None = None  # renewal.py's, created on demand
        self.checked = False  # the first-use server check (eviction policy) has run

    def retire(self) -> None:
        """This target was replaced (its provider registered again): let its thread go."""
        if self.renewal_worker is not None:
            self.renewal_worker.retire()

    def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        if self.lanes is None:
            return self._send(step)
        lane = self.lanes[lane_of(step)]
        if type(step) is Block:
            if lane is None:  # a pool too small to block in: poll
                time.sleep(min(step.timeout, SMALL_POOL_POLL))
                return None
            if not lane.acquire(timeout=step.timeout):
                return None  # no place to block in: re-check the lock, as after a timeout
        else:
            lane.acquire()
        try:
            return self._send(step)
        finally:
            lane.release()

    def _send(self, step: Step) -> Any:
        if type(step) is Call and step.route is not None:
            return self.client.execute_command(*step.args, **routing(self.client, step))
        try:
            return self.client.execute_command(*command(step))
        except NoScriptError:
            return self.client.execute_command(*fallback(step))


class AsyncTarget:
    """One ``redis.asyncio`` client (bound to one event loop) and what derives from it."""

    __slots__ = ("checked", "client", "lanes", "max_block")
    algorithms: Algorithms = SINGLE

    def __init__(self, client: Any) -> None:
        self.client = client
        self.max_block = max_block_for(client)
        self.lanes = make_lanes(pool_size(client), asyncio.BoundedSemaphore)
        self.checked = False

    async def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        if type(step) is Block:
            return await self._block(step)
        if self.lanes is None:
            return await self._send(step)
        lane = self.lanes[lane_of(step)]
        await lane.acquire()
        try:
            return await self._send(step)
        finally:
            lane.release()

    async def _block(self, step: Block) -> Any:
        """BLPOP within the blocking lane (or without one, on an unbounded pool)."""
        lane = self.lanes[2] if self.lanes is not None else None
        if self.lanes is not None and lane is None:  # a pool too small to block in: poll
            await asyncio.sleep(min(step.timeout, SMALL_POOL_POLL))
            return None
        if lane is not None:
            try:
                await asyncio.wait_for(lane.acquire(), step.timeout)
            except (TimeoutError, asyncio.TimeoutError):
                return None  # no place to block in: re-check the lock, as after a timeout
        try:
            return await self._send(step)
        finally:
            if lane is not None:
                lane.release()

    async def _send(self, step: Step) -> Any:
        if type(step) is Call and step.route is not None:
            return await self.client.execute_command(*step.args, **routing(self.client, step))
        try:
            return await self.client.execute_command(*command(step))
        except NoScriptError:
            return await self.client.execute_command(*fallback(step))


class Executes(Protocol):
    def execute(self, step: Step) -> Any: ...


class ExecutesAsync(Protocol):
    async def execute(self, step: Step) -> Any: ...


def run(steps: Steps[T], target: Executes) -> T:
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


async def run_async(steps: Steps[T], target: ExecutesAsync) -> T:
    """Drive an algorithm to its result on an asyncio client.

    A task cancelled during a step stops at the next step: redis-py (8.x) sometimes completes
    a command whose task was cancelled meanwhile instead of raising CancelledError, and a
    waiter told to stop would otherwise wait on until ``wait`` ran out (seen: 30 s).
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+; 3.10 relies on redis-py
    before = cancelling() if cancelling is not None else 0
    try:
        step = next(steps)
        while True:
            reply = await target.execute(step)
            if cancelling is not None and cancelling() > before:
                raise asyncio.CancelledError
            step = steps.send(reply)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        steps.close()

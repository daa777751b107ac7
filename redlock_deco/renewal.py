"""Automatic renewal: one renewer per process (a thread) and one per event loop (a task).

Not a thread per lease: leases are kept in a dict (O(1) to add at acquire and to drop at
release, so the hot path pays almost nothing), and the renewer sleeps until the earliest
renewal is due; adding a lease wakes it only when that lease is due earlier. A renewal that
finds the token gone marks the lease lost; connection errors are retried until the lease
would have ended (see :meth:`Lease.renewal_failed`). What is due and what a renewal's outcome
means is decided once, below; the two renewers only differ in how they wait and do I/O. A
forked child starts with empty renewers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from redis.exceptions import RedisError

from . import drivers, events
from .lease import RETRY_DELAY, Lease
from .loops import background, forget_closed
from .protocol import Algorithms, Claim, Steps

log = logging.getLogger("redlock_deco")


def due(leases: Iterable[Lease], now: float) -> tuple[list[Lease], float]:
    """The leases to renew now, and when the next one is due (inf if none).

    A lease whose owner (thread or task) has ended is handed back as due too: renewing it
    finds the owner gone and drops it instead.
    """
    ready, upcoming = [], math.inf
    for lease in leases:
        if lease.renewing:
            continue  # its renewal is in flight; it will wake the renewer when done
        if lease.next_renew <= now or now >= lease.hold_until or not lease.owner_alive():
            ready.append(lease)
        else:
            upcoming = min(upcoming, lease.next_renew)
    return ready, upcoming


def settle(lease: Lease, started: float, extended: bool | None) -> bool:
    """Record a renewal sent at ``started``: True (extended), False (token gone) or None
    (connection trouble). Returns True when the lease must now count as lost."""
    if not lease.active:
        return False  # released while the renewal was in flight: nothing to record
    if extended:
        lease.renewed(started)
        if events.listeners:
            events.emit("renewed", lease.name, lease.key)
        return False
    if extended is False or lease.renewal_failed(started):
        lease.mark_lost()
        return True
    return False


def orphaned(lease: Lease, now: float) -> bool:
    """True (and the lease is let go) if it must not be renewed any more: its owner ended
    without releasing it (renewal must not outlive its owner), or it has been held for
    ``max_hold`` (a stuck call must not hold a lock forever). It then expires within its ttl,
    and a call still running ends in LockLost."""
    if lease.owner_alive() and now < lease.hold_until:
        return False
    lease.active = False
    return True


def notify_lost(lease: Lease) -> None:
    """Run the lease's on_lost callback; its failure must never stop the renewer."""
    if events.listeners:
        events.emit("lost", lease.name, lease.key)
    if lease.on_lost is not None:
        try:
            lease.on_lost(lease)
        except Exception:
            log.exception("on_lost callback for %r failed", lease.key)


def abandoned(claim: Claim, target: Any, started: float) -> Lease:
    """A claim whose acquire was cut short (timeout, cancellation) and whose clean-up could
    not reach the server: its SET may still land (a paused server runs buffered commands when
    it resumes), leaving a lock nobody holds. The renewer retries the token-compared release
    until it succeeds or the lease would have ended anyway."""
    lease = Lease(claim, name="", provider="", target=target, started=started)
    lease.abandoned = True
    lease.next_renew = started  # try again at once
    return lease


def cleaned_up(lease: Lease, now: float, done: bool) -> bool:
    """After a clean-up attempt of an abandoned claim: True when there is nothing left to do."""
    if done or now >= lease.expires_at:
        return True
    lease.next_renew = now + RETRY_DELAY
    return False


FAILED: Any = object()  # the renewal's round trip failed (connection trouble)


def plan(lease: Lease, now: float) -> Steps[Any] | None:
    """What one renewal round of ``lease`` runs: the clean-up of an abandoned claim, or an
    extension; None when the lease is to be dropped without a word to Redis."""
    algorithms: Algorithms = lease.target.algorithms
    if lease.abandoned:
        return algorithms.abandon(lease.claim)
    if orphaned(lease, now):
        return None
    return algorithms.extend(lease.claim, lease.ttl_ms)


def conclude(lease: Lease, started: float, outcome: Any) -> bool:
    """Record what a round started at ``started`` got back (FAILED on connection trouble);
    True when the renewer should drop the lease."""
    if lease.abandoned:
        return cleaned_up(lease, time.monotonic(), outcome is not FAILED)
    if settle(lease, started, None if outcome is FAILED else bool(outcome)):
        notify_lost(lease)
        return True
    return False


class Renewer:
    """The renewer of sync leases: one scheduler thread per process.

    It only decides what is due; each renewal runs on one worker thread per Redis target, so
    a paused or unreachable server delays the renewals of its own leases, never those on
    other servers. No exception of a renewal can stop it.
    """

    def __init__(self) -> None:
        self._leases: dict[int, Lease] = {}
        self._wake = threading.Condition(threading.Lock())
        self._next_wake = math.inf
        self._thread: threading.Thread | None = None
        self._workers: dict[int, ThreadPoolExecutor] = {}

    def add(self, lease: Lease) -> None:
        lease.renewer = self
        # Under the lock: the thread snapshots the leases and picks its wake-up time under it
        # too, so a lease added in between can never be overlooked until a later wake-up.
        with self._wake:
            self._leases[id(lease)] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="redlock-deco-renewer", daemon=True
                )
                self._thread.start()
            if lease.next_renew < self._next_wake:
                self._next_wake = lease.next_renew
                self._wake.notify()

    def remove(self, lease: Lease) -> None:
        lease.active = False
        with self._wake:
            self._leases.pop(id(lease), None)

    def __len__(self) -> int:
        """How many leases it keeps alive (clean-ups of abandoned claims not counted)."""
        return sum(not lease.abandoned for lease in list(self._leases.values()))

    def _loop(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                ready, self._next_wake = due(self._leases.values(), now)
                if not ready:
                    timeout = None if self._next_wake == math.inf else self._next_wake - now
                    self._wake.wait(timeout)
                    continue
                for lease in ready:
                    lease.renewing = True
            for lease in ready:
                try:
                    self._worker(lease.target).submit(self._renew_safely, lease)
                except RuntimeError:  # the interpreter is exiting: no new work, end quietly
                    return

    def _worker(self, target: Any) -> ThreadPoolExecutor:
        worker = self._workers.get(id(target))
        if worker is None:
            worker = self._workers[id(target)] = ThreadPoolExecutor(
                1, thread_name_prefix="redlock-deco-renewal"
            )
        return worker

    def _renew_safely(self, lease: Lease) -> None:
        try:
            self.renew(lease)
        except Exception:  # a bug or an unexpected error must not end renewals
            log.exception("renewing %r failed", lease.key)
            lease.next_renew = time.monotonic() + RETRY_DELAY
        finally:
            lease.renewing = False
            with self._wake:
                self._wake.notify()

    def renew(self, lease: Lease) -> None:
        started = time.monotonic()
        steps = plan(lease, started)
        if steps is not None:
            try:
                outcome = drivers.run(steps, lease.target)
            except RedisError:
                outcome = FAILED
        if steps is None or conclude(lease, started, outcome):
            self.remove(lease)


class AsyncRenewer:
    """The renewer of asyncio leases: one task per event loop, started on first use."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._leases: dict[int, Lease] = {}
        self._wake = asyncio.Event()
        self._next_wake = math.inf
        self._started = False
        self._loop_ref = weakref.ref(loop)

    def add(self, lease: Lease) -> None:
        self._leases[id(lease)] = lease
        lease.renewer = self
        if lease.next_renew < self._next_wake:
            if not self._started:
                self._started = True
                background(self._loop(), name="redlock-deco-renewer")
            self._next_wake = lease.next_renew
            self._wake.set()

    def remove(self, lease: Lease) -> None:
        lease.active = False
        self._leases.pop(id(lease), None)

    def __len__(self) -> int:
        """How many leases it keeps alive (clean-ups of abandoned claims not counted)."""
        return sum(not lease.abandoned for lease in list(self._leases.values()))

    async def _loop(self) -> None:
        try:
            await self._run()
        finally:  # the loop is shutting down: let it (and this renewer) be collected
            loop = self._loop_ref()
            if loop is not None:
                _async_renewers.pop(loop, None)

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            ready, self._next_wake = due(self._leases.values(), now)
            if not ready:
                self._wake.clear()
                timeout = None if self._next_wake == math.inf else self._next_wake - now
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                continue
            self._next_wake = now
            for lease in ready:
                lease.renewing = True
                background(self._renew_safely(lease), name="redlock-deco-renewal")

    async def _renew_safely(self, lease: Lease) -> None:
        try:
            await self.renew(lease)
        except Exception:  # a bug or an unexpected error must not end renewals
            log.exception("renewing %r failed", lease.key)
            lease.next_renew = time.monotonic() + RETRY_DELAY
        finally:
            lease.renewing = False
            self._wake.set()

    async def renew(self, lease: Lease) -> None:
        started = time.monotonic()
        steps = plan(lease, started)
        if steps is not None:
            try:
                outcome = await drivers.run_async(steps, lease.target)
            except RedisError:
                outcome = FAILED
        if steps is None or conclude(lease, started, outcome):
            self.remove(lease)


_renewer = Renewer()
_async_renewers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncRenewer] = (
    weakref.WeakKeyDictionary()
)


def renewer() -> Renewer:
    """The renewer of this process's sync leases."""
    return _renewer


def async_renewer() -> AsyncRenewer:
    """The renewer of the running event loop's leases."""
    loop = asyncio.get_running_loop()
    found = _async_renewers.get(loop)
    if found is None:
        forget_closed(_async_renewers)
        found = _async_renewers[loop] = AsyncRenewer(loop)
    return found


def _after_fork_in_child() -> None:
    global _renewer
    _renewer = Renewer()
    _async_renewers.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)

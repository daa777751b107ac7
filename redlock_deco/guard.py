"""Taking and giving back a lease around a protected section, shared by every entry point
(``@locked``, ``@limited``, ``Lock``, ``Semaphore`` and their asyncio twins).

The sync and async twins sit side by side and differ only in I/O: where the owner's table
comes from (thread or task), which driver runs the protocol, which renewer keeps the lease.
Everything they decide is in the plain helpers at the top.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from . import drivers, events, ownership, providers, renewal
from .errors import LockLost, ProviderError
from .lease import Lease
from .options import LeaseOptions
from .ownership import Holdings
from .protocol import Claim, Keys, Kind, SingleNode
from .tokens import new_token


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, also on Python 3.10 (which only lacks the method)."""
    notes = getattr(error, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        error.__notes__ = notes  # type: ignore[attr-defined]  # the 3.11+ attribute, by hand
    notes.append(note)


def _reenter(held: Holdings | None, options: LeaseOptions, key: str) -> Lease | None:
    """The owner's lease on ``key`` if it already holds it (then counted once more).

    A lease the owner holds but knows to be over (lost, or past its lease without renewal)
    cannot be re-entered: that call would run unprotected, so it fails loudly instead.
    """
    lease = held.get((options.provider, key)) if held is not None else None
    if lease is None:
        return None
    if lease.lost or lease.remaining() == 0:
        raise LockLost(
            f"re-entering {key!r}, but this owner's lease on it has ended (expired or taken "
            "over): the outer holder no longer protects this call",
            name=lease.name,
            key=key,
        )
    lease.count += 1
    return lease


def _claim(kind: Kind, options: LeaseOptions, key: str) -> Claim:
    keys = Keys.for_key(key, kind, options.fencing)
    return Claim(kind, keys, new_token(), options.ttl_ms, options.limit, options.replicas)


def _check_fencing(options: LeaseOptions, target: Any) -> None:
    if options.fencing and not isinstance(target.algorithms, SingleNode):
        raise ProviderError(
            f"fencing=True needs one Redis (a server, a cluster or a Sentinel primary): "
            f"provider {options.provider!r} is a quorum of masters, which has no single "
            "counter to draw strictly increasing tokens from",
            provider=options.provider,
        )


def _new_lease(
    claim: Claim,
    name: str,
    options: LeaseOptions,
    target: object,
    started: float,
    held: Holdings | None,
    owner_alive: Callable[[], bool],
    granted: int,
) -> Lease:
    """Record a lease just acquired (by a request sent at ``started``) for its owner."""
    lease = Lease(claim, name=name, provider=options.provider, target=target, started=started)
    if options.fencing:
        lease.fencing_token = granted
    if events.listeners:
        events.emit("acquired", name, claim.keys.key, lease.acquired_at - started)
    lease.owner_alive = owner_alive
    if options.max_hold is not None:
        lease.hold_until = started + options.max_hold
    if callable(options.on_lost):
        lease.on_lost = options.on_lost
    if held is not None:
        held[(options.provider, lease.key)] = lease
    return lease


def _released(lease: Lease, released: bool) -> None:
    if events.listeners:
        events.emit("released", lease.name, lease.key, time.monotonic() - lease.acquired_at)
        if not released and not lease.lost:  # found at release (renewal reports its own)
            events.emit("lost", lease.name, lease.key)


def _last_exit(lease: Lease, held: Holdings | None) -> bool:
    """Count an exit down; True when it is the outermost one, which must touch Redis."""
    lease.count -= 1
    if lease.count > 0:
        return False
    if held is not None:
        held.pop((lease.provider, lease.key), None)
    return True


def _lost_lease(lease: Lease, error: BaseException | None, kept: bool) -> LockLost | None:
    """After the outermost exit: the LockLost to raise, or None (maybe noting ``error``)."""
    if kept:
        return None
    if error is None:
        return LockLost(
            f"the lease on {lease.key!r} ended while the protected call ran (it expired or was "
            "taken over); nothing of the new holder's was touched. Raise ttl or keep auto_renew",
            name=lease.name,
            key=lease.key,
        )
    add_note(error, f"the lease on {lease.key!r} was also lost while the call ran")
    return None


def _release_failed(lease: Lease, error: BaseException | None, exc: RedisError) -> None:
    if error is None:
        raise exc
    add_note(error, f"releasing {lease.key!r} failed too ({exc!r}); it expires within its ttl")


# -- sync --------------------------------------------------------------------------------


def enter(
    kind: Kind, options: LeaseOptions, name: str, key: str, wait: float | None
) -> Lease | None:
    """Take the lease on ``key`` (or count a re-entry); None if ``wait`` ran out."""
    held = ownership.thread_holdings() if kind.reentrant else None
    lease = _reenter(held, options, key)
    if lease is not None:
        return lease
    target = providers.sync_target(options.provider)
    _check_fencing(options, target)
    claim = _claim(kind, options, key)
    started = time.monotonic()
    try:
        acquired = drivers.run(target.algorithms.acquire(claim, wait, target.max_block), target)
    except BaseException:
        try:
            drivers.run(target.algorithms.abandon(claim), target)
        except RedisError:  # the server is out of reach: keep trying in the background
            renewal.renewer().add(renewal.abandoned(claim, target, time.monotonic()))
        raise
    if not acquired:
        if events.listeners:
            events.emit("busy", name, key, time.monotonic() - started)
        return None
    owner_alive = threading.current_thread().is_alive
    lease = _new_lease(claim, name, options, target, started, held, owner_alive, acquired)
    if options.auto_renew:
        renewal.renewer().add(lease)
    return lease


def leave(lease: Lease) -> bool:
    """Give the lease back (or count down a re-entry). True if it was ours to the end."""
    held = ownership.thread_holdings() if lease.claim.kind.reentrant else None
    if not _last_exit(lease, held):
        return not lease.lost
    if lease.pid != os.getpid():
        # A forked child holds nothing: the lease is its parent's, and so is the renewer
        # (whose lock another thread may have held at fork time: touching it could hang).
        return True
    if lease.renewer is not None:
        lease.renewer.remove(lease)
    released = drivers.run(lease.target.algorithms.release(lease.claim), lease.target)
    _released(lease, released)
    return released and not lease.lost


def finish(lease: Lease, error: BaseException | None) -> None:
    """Leave, then make a lost lease loud: LockLost, or a note on the call's own error."""
    try:
        kept = leave(lease)
    except RedisError as exc:
        _release_failed(lease, error, exc)
        return
    lost = _lost_lease(lease, error, kept)
    if lost is not None:
        raise lost


# -- asyncio -----------------------------------------------------------------------------


async def enter_async(
    kind: Kind, options: LeaseOptions, name: str, key: str, wait: float | None
) -> Lease | None:
    """Take the lease on ``key`` for the current task (or count a re-entry)."""
    held = ownership.task_holdings() if kind.reentrant else None
    lease = _reenter(held, options, key)
    if lease is not None:
        return lease
    target = providers.async_target(options.provider)
    _check_fencing(options, target)
    claim = _claim(kind, options, key)
    started = time.monotonic()
    try:
        acquired = await drivers.run_async(
            target.algorithms.acquire(claim, wait, target.max_block), target
        )
    except BaseException:
        # Cancelled (or timed out) while waiting: leave nothing held, even if cancelled again.
        try:
            await asyncio.shield(drivers.run_async(target.algorithms.abandon(claim), target))
        except (RedisError, asyncio.CancelledError):  # out of reach: keep trying meanwhile
            renewal.async_renewer().add(renewal.abandoned(claim, target, time.monotonic()))
        raise
    if not acquired:
        if events.listeners:
            events.emit("busy", name, key, time.monotonic() - started)
        return None
    task = asyncio.current_task()
    lease = _new_lease(
        claim, name, options, target, started, held,
        lambda: task is None or not task.done(), acquired,
    )  # fmt: skip
    if options.on_lost == "cancel" and task is not None:
        lease.on_lost = lambda _lease: task.cancel()  # runs in this loop, from its renewer
    if options.auto_renew:
        renewal.async_renewer().add(lease)
    return lease


async def leave_async(lease: Lease) -> bool:
    """Give the lease back (or count down a re-entry). True if it was ours to the end.

    A task cancelled while releasing still releases.
    """
    held = ownership.task_holdings() if lease.claim.kind.reentrant else None
    if not _last_exit(lease, held):
        return not lease.lost
    if lease.pid != os.getpid():
        return True
    if lease.renewer is not None:
        lease.renewer.remove(lease)
    try:
        released = await drivers.run_async(
            lease.target.algorithms.release(lease.claim), lease.target
        )
    except asyncio.CancelledError:
        # Cancelled mid-release: finish it shielded before the cancellation goes on (a second
        # release is harmless: it compares the token). Shielding only here keeps a Task per
        # call off the hot path.
        await asyncio.shield(
            drivers.run_async(lease.target.algorithms.release(lease.claim), lease.target)
        )
        raise
    _released(lease, released)
    return released and not lease.lost


async def finish_async(lease: Lease, error: BaseException | None) -> None:
    """Leave, then make a lost lease loud: LockLost, or a note on the call's own error."""
    try:
        kept = await leave_async(lease)
    except RedisError as exc:
        _release_failed(lease, error, exc)
        return
    lost = _lost_lease(lease, error, kept)
    if lost is not None:
        raise lost


# -- several names at once (@locked("acct:{src}", "acct:{dst}")) ----------------------------
#
# All or nothing, in one global order (sorted keys), so two callers locking the same names in
# opposite argument order can never deadlock; one deadline for the whole set.


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def enter_all(
    kind: Kind, options: LeaseOptions, names: dict[str, str], wait: float | None
) -> list[Lease] | None:
    """Take every ``key -> name`` lease, in key order; None (holding nothing) if one fails."""
    deadline = None if wait is None else time.monotonic() + wait
    taken: list[Lease] = []
    try:
        for key in sorted(names):
            lease = enter(kind, options, names[key], key, _remaining(deadline))
            if lease is None:
                break
            taken.append(lease)
        else:
            return taken
    except BaseException:
        _leave_quietly(taken)
        raise
    _leave_quietly(taken)
    return None


def finish_all(leases: list[Lease], error: BaseException | None) -> None:
    """Finish every lease (reverse order), whatever one of them raises -- a failed release
    must not leave the others held and renewed -- then raise the first problem."""
    first: BaseException | None = None
    for lease in reversed(leases):
        try:
            finish(lease, error)
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first


def _leave_quietly(leases: list[Lease]) -> None:
    for lease in reversed(leases):
        with contextlib.suppress(RedisError):
            leave(lease)


async def enter_all_async(
    kind: Kind, options: LeaseOptions, names: dict[str, str], wait: float | None
) -> list[Lease] | None:
    deadline = None if wait is None else time.monotonic() + wait
    taken: list[Lease] = []
    try:
        for key in sorted(names):
            lease = await enter_async(kind, options, names[key], key, _remaining(deadline))
            if lease is None:
                break
            taken.append(lease)
        else:
            return taken
    except BaseException:
        await _leave_quietly_async(taken)
        raise
    await _leave_quietly_async(taken)
    return None


async def finish_all_async(leases: list[Lease], error: BaseException | None) -> None:
    first: BaseException | None = None
    for lease in reversed(leases):
        try:
            await finish_async(lease, error)
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first


async def _leave_quietly_async(leases: list[Lease]) -> None:
    for lease in reversed(leases):
        with contextlib.suppress(RedisError):
            await leave_async(lease)

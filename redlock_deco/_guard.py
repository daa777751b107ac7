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

from . import _drivers as drivers
from . import _events as events
from . import _eviction as eviction
from . import _ownership as ownership
from . import _process as process
from . import _providers as providers
from . import _renewal as renewal
from ._errors import LockError, LockLost, LockNotReplicated, ProviderError
from ._lifecycle import Cleanup, Lease
from ._options import LeaseOptions
from ._process import Holdings
from ._protocol import (
    Acquired,
    Claim,
    Granted,
    Keys,
    Kind,
    NotGranted,
    SingleNode,
    fast_granted,
)


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, also on Python 3.10 (which only lacks the method)."""
    notes = getattr(error, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        error.__notes__ = notes  # type: ignore[attr-defined]  # the 3.11+ attribute, by hand
    notes.append(note)


def _reenter(held: Holdings | None, kind: Kind, options: LeaseOptions, key: str) -> Lease | None:
    """The owner's lease on ``key`` if it already holds it (then counted once more).

    Shared in shared, exclusive in exclusive, and shared inside exclusive (it stays
    exclusive) re-enter. Exclusive inside shared -- an upgrade -- raises at once: two readers
    upgrading would each wait for the other to leave, forever.
    """
    lease = held.get((options.provider, key)) if held is not None else None
    if lease is None:
        return None
    if lease.claim.kind.shared and not kind.shared:
        raise LockError(
            f"this owner holds {key!r} shared (read) and asks for it exclusively: upgrading "
            "a shared lock is refused, because two readers upgrading at once would each wait "
            "for the other forever; take it exclusively from the start (or release the "
            "shared hold first, knowing that others may write in between)",
            name=lease.name,
            key=key,
        )
    if options.fencing and lease.fencing_token is None:
        # Re-entering would hand the fenced call the outer holder's lease, which has no
        # token: the store it protects could not tell this writer from a stale one.
        raise LockError(
            f"a fencing=True call re-enters {key!r}, which this owner already holds without "
            "fencing, so there is no fencing token to give it; make the outer holder "
            "fencing=True as well (one lock name, one fencing choice)",
            name=lease.name,
            key=key,
        )
    lease.reenter()
    return lease


def _claim(kind: Kind, options: LeaseOptions, key: str, target: Any) -> Claim:
    keys = Keys.for_key(key, kind, options.fencing)
    confirm = options.fencing or options.replicas > 0 or not options.auto_renew
    counted = getattr(target, "counted", True)
    return Claim(kind, keys, kind.new_token(), options.ttl_ms, options.limit, options.replicas,
                 confirm, counted)  # fmt: skip


def _left(wait: float | None, started: float) -> float | None:
    """What is left of ``wait`` (None: forever) since ``started``."""
    return None if wait is None else max(0.0, wait - (time.monotonic() - started))


def _check_target(kind: Kind, options: LeaseOptions, target: Any) -> None:
    """Refuse what a quorum of masters cannot do: fencing, and shared (read) locks."""
    if kind.shared and not isinstance(target.algorithms, SingleNode):
        raise ProviderError(
            f"shared=True needs one Redis (a server, a cluster or a Sentinel primary): "
            f"provider {options.provider!r} is a quorum of masters, where waiters poll "
            "instead of queueing, so nothing would stop a stream of readers from starving a "
            "writer forever; use an exclusive lock there, or a single-node provider",
            provider=options.provider,
        )
    if kind.shared and target.waiting is None:
        raise ProviderError(
            f"shared=True needs waiters that queue: provider {options.provider!r} cannot "
            "subscribe to hand-offs (its client pool has fewer than 3 connections, or the "
            "client cannot subscribe), so its waiters poll, and a stream of readers could "
            "keep a polling writer out forever; give its client max_connections=3 or more",
            provider=options.provider,
        )
    if options.fencing and not isinstance(target.algorithms, SingleNode):
        raise ProviderError(
            f"fencing=True needs one Redis (a server, a cluster or a Sentinel primary): "
            f"provider {options.provider!r} is a quorum of masters, which has no single "
            "counter to draw strictly increasing tokens from",
            provider=options.provider,
        )


def _not_granted(
    result: NotGranted, options: LeaseOptions, name: str, key: str, started: float
) -> None:
    """The wait ran out: raise if the reason was missing replicas, else report busy."""
    waited = time.monotonic() - started
    if result.acknowledged is not None:
        raise LockNotReplicated(
            name=name, key=key, waited=waited, replicas=options.replicas,
            acknowledged=result.acknowledged,
        )  # fmt: skip
    if events.listeners:
        source = options.source or events.Source.direct(name, options.provider)
        events.emit("busy", name, key, waited, source)


def _new_lease(
    claim: Claim,
    name: str,
    options: LeaseOptions,
    target: object,
    started: float,
    granted: Granted,
    io: Any,
    alive: Callable[[], bool],
    on_lost: Callable[[Lease], object] | None,
    by_object: bool = False,
) -> Lease:
    """A lease just acquired, built complete; measured from when the winning attempt was
    sent (``started``, the start of the whole acquire, if the algorithm did not say)."""
    if granted.sent_at is not None:
        started = granted.sent_at
    lease = Lease(
        claim, name=name, provider=options.provider, target=target, started=started, io=io,
        alive=alive, fencing_token=granted.fencing_token, max_hold=options.max_hold,
        on_lost=on_lost, by_object=by_object, lease_ms=granted.lease_ms, source=options.source,
    )  # fmt: skip
    if events.listeners:
        events.emit("acquired", name, claim.keys.key, lease.acquired_at - started, lease.source)
    return lease


def _released(lease: Lease, answer: bool | None, was_lost: bool) -> bool:
    """Record the outermost release's answer; True if the lease was ours to the end.

    ``None`` (a quorum release nobody refused but too few confirmed in time) is decided by
    the holder's own clock: a lease past its end by that clock was not ours to the end.
    """
    released = answer if answer is not None else lease.remaining() > 0
    if released:
        lease.release()
    else:
        lease.lose()
    if events.listeners:
        held = time.monotonic() - lease.acquired_at
        if not released and not was_lost:  # found at release (renewal reported its own)
            events.emit("lost", lease.name, lease.key, None, lease.source)
        # Last: a lease's "released" closes it, after any "lost" (listeners rely on it).
        events.emit("released", lease.name, lease.key, held, lease.source)
    return released and not was_lost


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
    """The outermost release raised. A lease already known lost is reported as lost (the
    call ran unprotected: a connection error alone would hide that); otherwise the error
    itself, or a note on the call's own exception."""
    if error is not None:
        lost = " The lease had also been lost while the call ran." if lease.lost else ""
        add_note(error, f"releasing {lease.key!r} failed too ({exc!r}); it expires within its "
                 f"ttl.{lost}")  # fmt: skip
        return
    if lease.lost:
        raise LockLost(
            f"the lease on {lease.key!r} ended while the protected call ran (renewal found it "
            f"gone), and releasing it failed too ({exc!r})",
            name=lease.name,
            key=lease.key,
        ) from exc
    raise exc


def _forget_holding(lease: Lease, held: Holdings | None) -> None:
    if held is not None and held.get((lease.provider, lease.key)) is lease:
        del held[(lease.provider, lease.key)]


# -- sync --------------------------------------------------------------------------------


def enter(
    kind: Kind, options: LeaseOptions, name: str, key: str, wait: float | None
) -> Lease | None:
    """Take the lease on ``key`` for the calling thread (or count a re-entry); None if
    ``wait`` ran out."""
    held = ownership.thread_holdings() if kind.reentrant else None
    lease = _reenter(held, kind, options, key)
    if lease is not None:
        return lease
    target = providers.sync_target(options.provider)
    _check_target(kind, options, target)
    claim = _claim(kind, options, key, target)
    algorithms = target.algorithms
    first = algorithms.fast_try(claim, wait, target.listening)
    started = time.monotonic()
    try:
        # The lean path: an uncontended lock is one plain command, sent here directly.
        result: Acquired | None = None
        if first is not None:
            result = fast_granted(target.execute(first), started)
        if result is None:
            left = _left(wait, started)
            steps = algorithms.acquire(claim, left, target.listening, tried=first is not None)
            result = drivers.run(steps, target)
    except BaseException as exc:
        _cut_short(claim, target, exc)
        raise
    if type(result) is NotGranted:
        _not_granted(result, options, name, key, started)
        return None
    assert type(result) is Granted
    on_lost = options.on_lost if callable(options.on_lost) else None
    alive = threading.current_thread().is_alive
    lease = _new_lease(claim, name, options, target, started, result, threading.Lock(), alive,
                       on_lost)  # fmt: skip
    if held is not None:
        held[(options.provider, key)] = lease
    if options.auto_renew:
        renewal.renewer().add(lease)
    if not target.checked:
        eviction.start_check(target)
    return lease


def _cut_short(claim: Claim, target: Any, exc: BaseException) -> None:
    """An acquire failed or was interrupted mid-flight: leave nothing of it behind.

    Its SET may have landed without us hearing the reply. An unreachable server gets the
    token-compared release retried in the background (retrying here would repeat the
    client's own retries and double the time the caller waits); an error reply (READONLY,
    NOPERM, OOM, WRONGTYPE) is an answer, raised at once, with one best-effort release for a
    script that failed after its SET; anything else (KeyboardInterrupt, a bug) releases now.
    """
    if isinstance(exc, renewal.UNREACHABLE):
        renewal.renewer().add(Cleanup(claim, target, time.monotonic()))
        return
    try:
        drivers.run(target.algorithms.abandon(claim), target)
    except renewal.UNREACHABLE:
        if not isinstance(exc, RedisError):
            renewal.renewer().add(Cleanup(claim, target, time.monotonic()))
    except RedisError:
        pass  # the server answered with an error again: nothing more to do


def leave(lease: Lease) -> bool:
    """Give the lease back (or count down a re-entry). True unless the outermost exit found
    the lease already ended; a nested exit never reports (the outermost one will)."""
    if not lease.exit():
        return True
    _forget_holding(lease, ownership.thread_holdings() if lease.claim.kind.reentrant else None)
    if lease.pid != os.getpid():
        # A forked child holds nothing: the lease is its parent's, and so is the renewer
        # (whose lock another thread may have held at fork time: touching it could hang).
        return True
    renewal.renewer().remove(lease)
    was_lost = lease.lost
    lease.releasing()  # a renewal still in flight can no longer call it lost
    try:
        answer = drivers.run(lease.target.algorithms.release(lease.claim), lease.target)
    except BaseException as exc:
        lease.release()  # not renewed any more either way
        if isinstance(exc, renewal.UNREACHABLE):  # released in the background once it answers
            renewal.renewer().add(Cleanup(lease.claim, lease.target, time.monotonic()))
        raise
    return _released(lease, answer, was_lost)


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


def task_owner() -> tuple[asyncio.Task[Any], Callable[[], bool]]:
    """The calling task, and whether it is still running (renewal stops when it ends)."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("redlock_deco.asyncio primitives must be used inside an asyncio task")
    return task, lambda: not task.done()


async def enter_async(
    kind: Kind,
    options: LeaseOptions,
    name: str,
    key: str,
    wait: float | None,
    *,
    helper_of: Callable[[], bool] | None = None,
) -> Lease | None:
    """Take the lease on ``key`` for the current task (or count a re-entry).

    ``helper_of``: the task only runs this acquire for someone else (``asyncio.gather``,
    ``shield``, ``wait_for`` before 3.12), so the lease belongs to the object that asked
    for it; renewal then goes on while ``helper_of()`` is true.
    """
    task, task_alive = task_owner()
    held = ownership.task_holdings(task) if kind.reentrant and helper_of is None else None
    lease = _reenter(held, kind, options, key)
    if lease is not None:
        return lease
    target = providers.async_target(options.provider)
    _check_target(kind, options, target)
    if not target.checked:  # before acquiring: a cancellation here leaves nothing held
        await eviction.check_async_once(target)
    claim = _claim(kind, options, key, target)
    algorithms = target.algorithms
    first = algorithms.fast_try(claim, wait, target.listening)
    started = time.monotonic()
    try:
        result: Acquired | None = None
        if first is not None:
            result = fast_granted(await target.execute(first), started)
        if result is None:
            left = _left(wait, started)
            steps = algorithms.acquire(claim, left, target.listening, tried=first is not None)
            result = await drivers.run_async(steps, target)
    except BaseException as exc:
        await _cut_short_async(claim, target, exc)
        raise
    if type(result) is NotGranted:
        _not_granted(result, options, name, key, started)
        return None
    assert type(result) is Granted
    on_lost = options.on_lost if callable(options.on_lost) else None
    if options.on_lost == "cancel" and helper_of is None:
        on_lost = lambda _lease: task.cancel()  # noqa: E731  # runs in this loop's renewer
    alive = task_alive if helper_of is None else helper_of
    lease = _new_lease(claim, name, options, target, started, result, asyncio.Lock(), alive,
                       on_lost, by_object=helper_of is not None)  # fmt: skip
    if held is not None:
        held[(options.provider, key)] = lease
    process.loop_state().leases.add(lease)  # released at the loop's shutdown if still held
    if options.auto_renew:
        renewal.async_renewer().add(lease)
    return lease


async def _cut_short_async(claim: Claim, target: Any, exc: BaseException) -> None:
    """:func:`_cut_short` for asyncio; a task cancelled (again) meanwhile still cleans up."""
    if isinstance(exc, renewal.UNREACHABLE):
        renewal.async_renewer().add(Cleanup(claim, target, time.monotonic()))
        return
    try:
        await asyncio.shield(drivers.run_async(target.algorithms.abandon(claim), target))
    except (*renewal.UNREACHABLE, asyncio.CancelledError):
        if not isinstance(exc, RedisError):
            renewal.async_renewer().add(Cleanup(claim, target, time.monotonic()))
    except RedisError:
        pass


async def leave_async(lease: Lease) -> bool:
    """Give the lease back (or count down a re-entry). True unless the outermost exit found
    the lease already ended. A task cancelled while releasing still releases."""
    if not lease.exit():
        return True
    if lease.claim.kind.reentrant:
        _forget_holding(lease, ownership.task_holdings())
    if lease.pid != os.getpid():
        return True
    state = process.loop_state()
    state.leases.discard(lease)
    renewal.async_renewer().remove(lease)
    was_lost = lease.lost
    lease.releasing()
    release = lease.target.algorithms.release
    try:
        answer = await drivers.run_async(release(lease.claim), lease.target)
    except asyncio.CancelledError:
        # Cancelled mid-release: finish it shielded before the cancellation goes on (a second
        # release is harmless: it compares the token). Shielding only here keeps a Task per
        # call off the hot path.
        try:
            await asyncio.shield(drivers.run_async(release(lease.claim), lease.target))
        finally:
            lease.release()
        raise
    except BaseException as exc:
        lease.release()
        if isinstance(exc, renewal.UNREACHABLE):  # released in the background once it answers
            renewal.async_renewer().add(Cleanup(lease.claim, lease.target, time.monotonic()))
        raise
    return _released(lease, answer, was_lost)


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

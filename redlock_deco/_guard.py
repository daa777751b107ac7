"""Taking and giving back a lease around a protected section, shared by every entry point
(``@locked``, ``@limited``, ``Lock``, ``Semaphore`` and their asyncio twins).

The sync and async twins sit side by side and differ only in I/O: where the owner's table
comes from (thread or task), which driver runs the protocol, which renewer keeps the lease.
Everything they decide is in the plain helpers at the top.

Why one module: every path that takes or gives back a lease (sections, ``with`` blocks, bare
acquires, several names at once) follows the one interruption discipline described below, in
sync/async twins that tests/core/test_twins.py compares; split apart, a handler or a twin
would drift out of sight of the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from redis.exceptions import RedisError

from . import _drivers as drivers
from . import _events as events
from . import _eviction as eviction
from . import _ownership as ownership
from . import _process as process
from . import _providers as providers
from . import _renewal as renewal
from . import _tokens as tokens
from . import _worker as worker
from ._errors import LockError, LockLost, LockNotReplicated, ProviderError, add_note
from ._lifecycle import Cleanup, Lease, Left, found_lost, say_released
from ._options import LeaseOptions
from ._protocol import (
    Claim,
    Granted,
    Keys,
    Kind,
    NotGranted,
    SingleNode,
)


def _check_reentry(lease: Lease, kind: Kind, options: LeaseOptions, key: str) -> None:
    """Refuse re-entries that cannot be counted as one more section on the owner's lease.

    Shared in shared, exclusive in exclusive, and shared inside exclusive (it stays
    exclusive) re-enter. Exclusive inside shared -- an upgrade -- raises at once: two readers
    upgrading would each wait for the other to leave, forever.
    """
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


def _waits_for_itself(owner: ownership.Owner, kind: Kind, options: LeaseOptions, key: str,
                      wait: float | None, *, blocks_thread: bool) -> str | None:  # fmt: skip
    """Why a wait for ``key`` here could only run out (then the caller tries once and raises
    :func:`_self_wait` if that fails), or None."""
    if wait == 0 or not kind.reentrant:
        return None
    return ownership.waits_for_itself(owner, (options.provider, key), blocks_thread=blocks_thread)


def _self_wait(reason: str, name: str, key: str) -> LockError:
    return LockError(f"{key!r} is taken, and waiting for it here would never end: {reason}",
                     name=name, key=key)  # fmt: skip


def _claim(kind: Kind, options: LeaseOptions, key: str, target: Any) -> Claim:
    keys = Keys.for_key(key, kind, options.fencing)
    # A grant message carries no fencing token and no replica acknowledgements: only the
    # server's answer to a confirming attempt does. (A grant's lease is the waiter's own
    # ttl, so a lease nothing renews needs no confirming.)
    confirm = options.fencing or options.replicas > 0
    counted = getattr(target, "counted", True)
    token = kind.token(tokens.new_token())
    return Claim(kind, keys, token, options.ttl_ms, options.limit, options.replicas, confirm,
                 counted)  # fmt: skip


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
) -> Lease:
    """A lease just acquired, built complete; measured from when the winning attempt was
    sent (``started``, the start of the whole acquire, if the algorithm did not say)."""
    if granted.sent_at is not None:
        started = granted.sent_at
    lease = Lease(
        claim, name=name, provider=options.provider, target=target, started=started, io=io,
        alive=alive, fencing_token=granted.fencing_token, max_hold=options.max_hold,
        on_lost=on_lost, source=options.source,
    )  # fmt: skip
    if events.listeners:
        events.emit("acquired", name, claim.keys.key, lease.acquired_at - started, lease.source)
    return lease


def _released(lease: Lease, answer: bool | None, was_lost: bool, resent: bool = False) -> bool:
    """Record the outermost release's answer; True if the lease was ours to the end.

    ``None`` (a quorum release nobody refused but too few confirmed in time) is decided by
    the holder's own clock: a lease past its end by that clock was not ours to the end. So
    is a refusal of a release the client re-sent (``resent``): the first sending may have
    run and released it (review 5, r01).
    """
    if resent and answer is False:
        answer = None
    released = answer if answer is not None else lease.remaining() > 0
    if released:
        lease._release()
    else:
        found_lost(lease)
    # Last: a lease's "released" closes it, after any "lost" (listeners rely on it).
    say_released(lease, time.monotonic() - lease.acquired_at)
    return released and not was_lost


def _why_lost(lease: Lease) -> str:
    if not lease.alive():
        # Only a generator's block can outlive the task or thread that entered it.
        return (
            f"the lease on {lease.key!r} was given up while its block was open: the task or "
            "thread that entered the block ended (a generator, resumed by another one?), and a "
            "block's lease lives no longer than its owner. To hold a lock across the steps of "
            "a generator that several tasks or threads run, hold it by its object: "
            "lock.acquire() ... finally: lock.release()"
        )
    return (
        f"the lease on {lease.key!r} ended while the protected call ran (it expired or was "
        "taken over); nothing of the new holder's was touched. Raise ttl or keep auto_renew"
    )


def _lost_lease(lease: Lease, error: BaseException | None, kept: bool) -> LockLost | None:
    """After the outermost exit: the LockLost to raise, or None (maybe noting ``error``)."""
    if kept:
        return None
    if error is None or isinstance(error, GeneratorExit):
        # A generator closed inside its block: a note on GeneratorExit would reach nobody
        # (close() swallows it), and its loss would go unheard.
        return LockLost(_why_lost(lease), name=lease.name, key=lease.key)
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


# -- sync --------------------------------------------------------------------------------
#
# Interruptions: a KeyboardInterrupt (any BaseException) may arrive at any line. Every
# function below that changes what is held does so inside one try whose handler undoes it
# (a lease given back, a section forgotten), and hands its result to the caller with the
# ``return`` inside that try, so nothing can come between taking a lease and its keeper
# (a section, an object's list) knowing of it. Without that, a caught Ctrl-C left a lease
# held and renewed while its thread lived, and that thread's later calls walked into it.


def _kept(claim: Claim, name: str, options: LeaseOptions, target: Any, started: float,
          granted: Granted, alive: Callable[[], bool], taken: list[Lease]) -> Lease:  # fmt: skip
    """The lease a granted acquire (or an adoption) took, in ``taken`` as soon as it exists,
    renewed if ``auto_renew``; the target's eviction check started on first use."""
    on_lost = options.on_lost if callable(options.on_lost) else None
    lease = _new_lease(claim, name, options, target, started, granted, threading.Lock(), alive,
                       on_lost)  # fmt: skip
    taken.append(lease)
    if options.auto_renew:
        renewal.renewer().add(lease)
    if not target.checked:
        eviction.start_check(target)
    return lease


def _take(kind: Kind, options: LeaseOptions, name: str, key: str, wait: float | None,
          alive: Callable[[], bool], taken: list[Lease]) -> Lease | None:  # fmt: skip
    """A lease on ``key``, renewed while ``alive()``; None if ``wait`` ran out. The lease is
    also put in ``taken`` as soon as it exists: an interrupt as this function returned, before
    the caller stored what it returned, once left the lease held and renewed (review 4); the
    caller gives back whatever ``taken`` holds when it is interrupted."""
    target = providers.sync_target(options.provider)
    _check_target(kind, options, target)
    claim = _claim(kind, options, key, target)
    started = time.monotonic()
    lease: Lease | None = None
    try:
        result = drivers.acquire(claim, wait, started, target)
        if type(result) is Granted:
            lease = _kept(claim, name, options, target, started, result, alive, taken)
            return lease
    except BaseException as exc:
        if lease is not None:
            _stop(lease)
        _cut_short(claim, target, exc)
        raise
    assert type(result) is NotGranted
    _not_granted(result, options, name, key, started)
    return None


def _stop(lease: Lease) -> None:
    """No more renewals of ``lease`` (its release is under way or given up)."""
    lease._release()
    renewal.renewer().remove(lease)


def _cut_short(claim: Claim, target: Any, exc: BaseException) -> None:
    """An acquire failed or was interrupted mid-flight: leave nothing of it behind.

    Its SET may have landed without us hearing the reply. An unreachable server gets the
    token-compared release retried in the background (retrying here would repeat the
    client's own retries and double the time the caller waits); an error reply (READONLY,
    NOPERM, OOM, WRONGTYPE) is an answer, raised at once, with one best-effort release for a
    script that failed after its SET; anything else (KeyboardInterrupt, a bug) releases now,
    or in the background if that is interrupted too.
    """
    if isinstance(exc, renewal.UNREACHABLE):
        renewal.give_back_later(claim, target, False)
        return
    try:
        drivers.run(target.algorithms.abandon(claim), target)
    except renewal.UNREACHABLE:
        if not isinstance(exc, RedisError):
            renewal.give_back_later(claim, target, False)
    except RedisError:
        pass  # the server answered with an error again: nothing more to do
    except BaseException:
        renewal.give_back_later(claim, target, False)
        raise


def _abandon(lease: Lease, exc: BaseException) -> None:
    """Give ``lease`` back at once, best effort, after an interruption: it was taken, but
    whoever was to keep it never will."""
    _stop(lease)
    if lease.pid == os.getpid():
        try:
            _cut_short(lease.claim, lease.target, exc)
        finally:
            _never_kept(lease)


def _never_kept(lease: Lease) -> None:
    """The "released" that closes the "acquired" listeners saw of a lease its caller never
    got (review 93a, F1: its events stopped at "acquired", a hold that never ended)."""
    say_released(lease, 0.0)


def _give_back(lease: Lease) -> bool:
    """Release ``lease``; True unless it had already ended."""
    if lease.pid != os.getpid():
        # A forked child holds nothing: the lease is its parent's, and so is the renewer
        # (whose lock another thread may have held at fork time: touching it could hang).
        return True
    renewal.renewer().remove(lease)
    was_lost = lease.lost
    lease._releasing()  # a renewal still in flight can no longer call it lost
    before = drivers.resent()
    try:
        answer = drivers.run(lease.target.algorithms.release(lease.claim), lease.target)
    except BaseException as exc:
        lease._release()  # not renewed any more either way
        if isinstance(exc, renewal.UNREACHABLE):  # released in the background once it answers
            renewal.give_back_later(lease.claim, lease.target, False, lease)
        raise
    return _released(lease, answer, was_lost, drivers.resent() != before)


def _dropped(lease: Lease) -> None:
    """The last section on ``lease`` was dropped open (see ownership.Section): stop renewing
    it and release it in the background, at once. Runs in a finalizer: no I/O, no lock
    it could already hold."""
    lease._orphan()
    if lease.pid == os.getpid():
        cleanup = Cleanup(lease.claim, lease.target, time.monotonic(), lease)
        renewal.renewer().add_from_finalizer(cleanup)


def _dropped_async(loop: weakref.ref[asyncio.AbstractEventLoop], lease: Lease) -> None:
    """:func:`_dropped` for asyncio: stop renewing it, and release it on ``loop``, its own,
    at that loop's next turn, in a task of its own (nobody is left to hear a loss). Runs in
    a finalizer, in whatever thread collected the section: nothing but the loop's
    thread-safe ``call_soon``, in an empty context (the collector's is some other code's).
    Left to the loop's shutdown (closing, it releases what its tasks held) or its ttl once
    that loop is closed. (Orphaned only, the lease of a stack dropped unclosed, or closed by
    a task cancelled before its first step, stayed held by nobody for its ttl.)"""
    lease._orphan()
    found = loop()
    if found is None or lease.pid != os.getpid():
        return
    with contextlib.suppress(RuntimeError):  # (closed)
        found.call_soon_threadsafe(_give_back_dropped, lease, context=contextvars.Context())


def _give_back_dropped(lease: Lease) -> None:
    worker.background(_give_back_quietly(lease), "redlock-deco-release", lease._orphan)


def _dropped_here() -> Callable[[Lease], None]:
    """:func:`_dropped_async` for a section opened in the running loop."""
    return partial(_dropped_async, weakref.ref(asyncio.get_running_loop()))


def _across_modes(lease: Lease, key: str) -> LockError:
    """A sync section inside an asyncio one of the same task on the same name, or the
    reverse: one lease cannot serve both. (Counted as a re-entry, the lease's last exit ran
    the other mode's give-back -- an asyncio release from sync code, a sync one awaited --
    which failed, and the name stayed held until its ttl: review 89a, F3.)"""
    taken = "an asyncio" if isinstance(lease.io, asyncio.Lock) else "a sync"
    asked = "a sync" if taken == "an asyncio" else "an asyncio"
    return LockError(
        f"this task holds {key!r} through {taken} lock, and {asked} one asks for it again "
        "inside: one lease cannot serve both, so this is refused. In async code, take every "
        "section of a name the task may already hold with redlock_deco.asyncio's primitives "
        "(a sync lock also blocks the event loop while it waits)",
        name=lease.name,
        key=key,
    )


def _reentry(
    owner: ownership.Owner,
    kind: Kind,
    options: LeaseOptions,
    key: str,
    dropped: Callable[[Lease], None],
    place: ownership.Place | None,
    keep: ownership.Blocks | None,
    *,
    asynchronous: bool,
) -> tuple[ownership.Section | None, bool]:
    """A section re-entering the lease of one of ``owner``'s open sections on ``key``, if
    any; and whether that lease's last section left as this looked (another thread closed
    it: the lease is on its way back, so the name is taken anew, and a wait for it is no
    wait for itself)."""
    held = ownership.reentered(owner, (options.provider, key)) if kind.reentrant else None
    if held is None:
        return None, False
    _check_reentry(held, kind, options, key)
    if isinstance(held.io, asyncio.Lock) != asynchronous:
        raise _across_modes(held, key)
    try:
        section = ownership.open_section(held, owner, fresh=False, dropped=dropped,
                                         place=place, keep=keep)  # fmt: skip
    except Left:
        return None, True
    return section, False


def open_section(
    kind: Kind,
    options: LeaseOptions,
    name: str,
    key: str,
    wait: float | None,
    *,
    place: ownership.Place | None = None,
    keep: ownership.Blocks | None = None,
) -> ownership.Section | None:
    """Open a section on ``key`` for the calling task or thread: re-enter the lease of one
    of its open sections, or take a new one; None if ``wait`` ran out. ``keep``: the list
    of an object's open ``with`` blocks, which the section joins."""
    owner = ownership.current_owner()
    section, left = _reentry(owner, kind, options, key, _dropped, place, keep,
                             asynchronous=False)  # fmt: skip
    if section is not None:
        return section
    reason = None if left else _waits_for_itself(owner, kind, options, key, wait,
                                                 blocks_thread=True)  # fmt: skip
    taken: list[Lease] = []
    try:
        lease = _take(kind, options, name, key, 0 if reason else wait, ownership.liveness(owner),
                      taken)  # fmt: skip
        if lease is not None:
            return ownership.open_section(lease, owner, fresh=True, dropped=_dropped, place=place,
                                           keep=keep)  # fmt: skip
    except BaseException as exc:
        for lease in taken:
            _abandon(lease, exc)
        raise
    if reason is not None:
        raise _self_wait(reason, name, key)
    return None


def close_section(section: ownership.Section | None, error: BaseException | None) -> None:
    """Leave ``section`` (None: none was opened); the last one open on its lease gives it
    back. Then make a lost lease loud: LockLost, or a note on the call's own ``error``. A
    nested exit never reports (the outermost one will)."""
    try:  # first: an interruption anywhere below still finishes the exit
        if section is None or not ownership.close(section):
            return
        kept = _give_back(section.lease)
    except RedisError as exc:
        _release_failed(section.lease, error, exc)  # type: ignore[union-attr]  # closed: not None
        return
    except BaseException as exc:
        if section is not None:
            abort(section, exc)
        raise
    lost = _lost_lease(section.lease, error, kept)
    if lost is not None:
        raise lost


def abort_open(sections: Sections | ownership.Section | None, exc: BaseException) -> None:
    """Abort those of ``sections`` (one, a list, or None) still open, as a caller does when
    its call that closes them raised: cut short as that call began, before its own handling
    (an interrupt as its frame starts), it closed nothing, and the caller's frame -- kept by
    the exception's traceback, in a caller that keeps the exception -- kept the section
    open, held and renewed (review 68, F1-F3). One its call closed is not open."""
    for section in sections if isinstance(sections, list) else (sections,):
        if section is not None and section.open:
            abort(section, exc)


async def abort_open_async(
    sections: Sections | ownership.Section | None, exc: BaseException
) -> None:
    for section in sections if isinstance(sections, list) else (sections,):
        if section is not None and section.open:
            await abort_async(section, exc)


def abort(section: ownership.Section, exc: BaseException) -> None:
    """Finish leaving ``section`` after its opening or exit was interrupted (by ``exc``):
    forget it, and give its lease back if no other section is open on it."""
    if ownership.close(section):
        _abandon(section.lease, exc)


def close_unexited(blocks: ownership.Blocks, where: ownership.Place) -> None:
    """Close the blocks of an object whose ``with`` statement is over though their exit never
    ran (see ownership.unexited), as a ``with`` statement enters it again from ``where``: their
    lease is given back, best effort (else it lapses within its ttl, renewed no more)."""
    for section in ownership.unexited(blocks, where):
        try:
            if ownership.close(section):
                _stop(section.lease)
                with contextlib.suppress(Exception):  # unreachable: given back later
                    _give_back(section.lease)
        except BaseException as exc:
            # Interrupted in turn: closed again (close() may repeat) and given back, else the
            # lease stayed held and renewed with no block open (review 42, 1).
            abort(section, exc)
            raise


_UNSET: Any = object()


def _unmatched_exit(blocks: ownership.Blocks, where: ownership.Place) -> LockError:
    """An exit that matches none of its object's open blocks by stack, frame or owner:
    guessing gave another owner's live semaphore slot away, and its body ran on without it
    (review 20, 04). Nothing is released; the error says so."""
    lease = blocks[-1].lease
    if where.stack is not None:
        return LockError(
            f"this exit of a block on {lease.key!r}, run by an ExitStack, is none of the "
            "blocks entered through that stack: an exit pushed onto it by hand "
            "(stack.push(obj) or stack.callback(obj.__exit__, ...)), which cannot tell which "
            f"of the object's {len(blocks)} open blocks it ends (only the object's one block not "
            "entered through a stack, entered by the closing thread or task or by one that "
            "has ended, can be), so nothing was released: enter the block through the stack "
            "instead (stack.enter_context(obj)), whose exit ends exactly that block wherever "
            "the stack is closed",
            name=lease.name,
            key=lease.key,
        )
    return LockError(
        f"this exit of a block on {lease.key!r} matches none of the object's {len(blocks)} "
        "open blocks (each was entered in another frame, by a thread or task still running "
        "or by a generator -- a direct __exit__() call?), so nothing was released: leave a "
        "block where it was entered, or enter it through an ExitStack and close that stack "
        "(its exit leaves exactly the blocks entered through it, wherever it is handed)",
        name=lease.name,
        key=lease.key,
    )


def close_block(
    blocks: ownership.Blocks,
    error: BaseException | None,
    handled: list[bool] | None = None,
    by: ownership.StackExit | None = None,
) -> None:
    """The exit of a ``with`` block on an object whose open blocks are ``blocks`` (``by``: the
    exit an ExitStack runs, if it is one: see ownership.exiting). Marks
    ``handled`` once the block is closed, or as its own handler begins: a caller whose call
    raised with it unmarked was cut short as this began, before its ``try``, and gives the
    block up itself (see close_block_cut). Not as the ``try`` begins: a cut between the two
    had both give a block up -- the second one the outer block of the same object, whose
    body then ran on unprotected (review 69, F3); nor only in the handler: a cut as this
    returned (Python 3.10 looks for a signal there) did the same (review 70, F1)."""
    section = _UNSET
    try:
        where = ownership.place(blocks)
        by = ownership.run_as(blocks, by, where)
        section = ownership.exiting(blocks, where, by)
        if section is None and blocks:
            raise _unmatched_exit(blocks, where)
        if section is not None and not ownership.ends(section, by):
            section = None  # (ended by its other exit, or to be: see ownership.ends)
        close_section(section, error)
        if handled is not None:  # (closed: a cut as this returns must not give up another)
            handled.append(True)
    except BaseException as exc:
        if handled is not None:
            handled.append(True)
        # Interrupted before its exit began (finding it, or entering close_section): give
        # it up now. (One close_section closed, or that raised LockLost, is not open.)
        if section is _UNSET:
            section = ownership.leaving(blocks, by)
        if section is not None and section.open:
            abort(section, exc)
        raise


def close_block_cut(
    blocks: ownership.Blocks, exc: BaseException, by: ownership.StackExit | None = None
) -> None:
    """Give up the block an exit was leaving when its close_block was cut short as it
    began (an interrupt as its frame started): the block stayed open, held and renewed,
    for as long as a caller kept the exception -- whose traceback keeps the frames that
    would otherwise have dropped it (review 68, F3)."""
    section = ownership.leaving(blocks, by)
    if section is not None and section.open:
        abort(section, exc)


def acquire_held(held: list[Lease], kind: Kind, options: LeaseOptions, name: str, key: str,
                 wait: float | None, alive: Callable[[], bool], kept: Callable[[], None],
                 taken: list[Lease]) -> bool:  # fmt: skip
    """A bare ``acquire()``: take a lease that belongs to the object whose list of leases
    is ``held``, renewed while ``alive()`` (the object exists); ``kept()`` once it is in
    ``held``. It re-enters nothing. ``taken``: where the lease goes first, for the caller's
    :func:`give_back_taken`."""
    owner = ownership.current_owner()
    reason = _waits_for_itself(owner, kind, options, key, wait, blocks_thread=True)
    try:
        lease = _take(kind, options, name, key, 0 if reason else wait, alive, taken)
        if lease is None and reason is not None:
            raise _self_wait(reason, name, key)
        if lease is not None:
            held.append(lease)
            kept()
        # Not `return True`: CPython evaluates a returned constant after leaving the try,
        # where an exception raised at that line (by a tracer) would skip the handler.
        return lease is not None
    except BaseException as exc:
        give_back_taken(held, taken, exc)
        raise


def _adopted(options: LeaseOptions, name: str, key: str, held_by: object,
             held: list[Lease]) -> str:  # fmt: skip
    """The token to adopt, checked: ``adopt(held_by)``'s argument, a lease token."""
    if isinstance(held_by, bytes):
        held_by = held_by.decode("utf-8", "replace")
    if not isinstance(held_by, str) or not held_by:
        raise TypeError(
            f"adopt() takes the token of a lease taken elsewhere (what hand_over() returned, "
            f"or lease.token), got {held_by!r:.60}"
        )
    if options.fencing:
        # The fencing token is not in the lease token, and reading the fence counter after
        # the fact could read a later holder's number: two holders with one fencing token.
        raise ValueError(
            "adopt() cannot recover a fenced lease's fencing token; send lease.fencing_token "
            "with the lease token and check it yourself, or adopt with fencing=False"
        )
    if any(lease.token == held_by for lease in held):
        raise LockError(
            f"this object already holds the lease of that token on {key!r}: nothing to adopt",
            name=name,
            key=key,
        )
    return held_by


def adopt_held(held: list[Lease], kind: Kind, options: LeaseOptions, name: str, key: str,
               held_by: object, alive: Callable[[], bool], kept: Callable[[], None],
               taken: list[Lease]) -> bool:  # fmt: skip
    """``adopt(token)``: take over the lease ``held_by`` holds on ``key`` now (taken by
    another object, in this process or another) for the object whose leases are ``held``,
    under a new token of its own and its ttl, in one step: whatever the old token's holder
    still sends (a renewal in flight, a late release) then touches nothing, and the token
    cannot be adopted twice. False, nothing changed, if ``held_by`` holds nothing there. Cut
    short after the swap may have landed, the lease is given back, as an acquire's is.
    ``taken``: as :func:`acquire_held`'s."""
    target = providers.sync_target(options.provider)
    _check_target(kind, options, target)
    held_by = _adopted(options, name, key, held_by, held)
    claim = _claim(kind, options, key, target)
    started = time.monotonic()
    try:
        if not drivers.run(target.algorithms.adopt(claim, held_by), target):
            return False
        lease = _kept(claim, name, options, target, started, Granted(), alive, taken)
        held.append(lease)
        kept()
        return lease is not None  # (not a constant: see acquire_held)
    except BaseException as exc:
        if taken:
            give_back_taken(held, taken, exc)  # (the adopted lease: its claim's)
        else:
            _cut_short(claim, target, exc)  # the swap may have landed all the same
        raise


_held_lock = threading.Lock()  # one release per lease, when threads share an object


def _unheld_in_child() -> None:
    """A new lock in a forked child: one of the parent's threads may have held this one as
    it forked, and the child's first release would have waited for it for good."""
    global _held_lock
    _held_lock = threading.Lock()


os.register_at_fork(after_in_child=_unheld_in_child)


def _pop_held(held: list[Lease], into: list[Lease]) -> None:
    """Move the newest lease of this process in ``held`` to ``into`` (the caller's), which
    has it before ``held`` loses it: an interrupt as ``held.pop`` returned, or as this
    function did (Python 3.10), lost a lease that stayed held and renewed while its object
    said it held nothing (review 5 r08)."""
    pid = os.getpid()
    with _held_lock:
        _move_newest(held, into, pid)


def _move_newest(held: list[Lease], into: list[Lease], pid: int) -> None:
    """:func:`_pop_held`'s move, a function of its own: on Python 3.13 an interrupt at a
    loop's back edge written inside the ``with`` skipped its exit, and _held_lock stayed held
    for good (test_back_edges)."""
    for index in range(len(held) - 1, -1, -1):
        lease = held[index]
        # (Popped already: by a release() or hand_over() cut as it moved it, whose clean-up
        # gives it back; taken again here, another thread's hand_over() returned a token
        # that clean-up then released -- review 103a, F2.)
        if lease.pid != pid or lease.popped:
            continue
        lease.popped = id(into)  # (first: see give_back_taken and _reclaim)
        into.append(lease)
        del held[index]
        return


def _reclaim(held: list[Lease], into: list[Lease]) -> None:
    """The lease a move into ``into`` marked as its own but was cut short before it got
    there (see _move_newest): the clean-up that gives ``into`` back has it too. Left in the
    object's list, marked popped, no release would take it again."""
    with _held_lock:
        _marked_for(held, into)


def _marked_for(held: list[Lease], into: list[Lease]) -> None:
    """:func:`_reclaim`'s move, a function of its own (see _move_newest)."""
    for lease in held:
        if lease.popped == id(into) and lease not in into:
            into.append(lease)


def _forget_held(held: list[Lease], lease: Lease) -> bool:
    """Take ``lease`` out of ``held``; whether it was there."""
    with _held_lock:
        if lease in held:
            held.remove(lease)
            return True
        return False


def give_back_taken(held: list[Lease], taken: list[Lease], exc: BaseException) -> None:
    """An object's ``acquire()`` or ``adopt()`` was cut short by ``exc``: give back what it
    took (``taken``, emptied as it goes: the guard's handler and then the object's own,
    which covers the call's return into it, never give one back twice).

    Also as :func:`acquire_held` or :func:`adopt_held` returned into the object's method:
    Python 3.10 raises a pending signal in the caller as a function returns, and the lease
    stayed in the object's list, held and renewed, though the call raised (review 101b, F1).

    Counted, for an object threads share: once the lease is in the object's list, another
    thread's ``release()`` or ``hand_over()`` may take it as the newest -- a release meant
    for a lease the object held before. This call then gives back one of those in its
    place, so the object holds what its finished calls took (review 102, F1: the lease the
    other thread meant stayed held and renewed, with nobody to release it)."""
    while taken:
        lease = taken.pop()
        instead: list[Lease] = []
        with _held_lock:
            if lease in held:
                held.remove(lease)
            elif lease.popped:
                _move_newest(held, instead, os.getpid())
        if not lease.popped:
            _abandon(lease, exc)
        for other in instead:
            _give_back_instead(other, exc)


def _give_back_instead(lease: Lease, exc: BaseException) -> None:
    """:func:`_abandon` for a lease its caller did get: it held it for a while."""
    _stop(lease)
    try:
        _cut_short(lease.claim, lease.target, exc)
    finally:
        say_released(lease, time.monotonic() - lease.acquired_at)


def release_held(held: list[Lease], taken: Callable[[], None]) -> bool | None:
    """Release the newest lease an object holds (``held``; ``taken()`` once it is out of
    it): None if it holds none, False if that lease had already ended."""
    popped: list[Lease] = []
    try:
        _pop_held(held, popped)
        if not popped:
            return None
        taken()
        return _give_back(popped[0])
    except RedisError:
        raise  # _give_back dealt with it (an unreachable server: released in the background)
    except BaseException as exc:
        _reclaim(held, popped)
        for lease in popped:
            _forget_held(held, lease)  # an interrupt between _pop_held's two lines
            _abandon(lease, exc)
        raise


def _handed_over(lease: Lease) -> None:
    """This process's hold ends with a hand-over: its events close with "released" (its
    adopter's open with "acquired"), as every lease's do."""
    say_released(lease, time.monotonic() - lease.acquired_at)


def hand_over_held(
    held: list[Lease],
    taken: Callable[[], None],
    not_held: Callable[[], Exception],
    popped: list[Lease],
) -> str:
    """Take the newest lease an object holds out of it (into ``popped``, the caller's)
    without releasing it, and return its token for another object to :func:`adopt_held`;
    raise ``not_held()`` if it holds none. No longer renewed here. Interrupted before the
    caller has the token, it is given back: held by nobody who knows its token, it would
    block its name for a whole ttl."""
    try:
        _pop_held(held, popped)
        if not popped:
            raise not_held()
        taken()
        _stop(popped[0])
        _handed_over(popped[0])
        return popped[0].token
    except BaseException as exc:
        give_back_popped(held, popped, exc)
        raise


def give_back_popped(held: list[Lease], popped: list[Lease], exc: BaseException) -> None:
    """A ``hand_over()`` cut short by ``exc``: give back what it took out of the object
    (``popped``, emptied as it goes, for the guard's handler and then the object's own),
    its token lost with the exception -- also as :func:`hand_over_held` returned into the
    object's method, where Python 3.10 raises a pending signal (review 103a, F1: held by
    nobody, unrenewed, for the rest of its ttl)."""
    _reclaim(held, popped)
    while popped:
        lease = popped.pop()
        _forget_held(held, lease)  # (an interrupt between _pop_held's two lines)
        _abandon(lease, exc)


# -- asyncio -----------------------------------------------------------------------------
#
# Cancellation: redis-py sometimes completes a command whose task was cancelled meanwhile
# instead of raising CancelledError. After every await of an acquire, a cancel requested
# since it began (``Task.cancelling()``, Python 3.11+) is raised here, so the protected body
# never runs for a cancelled task (13 of 60 cancelled acquires once ran their body to the
# end), and asyncio.timeout(), TaskGroup and wait_for see their cancellation arrive.


def _cancels(task: asyncio.Task[Any]) -> int:
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+; 3.10 relies on redis-py
    return cancelling() if cancelling is not None else 0


def _raise_if_cancelled(task: asyncio.Task[Any], before: int) -> None:
    if _cancels(task) > before:
        raise asyncio.CancelledError


def _kept_async(claim: Claim, name: str, options: LeaseOptions, target: Any, started: float,
                granted: Granted, alive: Callable[[], bool], taken: list[Lease],
                task: asyncio.Task[Any]) -> Lease:  # fmt: skip
    """:func:`_kept` for asyncio (no I/O: the caller checked the eviction policy first);
    ``on_lost="cancel"`` cancels ``task``."""
    on_lost = options.on_lost if callable(options.on_lost) else None
    if options.on_lost == "cancel":
        on_lost = lambda _lease: task.cancel()  # noqa: E731  # runs in this loop's renewer
    lease = _new_lease(claim, name, options, target, started, granted, asyncio.Lock(), alive,
                       on_lost)  # fmt: skip
    taken.append(lease)
    process.loop_state().leases.add(lease)  # released at the loop's shutdown if held
    if options.auto_renew:
        renewal.async_renewer().add(lease)
    return lease


async def _take_async(kind: Kind, options: LeaseOptions, name: str, key: str,
                      wait: float | None, alive: Callable[[], bool],
                      taken: list[Lease]) -> Lease | None:  # fmt: skip
    """:func:`_take` for asyncio; never returns a lease to a task cancelled meanwhile."""
    task = _current_task()
    before = _cancels(task)
    target = providers.async_target(options.provider)
    _check_target(kind, options, target)
    # In flight from here to its end, the lean first try and a refused grant's give-back
    # included: the loop's shutdown keeps the client open meanwhile (review 24, 01 and 02:
    # a clean-up's lock at asyncio.run's end was refused, or granted and left held).
    target.busy += 1
    try:
        return await _take_on_async(kind, options, name, key, wait, alive, taken, task,
                                    before, target)  # fmt: skip
    finally:
        target.busy -= 1


async def _take_on_async(kind: Kind, options: LeaseOptions, name: str, key: str,
                         wait: float | None, alive: Callable[[], bool], taken: list[Lease],
                         task: asyncio.Task[Any], before: int,
                         target: Any) -> Lease | None:  # fmt: skip
    """:func:`_take_async` once its target is known and counted busy."""
    if not target.checked:  # before acquiring: a cancellation here leaves nothing held
        await eviction.check_async_once(target)
        _raise_if_cancelled(task, before)
    claim = _claim(kind, options, key, target)
    started = time.monotonic()
    lease: Lease | None = None
    try:
        result = await drivers.acquire_async(claim, wait, started, target)
        _raise_if_cancelled(task, before)
        if type(result) is Granted:
            lease = _kept_async(claim, name, options, target, started, result, alive, taken, task)
            return lease
    except BaseException as exc:
        if lease is not None:
            _stop_async(lease)
        await _cut_short_async(claim, target, exc)
        raise
    assert type(result) is NotGranted
    _not_granted(result, options, name, key, started)
    return None


def _current_task() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("redlock_deco.asyncio primitives must be used inside an asyncio task")
    return task


def _stop_async(lease: Lease) -> None:
    lease._release()
    _forget_async(lease)


def _forget_async(lease: Lease) -> None:
    """Neither the loop's to release at its end nor its renewer's any more -- without
    making a new loop state after the loop's shutdown closed its own (review 19, 02)."""
    state = process.known_loop_state()
    if state is not None:
        state.leases.discard(lease)
        if state.renewer is not None:
            state.renewer.remove(lease)


CUT_SHORT_WAIT = 0.5  # seconds a cancelled acquire waits for its clean-up, at most


async def _cut_short_async(claim: Claim, target: Any, exc: BaseException) -> None:
    """:func:`_cut_short` for asyncio; a task cancelled (again) meanwhile still cleans up.

    The clean-up is a task of its own. A cancelled acquire waits for it CUT_SHORT_WAIT at
    most, then lets the cancellation go on and the clean-up end by itself: waiting for its
    answer from a stalled server held the cancellation up to the client's socket_timeout --
    an ``asyncio.timeout(0.5)`` took 8 s without one (review 35, 09). Any other error waits
    for the clean-up's end, as the sync driver does."""
    if isinstance(exc, renewal.UNREACHABLE):
        renewal.give_back_later(claim, target, True)
        return
    cleanup = asyncio.ensure_future(drivers.run_async(target.algorithms.abandon(claim), target))
    cleanup.add_done_callback(partial(_cleanup_ended, claim, target, exc))
    try:
        if isinstance(exc, asyncio.CancelledError):
            await asyncio.wait((cleanup,), timeout=CUT_SHORT_WAIT)
        else:
            await asyncio.shield(cleanup)
    except (RedisError, asyncio.CancelledError):
        pass  # the server's answer, or cancelled again: _cleanup_ended has it in hand


def _cleanup_ended(claim: Claim, target: Any, exc: BaseException,
                   cleanup: asyncio.Future[Any]) -> None:  # fmt: skip
    """A cut-short acquire's clean-up is done (read, whoever still waits for it): one that
    could not reach the server, or was cancelled by the loop's end, or interrupted, is left
    to the renewer's clean-ups -- unless the acquire itself failed on a Redis error, where
    an unreachable clean-up is left to the ttl, as the sync :func:`_cut_short` does."""
    failure = asyncio.CancelledError() if cleanup.cancelled() else cleanup.exception()
    if failure is None:
        return
    if isinstance(failure, RedisError) and not isinstance(failure, renewal.UNREACHABLE):
        return  # the server answered
    if isinstance(exc, RedisError) and isinstance(failure, (*renewal.UNREACHABLE,
                                                            asyncio.CancelledError)):  # fmt: skip
        return
    renewal.give_back_later(claim, target, True)


async def _abandon_async(lease: Lease, exc: BaseException) -> None:
    """:func:`_abandon` for asyncio."""
    _stop_async(lease)
    if lease.pid == os.getpid():
        try:
            await _cut_short_async(lease.claim, lease.target, exc)
        finally:
            _never_kept(lease)


async def _give_back_async(lease: Lease) -> bool:
    """Release ``lease``; True unless it had already ended. A task cancelled while
    releasing still releases, and still hears what the release found."""
    if lease.pid != os.getpid():
        return True
    if lease.released:
        # Released by its loop's shutdown (an object's lease, released in a later loop):
        # that loop's client is closed, and sending on it reconnected a client nothing
        # closed (review 22, 05).
        return False
    state = process.known_loop_state()
    if state is None or lease not in state.leases:
        home = _home_loop(lease)
        if home is not None and home is not asyncio.get_running_loop():
            # Another loop's (a block handed out to a task of another thread's loop and
            # closed there): its clients are that loop's. Released there, at its next turn;
            # only a loss already known is reported here. (Sent from this loop, the release
            # raised "attached to a different loop", or, with no state here, was taken for
            # one the shutdown had released: LockLost, and the key held until its ttl --
            # review 90a, F2.)
            # (its end by this holder's clock passed: lost -- its loop, stopped, renewed it no
            # more, and nothing there could tell: review 91a, F1; see docs/asyncio.md). Judged
            # before the release is handed over: that loop, running, may have released it by
            # the next line, and a released lease has no time left (a false LockLost).
            kept = not lease.lost and lease.remaining() > 0
            with contextlib.suppress(RuntimeError):  # (closed: its shutdown released it)
                home.call_soon_threadsafe(_give_back_dropped, lease, context=contextvars.Context())
            return kept
    if state is None:
        # The loop's shutdown released it (a block that outlived its wait, reported lost
        # there) and closed its clients: nothing more to send (review 19, 02).
        lease._release()
        return False
    _forget_async(lease)
    was_lost = lease.lost
    lease._releasing()
    # The release is a task of its own, shielded: a cancellation that arrives while it is out
    # neither cuts it short nor loses its answer. (A cancelled release sent again cannot tell
    # "the first one ran" from "the lease had ended before": review 11 saw a lost lease exit
    # as clean, and a server that did not answer the second one put its TimeoutError in place
    # of the cancellation, with no background clean-up.) One cancellation waits for the answer
    # (then goes on, noted); a second stops waiting, and the release runs on by itself.
    releasing = asyncio.ensure_future(_send_release(lease))
    releasing.add_done_callback(partial(_release_ended, lease))
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            answer, resent = await asyncio.shield(releasing)
            break
        except asyncio.CancelledError as exc:
            if cancelled is not None or releasing.cancelled():
                lease._release()  # cancelled twice, or the release itself (the loop ends)
                releasing.add_done_callback(partial(_released_unheard, lease, was_lost))
                raise
            cancelled = exc
        except BaseException as exc:
            lease._release()  # not renewed any more either way (a clean-up: _send_release)
            if cancelled is None:
                raise
            add_note(
                cancelled,
                f"releasing {lease.key!r} failed too ({exc!r}); it is released in the "
                "background once the server answers, else expires within its ttl",
            )
            raise cancelled from exc
    kept = _released(lease, answer, was_lost, resent)
    if cancelled is not None:
        if not kept:
            add_note(cancelled, f"the lease on {lease.key!r} was also lost while the call ran")
        raise cancelled
    return kept


def _released_unheard(lease: Lease, was_lost: bool, task: asyncio.Future[Any]) -> None:
    """A release its caller stopped waiting for (cancelled twice) has landed: its answer
    still ends the lease's events ("lost" if it found the lease gone, then "released"); it
    stopped at "acquired" (review 94a, F2). One cancelled or failed is its clean-up's."""
    if task.cancelled() or task.exception() is not None:
        return
    answer, resent = task.result()
    _released(lease, answer, was_lost, resent)


def _home_loop(lease: Lease) -> asyncio.AbstractEventLoop | None:
    """The live event loop whose state holds ``lease`` (the loop it was taken in), if any."""
    for state in process.loop_states():
        if lease in state.leases:
            return state.loop()
    return None


def check_home_loop(lease: Lease, action: str) -> None:
    """Refuse to ``action`` ``lease`` from a task of another event loop than the one that
    took it: its clients, its renewer and its ``io`` lock are that loop's. (An extend()
    sent from another loop raised "attached to a different loop" and left a connection of
    that loop in the home loop's pool, where the object's release then failed and the name
    stayed held for its ttl: review 91a, F2.)"""
    state = process.known_loop_state()
    if state is not None and lease in state.leases:
        return
    home = _home_loop(lease)
    if home is None or home is asyncio.get_running_loop():
        return
    raise LockError(
        f"cannot {action} {lease.key!r} from this event loop: it was taken in another one, "
        "whose clients renew and release it; call this from a task of that loop (an asyncio "
        "lease belongs to the loop that took it, see docs/asyncio.md, Event loops)",
        name=lease.name,
        key=lease.key,
    )


async def _send_release(lease: Lease) -> tuple[bool | None, bool]:
    """The release's answer, and whether the client sent it again (counted in this task).

    A release that cannot reach the server, or that the loop's shutdown cancels, is left to a
    background clean-up here, in the task, whoever still waits for it: the shutdown sends the
    clean-ups left (review 12: a caller cancelled twice, or a loop ending, left the key held
    by nobody for its ttl)."""
    before = drivers.resent()
    try:
        answer = await drivers.run_async(lease.target.algorithms.release(lease.claim), lease.target)
    except (*renewal.UNREACHABLE, asyncio.CancelledError):
        renewal.give_back_later(lease.claim, lease.target, True, lease)
        raise
    return answer, drivers.resent() != before


def _release_ended(lease: Lease, task: asyncio.Future[Any]) -> None:
    """The release task is done: its result read even when nobody waits for it any more (no
    "Task exception was never retrieved" for an orphan), and if it was cancelled, its
    background clean-up queued -- also when it was cancelled before its first step, where
    _send_release never ran (review 16, 10: ``main`` returning in the turn a task left its
    ``async with`` left the key held by nobody for its ttl). Queued twice is queued once."""
    if not task.cancelled():
        task.exception()
        return
    with contextlib.suppress(RuntimeError):  # no loop any more: nothing can send it
        found = renewal.known_async_renewer()
        if found is not None:  # (a loop shut down: its last clean-ups have run)
            found.add(Cleanup(lease.claim, lease.target, time.monotonic(), lease))


async def open_section_async(
    kind: Kind,
    options: LeaseOptions,
    name: str,
    key: str,
    wait: float | None,
    *,
    place: ownership.Place | None = None,
    keep: ownership.Blocks | None = None,
) -> ownership.Section | None:
    """:func:`open_section` for the current task."""
    owner = _current_task()
    section, left = _reentry(owner, kind, options, key, _dropped_here(), place, keep,
                             asynchronous=True)  # fmt: skip
    if section is not None:
        return section
    reason = None if left else _waits_for_itself(owner, kind, options, key, wait,
                                                 blocks_thread=False)  # fmt: skip
    taken: list[Lease] = []
    try:
        lease = await _take_async(kind, options, name, key, 0 if reason else wait,
                                  ownership.liveness(owner), taken)  # fmt: skip
        if lease is not None:
            return ownership.open_section(lease, owner, fresh=True, dropped=_dropped_here(),
                                           place=place, keep=keep)  # fmt: skip
    except BaseException as exc:
        for lease in taken:
            await _abandon_async(lease, exc)
        raise
    if reason is not None:
        raise _self_wait(reason, name, key)
    return None


async def close_section_async(
    section: ownership.Section | None, error: BaseException | None
) -> None:
    """:func:`close_section` for asyncio."""
    try:
        if section is None or not ownership.close(section):
            return
        kept = await _give_back_async(section.lease)
    except RedisError as exc:
        _release_failed(section.lease, error, exc)  # type: ignore[union-attr]  # not None
        return
    except asyncio.CancelledError:
        raise  # _give_back_async released it, shielded
    except BaseException as exc:
        if section is not None:
            await abort_async(section, exc)
        raise
    lost = _lost_lease(section.lease, error, kept)
    if lost is not None:
        raise lost


async def abort_async(section: ownership.Section, exc: BaseException) -> None:
    """:func:`abort` for asyncio."""
    if ownership.close(section):
        await _abandon_async(section.lease, exc)


async def close_unexited_async(blocks: ownership.Blocks, where: ownership.Place) -> None:
    """:func:`close_unexited` for asyncio."""
    for section in ownership.unexited(blocks, where):
        try:
            if ownership.close(section):
                # (no _stop_async first: a lease marked released is not sent a release)
                with contextlib.suppress(Exception):  # unreachable: given back later
                    await _give_back_async(section.lease)
        except BaseException as exc:
            await abort_async(section, exc)  # (see close_unexited)
            raise


async def close_block_async(
    blocks: ownership.Blocks,
    error: BaseException | None,
    handled: list[bool] | None = None,
    by: ownership.StackExit | None = None,
) -> None:
    """:func:`close_block` for asyncio."""
    section = _UNSET
    try:
        where = ownership.place(blocks)
        by = ownership.run_as(blocks, by, where)
        section = ownership.exiting(blocks, where, by)
        if section is None and blocks:
            raise _unmatched_exit(blocks, where)
        if section is not None and not ownership.ends(section, by):
            section = None  # (see close_block)
        if isinstance(error, GeneratorExit) and ownership.closing_coroutine(where):
            _close_section_soon(section)
        else:
            await close_section_async(section, error)
        if handled is not None:
            handled.append(True)
    except BaseException as exc:
        if handled is not None:
            handled.append(True)
        if section is _UNSET:
            section = ownership.leaving(blocks, by)
        if section is not None and section.open:
            await abort_async(section, exc)
        raise


def _close_section_soon(section: ownership.Section | None) -> None:
    """Close ``section`` from the exit of a coroutine being closed (``coroutine.close()``:
    the collector dropping a task still pending inside the block), where nothing may be
    awaited: its first await that suspended made the coroutine "ignore GeneratorExit", and
    the exit's own clean-up ran later, with no running loop (review 79a). Released as a
    section dropped open is (see _dropped_async)."""
    if section is not None and ownership.close(section):
        section.dropped(section.lease)


async def _give_back_quietly(lease: Lease) -> None:
    with contextlib.suppress(RedisError):  # (it expires within its ttl)
        await _give_back_async(lease)


async def close_block_cut_async(
    blocks: ownership.Blocks, exc: BaseException, by: ownership.StackExit | None = None
) -> None:
    """:func:`close_block_cut` for asyncio."""
    section = ownership.leaving(blocks, by)
    if section is not None and section.open:
        await abort_async(section, exc)


async def acquire_held_async(
    held: list[Lease],
    kind: Kind,
    options: LeaseOptions,
    name: str,
    key: str,
    wait: float | None,
    alive: Callable[[], bool],
    kept: Callable[[], None],
) -> bool:
    """:func:`acquire_held` for asyncio."""
    owner = _current_task()
    reason = _waits_for_itself(owner, kind, options, key, wait, blocks_thread=False)
    taken: list[Lease] = []
    try:
        lease = await _take_async(kind, options, name, key, 0 if reason else wait, alive, taken)
        if lease is None and reason is not None:
            raise _self_wait(reason, name, key)
        if lease is not None:
            held.append(lease)
            kept()
        return lease is not None  # (not a constant: see acquire_held)
    except BaseException as exc:
        for lease in taken:
            _forget_held(held, lease)
            await _abandon_async(lease, exc)
        raise


async def adopt_held_async(
    held: list[Lease],
    kind: Kind,
    options: LeaseOptions,
    name: str,
    key: str,
    held_by: object,
    alive: Callable[[], bool],
    kept: Callable[[], None],
) -> bool:
    """:func:`adopt_held` for asyncio."""
    task = _current_task()
    before = _cancels(task)
    target = providers.async_target(options.provider)
    _check_target(kind, options, target)
    held_by = _adopted(options, name, key, held_by, held)
    if not target.checked:
        await eviction.check_async_once(target)
        _raise_if_cancelled(task, before)
    claim = _claim(kind, options, key, target)
    started = time.monotonic()
    taken: list[Lease] = []
    try:
        if not await drivers.run_async(target.algorithms.adopt(claim, held_by), target):
            return False
        _raise_if_cancelled(task, before)
        lease = _kept_async(claim, name, options, target, started, Granted(), alive, taken, task)
        held.append(lease)
        kept()
        return lease is not None
    except BaseException as exc:
        for one in taken:
            _forget_held(held, one)
            _stop_async(one)
        await _cut_short_async(claim, target, exc)
        raise


async def release_held_async(held: list[Lease], taken: Callable[[], None]) -> bool | None:
    """:func:`release_held` for asyncio."""
    popped: list[Lease] = []
    try:
        _pop_held(held, popped)
        if not popped:
            return None
        taken()
        return await _give_back_async(popped[0])
    except (RedisError, asyncio.CancelledError):
        raise  # dealt with by _give_back_async
    except BaseException as exc:
        _reclaim(held, popped)
        for lease in popped:
            _forget_held(held, lease)  # an interrupt between _pop_held's two lines
            await _abandon_async(lease, exc)
        raise


async def hand_over_held_async(
    held: list[Lease], taken: Callable[[], None], not_held: Callable[[], Exception]
) -> str:
    """:func:`hand_over_held` for asyncio."""
    popped: list[Lease] = []
    try:
        _pop_held(held, popped)
        if not popped:
            raise not_held()
        taken()
        _stop_async(popped[0])
        _handed_over(popped[0])
        return popped[0].token
    except BaseException as exc:
        for lease in popped:
            _forget_held(held, lease)
            await _abandon_async(lease, exc)
        raise


# -- several names at once (@locked("acct:{src}", "acct:{dst}")) ----------------------------
#
# All or nothing, in one global order (sorted keys), so two callers locking the same names in
# opposite argument order can never deadlock; one deadline for the whole set.


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


Sections = list[ownership.Section]


def open_sections(
    kind: Kind, options: LeaseOptions, names: dict[str, str], wait: float | None
) -> Sections | None:
    """Open a section on every ``key -> name``, in key order; None (holding nothing) if one
    fails."""
    deadline = None if wait is None else time.monotonic() + wait
    # Appended as it returns: no line comes between opening a section and keeping it.
    taken: list[ownership.Section | None] = []
    try:
        for key in sorted(names):
            taken.append(open_section(kind, options, names[key], key, _remaining(deadline)))
            if taken[-1] is not None:  # (not `if None: ... return`: see test_back_edges)
                continue
            _close_quietly(taken)
            return None
        return list(section for section in taken if section is not None)  # (see above)
    except BaseException as exc:
        for section in reversed(taken):
            if section is not None:
                abort(section, exc)
        raise


def close_sections(sections: Sections | None, error: BaseException | None) -> None:
    """Close every section (reverse order; None: none were opened), whatever one of them
    raises -- a failed release must not leave the others held and renewed -- then raise the
    first problem."""
    first: BaseException | None = None
    try:
        for section in reversed(sections or ()):
            try:
                close_section(section, error)
            except BaseException as exc:
                first = first or exc
                if section.open:
                    # Cut short before close_section's own handling began (an interrupt on
                    # the call, or as its frame starts): that section stayed open, held and
                    # renewed after the call raised, until a collection found it (review 67,
                    # F1).
                    abort(section, exc)
    except BaseException as exc:  # interrupted between two of them
        for section in sections or ():
            if section.open:
                abort(section, exc)
        raise
    if first is not None:
        try:
            raise first
        finally:  # (its traceback holds this frame: no cycle through it)
            first = None


def _close_quietly(sections: list[ownership.Section | None]) -> None:
    for section in reversed(sections):
        if section is not None:
            with contextlib.suppress(RedisError, LockError):
                close_section(section, None)


async def open_sections_async(
    kind: Kind, options: LeaseOptions, names: dict[str, str], wait: float | None
) -> Sections | None:
    deadline = None if wait is None else time.monotonic() + wait
    taken: list[ownership.Section | None] = []
    try:
        for key in sorted(names):
            taken.append(
                await open_section_async(kind, options, names[key], key, _remaining(deadline))
            )
            if taken[-1] is not None:  # (see open_sections)
                continue
            await _close_quietly_async(taken)
            return None
        return list(section for section in taken if section is not None)
    except BaseException as exc:
        for section in reversed(taken):
            if section is not None:
                await abort_async(section, exc)
        raise


async def close_sections_async(sections: Sections | None, error: BaseException | None) -> None:
    first: BaseException | None = None
    try:
        for section in reversed(sections or ()):
            try:
                await close_section_async(section, error)
            except BaseException as exc:
                first = first or exc
                if section.open:  # (see close_sections)
                    await abort_async(section, exc)
    except BaseException as exc:
        for section in sections or ():
            if section.open:
                await abort_async(section, exc)
        raise
    if first is not None:
        try:
            raise first
        finally:  # (see close_sections)
            first = None


async def _close_quietly_async(sections: list[ownership.Section | None]) -> None:
    for section in reversed(sections):
        if section is not None:
            with contextlib.suppress(RedisError, LockError):
                await close_section_async(section, None)

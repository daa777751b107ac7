"""Automatic renewal: one renewer per process (a thread) and one per event loop (a task).

Not a thread per lease: jobs are kept in a dict (O(1) to add at acquire and to drop at
release, so the hot path pays almost nothing), and the renewer sleeps until the earliest job
is due; adding a job wakes it only when that job is due earlier. Jobs are leases to renew and
:class:`~redlock_deco._lifecycle.Cleanup` jobs (acquires cut short whose release could not
reach the server). What is due, what a round sends and what its outcome means is decided
once, below; the two renewers only differ in how they wait and do I/O. Both end when they
have nothing to do, and start again on the next job.

A renewal round holds the lease's ``io`` lock, which ``extend()`` holds too: the two are
ordered per lease, and each reply records the ttl its own request carried.

Why one module: the pure schedule (``due``/``plan``/``conclude``) and the two renewers that
run it; the schedule is small and only means something next to its drivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from redis.exceptions import ConnectionError, RedisError, TimeoutError

from . import _drivers as drivers
from . import _events as events
from . import _process as process
from . import _waiting as waiting
from ._lifecycle import Cleanup, Lease, notify_lost, say_released
from ._protocol import Claim, Steps
from ._worker import Lanes, background, start

log = logging.getLogger("redlock_deco")

Job = Lease | Cleanup
# At most this many clean-ups pending per renewer; past it the oldest is dropped (its claim
# expires within its ttl anyway). Bounds the work a long outage can pile up.
MAX_CLEANUPS = 1000
DROP_WARNING = 10.0  # seconds between two warnings of dropped clean-ups (see _Jobs._dropped)
# A renewer with nothing to do ends after this long.
IDLE = 5.0
# The renewer's thread never sleeps longer than this (see Renewer._loop): what no notify
# announced -- a finalizer's job left in the orphans' queue, an add an interrupt cut short --
# waits that long at most.
ORPHAN_POLL = 0.2
# While renewal rounds wait behind a running one, the renewer looks this often whether that one
# has become slow (see _worker.Lanes.nudge).
NUDGE = 0.03
# At the interpreter's exit, how long the renewer's lock is waited for (see Renewer._at_exit).
EXIT_LOCK_WAIT = 0.1
# Seconds after which the asyncio renewer looks again when an exception cut its look short.
RETRY_AFTER_INTERRUPT = 0.05
UNREACHABLE = (ConnectionError, TimeoutError)  # redis-py's: worth retrying in the background


def due(jobs: Iterable[Job], now: float) -> tuple[list[Job], float]:
    """The jobs to run now, and when the next one is due (inf if none).

    A lease that passed ``max_hold`` or is no longer held is handed back as due too: its
    round drops it instead of renewing it.
    """
    ready: list[Job] = []
    upcoming = math.inf
    for job in jobs:
        if job.renewing:
            # Its round is in flight and wakes the renewer when done; if it never does (see
            # overdue), the renewer must still wake when the lease runs out.
            if type(job) is Lease and job.held:
                upcoming = min(upcoming, job.expires_at)
            continue
        if job.next_renew <= now or (type(job) is Lease and _to_drop(job, now)):
            ready.append(job)
        else:
            upcoming = min(upcoming, job.next_renew)
    return ready, upcoming


def overdue(jobs: Iterable[Job], now: float, *, idle_too: bool = False) -> list[Lease]:
    """Held leases that ran out with their renewal round still in flight; with ``idle_too``
    (asyncio) also with none, as when a round is cancelled before its first step at every
    turn, by a task cancelling every other (review 27, 02: never renewed, and never reported
    lost). (The sync renewer's rounds cannot be cancelled; one merely late, on a busy
    machine, still renews a lease the server keeps a little past its holder's reckoning.)

    A round that never comes back (a client without a socket timeout on a stalled server, a
    renewal thread stuck for good) must not leave its lease expiring in silence: the holder
    is told it lost the lease (``on_lost``, then ``LockLost``) when its lease ends by its own
    clock, as a failed round would tell it. (Found in review 4: a storm of KeyboardInterrupts
    once left the renewal stuck, and another process took the lock while its holder, never
    told, kept running.)
    """
    return [
        job
        for job in jobs
        if (idle_too or job.renewing) and type(job) is Lease and job.held and now >= job.expires_at
    ]


def _renewed_meanwhile(job: Job, now: float) -> bool:
    """Whether a lease's round, which waited for its lease's I/O lock, finds it renewed by an
    ``extend()`` meanwhile: sending the usual ttl then undid the extension (review 27, 01:
    ``extend(by=5)`` on a stalled server, then 0.5 s left on the server)."""
    return type(job) is Lease and not _to_drop(job, now) and job.next_renew > now


def _to_drop(lease: Lease, now: float) -> bool:
    # Not a lease whose owner ended: that one is judged at its renewal time (see plan), still
    # well before it expires. A generator's block is often left by another task just after
    # its owner ended (``async for ... break`` as a task's last step: the generator's
    # aclose() runs right after), and judged at once it was reported lost, wrongly.
    return not lease.held or now >= lease.hold_until


FAILED: Any = object()  # the round trip failed (connection trouble)


def plan(job: Job, now: float) -> tuple[Steps[Any], int] | None:
    """What one round of ``job`` sends, and the ttl it carries; None when the job is to be
    dropped without a word to Redis.

    A lease held for ``max_hold`` (a stuck call must not hold a lock forever) is orphaned:
    it expires within its ttl, and a call still running ends in LockLost. A lease whose owner
    ended without releasing it (renewal must not outlive its owner) is lost, and told so at
    once (``on_lost``; LockLost at the block's exit): a block still open when its owner ended
    is a generator's, resumed by another thread or task, and it must not run on as if it held
    while its lease expires under it (review 16, 01).
    """
    algorithms = job.target.algorithms
    if type(job) is Cleanup:
        return algorithms.abandon(job.claim), 0
    assert type(job) is Lease
    if not job.held:
        return None
    if not job.alive():
        if job._lose():
            notify_lost(job)
        return None
    if now >= job.hold_until:
        job._orphan()
        return None
    return algorithms.extend(job.claim, job.ttl_ms), job.ttl_ms


def conclude(job: Job, started: float, ttl_ms: int, outcome: Any) -> bool:
    """Record what a round sent at ``started`` with ``ttl_ms`` got back (FAILED on connection
    trouble); True when the renewer should drop the job."""
    if type(job) is Cleanup:
        ended = job.attempted(time.monotonic(), outcome is not FAILED)
        if ended:
            cleaned_up(job)
        return ended
    assert type(job) is Lease
    if not job.held:
        # Released (or being released) while the round was in flight: the release's answer
        # decides. (Taking a 0 here for a loss once reported cleanly released leases lost.)
        return True
    if outcome is FAILED:
        lost = job._renewal_failed(started)
    elif outcome:
        job._renewed(started, ttl_ms)
        if events.listeners and job.held:
            events.emit_renewing("renewed", job.name, job.key, job.source)
        return not job.held
    else:
        lost = job._lose()
    if lost:
        notify_lost(job)
    return not job.held


def cleaned_up(job: Cleanup) -> None:
    """A clean-up has ended (released, or its ttl passed): the lease it gives back, if any,
    has its last event. Without it, a block dropped open (an ExitStack dropped unclosed) or
    a release cut short left its lease's events at "acquired" -- a hold that never ended,
    for a "held now" gauge (review 93a, F1). The time held runs to the drop."""
    if job.lease is not None:
        say_released(job.lease, job.started - job.lease.acquired_at)


def job_key(job: Job) -> Hashable:
    """Jobs are deduplicated: a clean-up per (server, key, token), a lease per object."""
    if type(job) is Cleanup:
        return (id(job.target), job.claim.keys.key, job.claim.token)
    return id(job)


class _Jobs:
    """The renewer's table of jobs, with the clean-up bound. Not thread-safe by itself."""

    def __init__(self) -> None:
        self.jobs: dict[Hashable, Job] = {}
        self.cleanups = 0
        self.drops = 0  # clean-ups dropped since the last warning (see _dropped)
        self.warned_at = -math.inf

    def add(self, job: Job) -> bool:
        key = job_key(job)
        if key in self.jobs:
            return False
        if type(job) is Cleanup:
            if self.cleanups >= MAX_CLEANUPS:
                self._drop_oldest_cleanup()
            self.cleanups += 1
        self.jobs[key] = job
        return True

    def adopt(self, orphans: queue.SimpleQueue[Job]) -> None:
        """Add the jobs finalizers queued (see Renewer.add)."""
        while not orphans.empty():
            self.add(orphans.get_nowait())

    def remove(self, job: Job) -> None:
        if self.jobs.pop(job_key(job), None) is not None and type(job) is Cleanup:
            self.cleanups -= 1

    def _drop_oldest_cleanup(self) -> None:
        for job in self.jobs.values():
            if type(job) is Cleanup:
                self.remove(job)
                self._dropped(job)
                return

    def _dropped(self, job: Job) -> None:
        """Warn of a dropped clean-up, once per DROP_WARNING seconds at most, with how many
        since the last warning. An interrupt storm drops hundreds a second, and each warning
        takes the logging module's locks, which before Python 3.13 an interrupt can leave
        held for good (its own code: acquire, then ``try``) -- every thread that logs then
        hangs, redis-py's included (review 43, F3)."""
        self.drops += 1
        now = time.monotonic()
        if now - self.warned_at < DROP_WARNING:
            return
        log.warning(
            "too many pending clean-ups: dropped %d since the last warning, the latest %r "
            "(each expires by itself)", self.drops, job,
        )  # fmt: skip
        self.drops, self.warned_at = 0, now

    def leases(self) -> int:
        return len(self.jobs) - self.cleanups


class Renewer:
    """The renewer of sync leases: one scheduler thread per process.

    It only decides what is due; each round runs on the renewal worker of its Redis target
    (_worker.Lanes: one thread while rounds are quick, up to RENEWAL_LANES while they are
    slow), so a paused or unreachable server delays the renewals of its own leases, never
    those on other servers. No exception of a round can stop it, nor a thread that cannot
    start: the round waits for one (tried again every NUDGE), and a lease whose round has not
    started by the time it runs out is reported lost then (on_lost, then LockLost), as one
    whose round never came back. This thread never runs a round itself: a round waits for
    its server (a stalled one: the socket timeout, or for good without one), and while it
    did, no lease of the process was renewed or reported lost -- a lease on a healthy server
    expired in silence and another caller took it before its holder heard (review 63, F2).
    """

    def __init__(self) -> None:
        self._table = _Jobs()
        # Taken with `with self._lock:` (the C lock's own enter and exit), never `with
        # self._wake:`: Condition.__enter__ is Python code, and a KeyboardInterrupt raised
        # as it returned left the lock held for good -- the interrupted thread then hung in
        # its own clean-up, and no lease of the process was renewed again (review 4, r02).
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._next_wake = math.inf
        self._thread: threading.Thread | None = None
        # Jobs from finalizers that could not take the lock (see add_from_finalizer).
        self._orphans: queue.SimpleQueue[Job] = queue.SimpleQueue()

    def add(self, job: Job) -> None:
        # Under the lock: the thread snapshots the jobs and picks its wake-up time under it
        # too, so a job added in between can never be overlooked until a later wake-up.
        if sys.is_finalizing():
            return  # nothing will run it (see _at_exit)
        with self._lock:
            self._add_locked(job)

    def add_from_finalizer(self, job: Job) -> None:
        """:meth:`add`, from a finalizer. The garbage collector may run one while this very
        thread holds the renewer's lock (inside :meth:`add`, say): waiting for it could hang,
        so it is tried for a moment; failing that, the job waits in a queue that is safe to
        fill from anywhere, for the renewer's next round."""
        locked = False
        try:
            locked = self._lock.acquire(timeout=0.05)
            if not locked:
                self._orphans.put(job)
                return
            self._add_locked(job)
        finally:
            if locked:
                self._lock.release()

    def _add_locked(self, job: Job) -> None:
        self._table.adopt(self._orphans)
        if not self._table.add(job):
            return
        if self._thread is None or not self._thread.is_alive():
            # "Not alive" too: an interrupt between these two lines left a thread never started
            # standing for the renewer, and no lease of the process was renewed or given back
            # again (the interrupts leg, when the renewer had gone idle just before).
            self._thread = threading.Thread(
                target=self._serve, name="redlock-deco-renewer", daemon=True
            )
            if not start(self._thread):  # the interpreter is finalizing: nothing will run it
                self._thread = None
                return
        if job.next_renew < self._next_wake:
            # Notify first: an interrupt between the two lines then costs nothing. (The other
            # order, interrupted in between, left _next_wake earlier than any later add, so no
            # add woke the thread again until its own wake-up time.)
            self._wake.notify()
            self._next_wake = job.next_renew

    def remove(self, job: Job) -> None:
        if sys.is_finalizing():
            self._at_exit(self._table.remove, job)
            return
        with self._lock:
            self._table.remove(job)

    def _at_exit(self, change: Callable[[Job], object], job: Job) -> None:
        """``change(job)`` under the lock at the interpreter's exit, if the lock is free
        within a moment. Daemon threads stop for good wherever they stand when the exit
        begins, this renewer's maybe holding its lock (woken from its wait, the lock taken
        back, the interpreter then refusing it a turn): a block closed at exit -- a generator
        left inside one, collected by the last collection -- waited for that lock forever,
        and the process never exited (2 of 36 runs on a loaded machine). Nothing renews
        anything any more then; skipping costs nothing."""
        if self._lock.acquire(timeout=EXIT_LOCK_WAIT):
            try:
                change(job)
            finally:
                self._lock.release()

    def reschedule(self, lease: Lease) -> None:
        """``lease`` became due earlier (a shorter extend, an uncertain one): wake up for it,
        or the renewer sleeps on to the old time while the lease runs out."""
        if sys.is_finalizing():
            return  # nothing renews any more (see _at_exit)
        with self._lock:
            if lease.next_renew < self._next_wake:
                self._wake.notify()  # first (see _add_locked)
                self._next_wake = lease.next_renew

    def __len__(self) -> int:
        """How many leases it keeps alive (pending clean-ups not counted)."""
        return self._table.leases()

    @property
    def pending_cleanups(self) -> int:
        return self._table.cleanups

    def _serve(self) -> None:
        try:
            self._go_on()
        except BaseException:
            # Whatever ended it, the next add starts a thread again: with _thread left set,
            # none ever did, and no lease of the process was renewed again.
            with self._lock:
                self._thread = None
            raise

    def _go_on(self) -> None:
        """:meth:`_loop`, run again after an exception of its own (a bug, a MemoryError's
        kin): ended, no lease of the process was renewed or reported lost until the next
        acquire started a thread again (review 66, F2). The rounds it had in hand stay
        marked as renewing: overdue() reports their leases lost if they run out. (A function
        of its own: see test_back_edges.)"""
        while True:
            try:
                self._loop()
                return
            except Exception:
                log.exception("the lease renewer failed; it goes on")
            time.sleep(ORPHAN_POLL)

    def _loop(self) -> None:
        idle_since: float | None = None
        unsent: list[Job] = []  # rounds no thread could take yet (marked renewing meanwhile)
        retry_at = 0.0
        while True:
            # (rounds queued behind a slow one get helpers, looked at every NUDGE meanwhile)
            waiting = _nudged()
            with self._lock:
                # (Loops under a C lock are calls here: on Python 3.13 an interrupt at a
                # loop's back edge written inside the `with` skipped its exit, and the lock
                # stayed held for good; see test_back_edges.)
                self._table.adopt(self._orphans)
                now = time.monotonic()
                ready, self._next_wake = due(self._table.jobs.values(), now)
                lost = list(job for job in overdue(self._table.jobs.values(), now) if job._lose())
                unsent = _still_listed(unsent, self._table.jobs)
                if self._table.jobs:
                    idle_since = None
                if not ready and not lost and not (unsent and now >= retry_at):
                    # _next_wake is when this thread wakes up (an add due earlier notifies),
                    # set right before it waits. It never sleeps longer than ORPHAN_POLL: a
                    # finalizer's job left in the orphans' queue, or one whose add an
                    # interrupt cut short before it could notify, waits that long at most (an
                    # interrupted add once left this thread asleep for IDLE seconds, and a
                    # dropped section's lease held that long). Idle for IDLE seconds, it ends.
                    if not self._table.jobs:
                        idle_since = now if idle_since is None else idle_since
                        if now - idle_since >= IDLE and self._orphans.empty():
                            self._next_wake = math.inf
                            self._thread = None  # under the lock: the next add starts one
                            return
                        # Its real wake-up time, not "never": with "never", every add
                        # notified, and a thread woken after each short lease had gone found
                        # none again -- one thread wake-up per lock cycle, +14% client CPU
                        # uncontended (found by issue 23's same-run benchmark).
                        self._next_wake = now + ORPHAN_POLL
                        self._wake.wait(ORPHAN_POLL)
                        continue
                    timeout = max(0.0, min(ORPHAN_POLL, self._next_wake - now))
                    if waiting:
                        timeout = min(timeout, NUDGE)
                    if unsent:
                        timeout = min(timeout, max(0.0, retry_at - now))
                    self._next_wake = now + timeout
                    self._wake.wait(timeout)
                    continue
                for job in ready:
                    job.renewing = True
            for job in lost:  # on_lost is the user's code: never under our lock
                _tell_lost(job)
            stuck, sending, unsent = bool(unsent), unsent + ready, []
            for job in sending:
                try:
                    _worker(job.target).submit(self._run_safely, job)
                except RuntimeError:
                    if sys.is_finalizing():  # the interpreter is exiting: end quietly
                        return
                    # No worker thread could start (a limit on threads or processes): kept
                    # for the next try, still marked as renewing, so overdue() reports its
                    # lease lost if no thread takes it in time. (Ended instead, the renewer
                    # left the batch marked for good and renewed nothing more: leases expired
                    # with no on_lost, review 62, F1; run here instead, a stalled server's
                    # round held up every lease's, review 63, F2.)
                    unsent.append(job)
            if unsent:
                if not stuck:  # (say so once per spell)
                    log.warning("no renewal thread could start; %d rounds wait", len(unsent))
                retry_at = time.monotonic() + NUDGE

    def _run_safely(self, job: Job) -> None:
        try:
            if type(job) is Lease:
                with job.io:  # ordered with extend() of the same lease
                    self._run(job)
            else:
                self._run(job)
        except Exception:  # a bug or an unexpected error must not end renewals
            log.exception("renewing %r failed", job.key)
            now = time.monotonic()
            if type(job) is Lease:
                job._retry_later(now)
            elif isinstance(job, Cleanup) and job.attempted(now, done=False):  # tried: next, or end
                # Without this a clean-up whose client raised something unexpected stayed
                # due at once: the renewer spun on it for good, logging, and starved other
                # leases' renewals (CI's slow leg: a lease 0.6 s past its renewal).
                self.remove(job)
        finally:
            job.renewing = False
            with self._lock:
                self._wake.notify()

    def _run(self, job: Job) -> None:
        started = time.monotonic()
        if _renewed_meanwhile(job, started):
            return
        planned = plan(job, started)
        if planned is not None:
            steps, ttl_ms = planned
            try:
                with drivers.impatient():  # (see there)
                    outcome = drivers.run(steps, job.target)
            except UNREACHABLE:
                outcome = FAILED
            except RedisError as exc:  # an error reply is an answer: the round failed
                log.warning("renewing %r: the server answered %r", job.key, exc)
                outcome = FAILED
        if planned is None or conclude(job, started, ttl_ms, outcome):
            self.remove(job)


# How many renewal rounds of one target run at once (see _worker.Lanes): with a quorum's
# master stopped, each costs the node timeout, so a process keeps up to about
# RENEWAL_LANES / 0.25 s renewals a second there -- 3 per lease per ttl: 10 * ttl leases.
RENEWAL_LANES = 8


def _still_listed(jobs: list[Job], table: dict[Hashable, Job]) -> list[Job]:
    """Those of ``jobs`` still in the renewer's ``table`` (a released lease, a clean-up
    dropped: nothing to send any more)."""
    return [job for job in jobs if table.get(job_key(job)) is job] if jobs else jobs


def _worker(target: Any) -> Lanes:
    """The renewal lanes of ``target``: kept on the target, so they go with it (a replaced
    provider's worker threads end once idle instead of piling up). A parent's are never
    used in a forked child (see _forked)."""
    lanes: Lanes | None = target.renewal_worker
    if lanes is None or lanes.pid != os.getpid():
        lanes = target.renewal_worker = Lanes("redlock-deco-renewal", RENEWAL_LANES)
        _LANES.add(lanes)
    return lanes


_LANES: weakref.WeakSet[Lanes] = weakref.WeakSet()  # every target's (see Renewer._loop)
_NOTIFIER: list[Lanes] = []  # the process's (see _tell_lost)


def _tell_lost(lease: Lease) -> None:
    """``notify_lost(lease)`` off the renewer's thread, for a lease the renewer found overdue:
    run there, a slow on_lost (an alert over HTTP) held up every provider's renewals, and
    a lease on a healthy server expired unrenewed and was taken before its holder heard
    (review 64, F3: three callbacks of 0.6 s). On lanes, not one thread: one after another,
    a slow callback of one server's lease held up the loss signal of another's, taken
    meanwhile (review 65, F2); a callback running past SLOW gets the next one a helper, up
    to RENEWAL_LANES at once. Those of a round that came back run on that round's lane (see
    conclude). No thread can start: here."""
    if not _NOTIFIER:
        _NOTIFIER.append(Lanes("redlock-deco-on-lost", RENEWAL_LANES))
        _LANES.add(_NOTIFIER[0])  # (nudged by the renewer as it goes round)
    try:
        _NOTIFIER[0].submit(notify_lost, lease)
    except RuntimeError:
        notify_lost(lease)


def _forked() -> None:
    """A forked child never touches its parent's renewal workers: the renewer took each
    one's lock as it went round, and one held by a parent's thread at the fork stopped the
    child's renewer for good -- its leases expired with no on_lost, and another caller took
    them (review 64, F1); their queues held the parent's rounds, which the child ran,
    calling the parent's on_lost (F2)."""
    global _LANES
    _LANES = weakref.WeakSet()
    _NOTIFIER.clear()


os.register_at_fork(after_in_child=_forked)


def _nudged() -> bool:
    """Each target's lanes nudged (see Lanes.nudge); whether calls still wait in one."""
    waiting = False
    for lanes in list(_LANES):
        lanes.nudge()
        waiting = waiting or lanes.waiting
    return waiting


class AsyncRenewer:
    """The renewer of one event loop's leases: a timer on the loop, not a task, that starts
    one short task per renewal round when it is due.

    Not a task, because anyone may cancel a task: ``asyncio.run``'s end cancels every task
    while a task it cancelled may still run inside its block (a clean-up under the cancel),
    and a renewer task cancelled with the others left that lease to expire under its body,
    with no on_lost, while another client got in (review 25, 02); restarted after each
    cancel, it never ended for code that cancels every other task until none is left, and
    moved to the next loop when collected there (review 26). A round cancelled so starts
    again at the loop's next turn (after the canceller's own wake-up, so a sweep that
    cancels until none is left finds none). Only :meth:`stop` (the loop's clean-up) ends
    it.
    """

    def __init__(self) -> None:
        self._table = _Jobs()
        # Weakly: a loop closed by hand without aclose() is forgotten through its weak key
        # in the loops' table; held here, it kept its state, clients and all, until another
        # loop's first use, whose collection then warned in whatever ran (CI's slow leg).
        self._loop = weakref.ref(asyncio.get_running_loop())
        self._timer: asyncio.TimerHandle | None = None
        self._next_wake = math.inf
        self._rounds: set[asyncio.Task[None]] = set()  # rounds in flight, stopped with it
        self._stopped = False

    def add(self, job: Job) -> None:
        if self._table.add(job):
            self._arm(job.next_renew)

    def remove(self, job: Job) -> None:
        self._table.remove(job)
        if not self._table.jobs and self._timer is not None:
            # Idle: no timer left on the loop. An armed one holds the loop, and through this
            # renewer the loop's state, clients and all: a loop closed by hand then stayed in
            # the loops' table (weak keys) until another loop's first use, and its unclosed
            # connections warned in whatever ran when they were collected (CI's slow leg).
            self._timer.cancel()
            self._timer, self._next_wake = None, math.inf

    def resume(self) -> None:
        """Look at once (``asyncio.run`` cancelled every round in flight): the loop's shutdown
        waits for the async generators it closes, whose leases must be renewed meanwhile
        (review 19, 01: a short ttl expired under a generator's clean-up inside its block,
        with no on_lost)."""
        self._arm(time.monotonic())

    def reschedule(self, lease: Lease) -> None:
        """``lease`` became due earlier: look no later than that."""
        self._arm(lease.next_renew)

    def _arm(self, when: float) -> None:
        """Look at the jobs at ``when`` (monotonic), unless it looks earlier already."""
        loop = self._loop()
        if self._stopped or loop is None or loop.is_closed():
            return
        earlier = self._timer
        if (
            earlier is not None
            and not earlier.cancelled()
            and earlier.when() > loop.time()  # (else it has run, or is running: _tick)
            and when >= self._next_wake
        ):
            return
        # The new timer set before the old is cancelled: cancelled first, an exception
        # landing in between (a signal handler's, in another task's acquire) left no timer
        # that would fire, and every later call returned early -- no lease of the loop
        # renewed or reported lost (review 56, F1). Two timers for a moment cost a look.
        self._timer = loop.call_later(max(0.0, when - time.monotonic()), self._tick)
        self._next_wake = when
        if earlier is not None and earlier.when() > loop.time():
            earlier.cancel()  # (one due already is kept: cancelled, its look came later)

    def _tick(self) -> None:
        # A plain callback of the loop's: asyncio logs an exception raised in it (a signal
        # handler's, landing anywhere) and runs on, and one before the timer was armed again
        # left no timer: no lease of the loop renewed or reported lost, a second holder in
        # without on_lost (review 56, F1). Armed again then, to look once more soon.
        try:
            self._timer, self._next_wake = None, math.inf
            self._look()
        except BaseException:
            self._arm(time.monotonic() + RETRY_AFTER_INTERRUPT)
            raise

    def _look(self) -> None:
        loop = self._loop()
        if self._stopped or loop is None:
            return
        now = time.monotonic()
        ready, upcoming = due(self._table.jobs.values(), now)
        for lost in overdue(self._table.jobs.values(), now, idle_too=True):
            if lost._lose():
                notify_lost(lost)
        for job in ready:
            round_ = background(self._run_safely(job), name="redlock-deco-renewal")
            # (its end seen before it is marked: marked and not yet started, a job cut off
            # here was renewing for good -- never renewed, never reported lost)
            round_.add_done_callback(functools.partial(self._round_done, job))
            job.renewing = True
            self._rounds.add(round_)
        if upcoming != math.inf:
            self._arm(upcoming)

    def __len__(self) -> int:
        """How many leases it keeps alive (pending clean-ups not counted)."""
        return self._table.leases()

    @property
    def pending_cleanups(self) -> int:
        return self._table.cleanups

    async def last_cleanups(self) -> None:
        """Try every pending clean-up once more before the loop's clients close (nothing
        would try them afterwards, leaving a lock nobody holds for its whole ttl). The
        caller bounds the whole (the loop's shutdown, with its releases): a bound of its own
        per try, 1 s, cut short a clean-up that needed a script reload on a slow link, and
        the key stayed held by nobody for its ttl (review 12, 01)."""
        jobs = [job for job in self._table.jobs.values() if type(job) is Cleanup]

        async def once(job: Cleanup) -> None:
            abandon = job.target.algorithms.abandon(job.claim)
            with (
                contextlib.suppress(RedisError, OSError, TimeoutError, asyncio.TimeoutError),
                drivers.impatient(),
            ):
                await drivers.run_async(abandon, job.target)
            self.remove(job)
            cleaned_up(job)

        await asyncio.gather(*(once(job) for job in jobs))  # together: one timeout in all

    def stop(self) -> set[asyncio.Task[None]]:
        """Stop looking, and cancel the rounds in flight; returns them, for the loop's
        shutdown to let them end (a round started as the loop ended -- a release the
        shutdown cut short queues its clean-up -- was otherwise destroyed pending: review
        12)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        stopping = set(self._rounds)
        for task in stopping:
            task.cancel()
        return stopping

    def _round_done(self, job: Job, round_: asyncio.Task[None]) -> None:
        """A round ended, however: even cancelled before its first step, when none of its
        own code ran (its job stayed marked as renewing, so never renewed again, nor
        reported lost: a silent loss found writing review 26's test)."""
        try:
            job.renewing = False
            self._rounds.discard(round_)
        finally:
            # (armed however this ends: with one lease, nothing else would -- review 56)
            self._arm(time.monotonic())  # cancelled by someone else (see the class): again

    async def _run_safely(self, job: Job) -> None:
        try:
            if type(job) is Lease:
                async with job.io:  # ordered with extend() of the same lease
                    await self._run(job)
            else:
                await self._run(job)
        except Exception:  # a bug or an unexpected error must not end renewals
            loop = self._loop()
            if loop is None or loop.is_closed():
                return  # collected pending on a loop closed without aclose(): nothing to do
            log.exception("renewing %r failed", job.key)
            now = time.monotonic()
            if type(job) is Lease:
                job._retry_later(now)
            elif isinstance(job, Cleanup) and job.attempted(now, done=False):  # tried: next, or end
                # Without this a clean-up whose client raised something unexpected stayed
                # due at once: the renewer spun on it for good, logging, and starved other
                # leases' renewals (CI's slow leg: a lease 0.6 s past its renewal).
                self.remove(job)
        finally:
            job.renewing = False

    async def _run(self, job: Job) -> None:
        started = time.monotonic()
        if _renewed_meanwhile(job, started):
            return
        planned = plan(job, started)
        if planned is not None:
            steps, ttl_ms = planned
            try:
                with drivers.impatient():  # (see there)
                    outcome = await drivers.run_async(steps, job.target)
            except UNREACHABLE:
                outcome = FAILED
            except RedisError as exc:  # an error reply is an answer: the round failed
                log.warning("renewing %r: the server answered %r", job.key, exc)
                outcome = FAILED
        if planned is None or conclude(job, started, ttl_ms, outcome):
            self.remove(job)


def renewer() -> Renewer:
    """The renewer of this process's sync leases."""
    if not process.sync_renewer:
        with process.registry_lock:
            if not process.sync_renewer:
                process.sync_renewer.append(Renewer())
    found: Renewer = process.sync_renewer[0]
    return found


def known_async_renewer() -> AsyncRenewer | None:
    """The running event loop's renewer if the loop is known -- never a new loop state: one
    made after the loop's shutdown had closed its own was never closed (review 19, 02: a
    block that outlived the shutdown's wait reopened a client)."""
    state = process.known_loop_state()
    if state is None:
        return None
    if state.renewer is None:
        state.renewer = AsyncRenewer()
    found: AsyncRenewer = state.renewer
    return found


def async_renewer() -> AsyncRenewer:
    """The renewer of the running event loop's leases."""
    state = process.loop_state()
    if state.renewer is None:
        state.renewer = AsyncRenewer()
    found: AsyncRenewer = state.renewer
    return found


def give_back_later(
    claim: Claim, target: Any, asynchronous: bool, lease: Lease | None = None
) -> None:
    """Leave ``claim`` to the renewer's clean-ups (see ``_waiting.give_back_later``); for
    asyncio, only while its loop's state stands: at its shutdown, after the last clean-ups
    have run, what remains expires within its ttl (a new state would never be closed, and
    asking for one raised ProviderError out of an interrupted acquire's clean-up). ``lease``:
    the lease whose release this finishes (see :func:`cleaned_up`)."""
    with contextlib.suppress(RuntimeError):  # a loop that is gone: nothing can send it
        found = known_async_renewer() if asynchronous else renewer()
        if found is not None:  # (a loop shut down: its last clean-ups have run)
            found.add(Cleanup(claim, target, time.monotonic(), lease))


waiting.give_back_later = give_back_later

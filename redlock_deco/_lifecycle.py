"""A lease's lifecycle: everything that changes what a holder knows about its lease is here.

The rule: only the transition methods below write a lease's state, and every other module
reads it. (Before this module, ~19 slots were written by the guard, the renewer and the
primitives from threads and tasks, and bugs lived in the gaps between them.)

States and transitions::

    HELD --releasing()--> RELEASING       the outermost exit is sending the release: a
                                          renewal in flight can no longer call it lost
    RELEASING --release()--> RELEASED     the server confirmed (or it cannot be known)
    HELD/RELEASING --lose()--> LOST       renewal, extend or release found it gone, or
                                          its owner ended with its block still open
    HELD --orphan()---> ORPHANED          max_hold passed, or its section was dropped
                                          open: no longer renewed, expires within ttl
    ORPHANED --releasing()/lose()--> RELEASING / LOST

RELEASED and LOST are final. Times are local ``time.monotonic()`` readings, used only to
schedule renewals and to decide when a lease that could not be renewed must be presumed
gone; they are measured from *before* the request that set the expiry was sent, so they
err on the early side. The lease's real end is the Redis server's expiry.

An acquire that was cut short (timeout, cancellation, lost connection) is not a lease at all:
it is a :class:`Cleanup` job, which the renewer retries until the token-compared release
lands or the claim's ttl has passed.

Why one module: a lease's state, its sections' count (which exit is the last), its loss
report and its last event ("released", once) are one account of the same lease; split, the
writers of each would again be the gaps this module closed.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from . import _events as events
from ._errors import LockLost
from ._events import Source
from ._protocol import Claim
from ._quorum import held_for

log = logging.getLogger("redlock_deco")

# Renew when a third of the lease has passed: two more attempts fit before it would expire.
RENEW_FRACTION = 1 / 3
# After a failed renewal or clean-up (connection trouble), try again after at most this long.
RETRY_DELAY = 0.5


class State(enum.Enum):
    HELD = "held"
    RELEASING = "releasing"
    RELEASED = "released"
    LOST = "lost"
    ORPHANED = "orphaned"


class Lease:
    """One held lease: its claim (key, token, ttl), where it lives, and what we know of it.

    What users read (``current_lease()``, ``Lock.lease``, ``on_lost`` callbacks): ``name``,
    ``key``, ``token``, ``fencing_token``, ``remaining()`` and ``lost``. Every other attribute
    and method is the library's own bookkeeping and may change in any release.

    Built complete by the guard once the server granted it. ``io`` is a lock (a
    ``threading.Lock`` for sync leases, an ``asyncio.Lock`` for asyncio ones) that every
    extension and renewal of this lease holds around its round trip, so they reach the server
    in the order the holder believes they did.
    """

    __slots__ = (
        "_gate",
        "_source",
        "acquired_at",
        "alive",
        "claim",
        "expires_at",
        "fencing_token",
        "hold_until",
        "io",
        "last_out",
        "left",
        "name",
        "next_renew",
        "on_lost",
        "pid",
        "popped",
        "provider",
        "recorded_at",
        "renewing",
        "said_released",
        "sections",
        "set_ms",
        "state",
        "target",
        "ttl_ms",
    )

    def __init__(
        self,
        claim: Claim,
        *,
        name: str,
        provider: str,
        target: Any,
        started: float,
        io: Any,
        alive: Callable[[], bool],
        fencing_token: int | None = None,
        max_hold: float | None = None,
        on_lost: Callable[[Lease], object] | None = None,
        source: Source | None = None,
    ) -> None:
        self.claim: Claim = claim
        self.name: str = name
        self.provider: str = provider
        # The labels its events carry; None: a primitive used directly (see ``source``).
        self._source: Source | None = source
        self.target: Any = target
        self.io: Any = io
        # Renewal must not outlive the owner: a thread or task that ended without leaving
        # its section, or an object collected without releasing, stops being renewed, and
        # its lease then expires within ttl.
        self.alive: Callable[[], bool] = alive
        self.fencing_token: int | None = fencing_token
        # Told when renewal finds the lease gone.
        self.on_lost: Callable[[Lease], object] | None = on_lost
        self.hold_until: float = started + max_hold if max_hold is not None else float("inf")
        self.pid: int = os.getpid()  # a forked child must never release its parent's lease
        self.acquired_at: float = time.monotonic()
        self.state: State = State.HELD
        # The owner's open sections on it (a set, not a count: leaving one twice, as the
        # clean-up of an interrupted exit may, must not leave an outer section unprotected).
        self.sections: set[object] = set()
        # Its last section has left: it is on its way back and is never re-entered. Set
        # with that last exit, under ``_gate``, as a re-entry's check and count are: apart,
        # another thread closing the owner's last section (a handed-out stack, a generator's
        # step, a finalizer) came between the owner's check and its count, and a nested
        # block ran on a lease being given back while another holder got in (review 89a,
        # F1). Re-entrant: a signal handler's own section may open and close in between.
        self.left: bool = False
        self.last_out: object = None  # the section whose exit was the last (see _exit)
        self._gate = threading.RLock()
        self.said_released: bool = False  # its last event sent (see say_released)
        # Taken out of its object's list by a release() or hand_over(): the id of the list
        # it was moved into (see _guard._move_newest); 0 while not.
        self.popped: int = 0
        self.renewing: bool = False  # the renewer dispatched a round: never dispatch a second one
        self.ttl_ms: int = claim.ttl_ms
        self.set_ms: int = claim.ttl_ms  # what the request behind the recorded expiry set
        self.recorded_at: float = started  # when the request behind the recorded expiry was sent
        # A hand-off grants the waiter its own ttl (queue entries carry it), so every lease
        # starts as long as the ttl.
        lease = held_for(target, claim.ttl_ms)
        self.expires_at: float = started + lease
        self.next_renew: float = started + lease * RENEW_FRACTION

    def __repr__(self) -> str:
        return f"<Lease {self.key!r} {self.state.value}>"

    # -- what the rest of the library reads ---------------------------------------------

    @property
    def key(self) -> str:
        return self.claim.keys.key

    @property
    def source(self) -> Source:
        """The labels of its events. A ``Lock``/``Semaphore`` used directly has none of its
        own: its name is its template (built here, only when an event needs it)."""
        if self._source is not None:
            return self._source
        return Source.direct(self.name, self.provider)

    @property
    def token(self) -> str:
        return self.claim.token

    @property
    def lost(self) -> bool:
        """True once the lease is known to have ended while held (expired or taken over)."""
        return self.state is State.LOST

    @property
    def released(self) -> bool:
        """True once given back (by its holder, or by its loop's shutdown)."""
        return self.state is State.RELEASED

    @property
    def held(self) -> bool:
        """True while the lease is to be renewed (held, and its owner still running)."""
        return self.state is State.HELD

    def remaining(self, now: float | None = None) -> float:
        """Seconds left on the lease as far as this holder knows (0 if it ended)."""
        if self.state is State.LOST or self.state is State.RELEASED:
            return 0.0
        return max(0.0, self.expires_at - (time.monotonic() if now is None else now))

    def _server_left(self, now: float) -> float:
        """Seconds the server keeps the lease at the least, as this holder can tell: what
        :meth:`remaining` says, without a quorum's drift allowance (that allowance guards
        the holder's belief, not the server's count: ``extend(by=S)`` measured from
        ``remaining()`` shortened a quorum lease whenever S was under 1% of it)."""
        left = self.remaining(now)
        if left == 0:
            return 0.0
        return left + self.set_ms / 1000 - held_for(self.target, self.set_ms)

    # -- transitions --------------------------------------------------------------------

    def _enter(self, section: object) -> None:
        """A protected section of its owner is open on it (the first, or a nested one that
        :meth:`reenter` admitted)."""
        self.sections.add(section)

    def _gated(self) -> Any:
        """The lease's gate; none in a forked child, which owns nothing of its parent's
        leases (it only forgets their sections) and where a thread of the parent that held
        the gate at the fork never lets it go (the child hung leaving its section: review
        92a, F1)."""
        return self._gate if self.pid == os.getpid() else contextlib.nullcontext()

    def _reenter(self, section: object) -> None:
        """A nested section of the owner enters again (re-entrant locks). A lease it knows to
        be over cannot be re-entered: that call would run unprotected, so it fails loudly
        instead; one whose last section has just left (in another thread) raises
        :class:`Left`, and the caller takes the name anew."""
        with self._gated():
            # Counted first, then checked: a signal handler's code run in between (the gate
            # is re-entrant) that closes the owner's other sections then finds this one
            # counted and gives nothing back (review 90a, N1).
            self.sections.add(section)
            left = self.left
            ended = self.state is not State.HELD or self.remaining() == 0
            if not left and not ended:
                return
            self.sections.discard(section)
        if left:
            raise Left
        why = (
            "is no longer renewed (its max_hold has passed)"
            if self.state is State.ORPHANED
            else "has ended (expired or taken over)"
        )
        raise LockLost(
            f"re-entering {self.key!r}, but this owner's lease on it {why}: the outer holder "
            "no longer protects this call",
            name=self.name,
            key=self.key,
        )

    def _exit(self, section: object) -> bool:
        """A section left (leaving it again changes nothing); True once no section of the
        owner is open on it: the lease is then to be given back."""
        with self._gated():
            self.sections.discard(section)
            if self.sections:
                return False
            if self.left:
                # One exit is the last, and says so each time it is repeated (an interrupted
                # exit's clean-up closes its section again, and gives the lease back only on
                # that answer: answered once, an interrupt in the give-back left the lease
                # held and renewed while the thread lived, review 94a, F1); no other exit is
                # -- the gate is re-entrant, and a finaliser the collector runs inside it
                # (Python 3.12 runs it after a call, here after the discard) that closed
                # another section dropped open on this lease answered "last", and so did
                # this exit: two give-backs, the second a false loss (review 93a, N1).
                return self.last_out == section
            self.last_out = section  # (first: a repeat cut in between decides anew)
            self.left = True
            return True

    def _renewed(self, started: float, ttl_ms: int, *, keep_length: bool = False) -> None:
        """The server set the lease to ``ttl_ms`` by a request sent at ``started``.

        ``ttl_ms`` is what that request carried, never the current setting: a reply records
        what the server was told, so an ``extend(to=60)`` overtaken by a renewal to the old
        ttl cannot leave the holder believing in 60 s the server never kept. It becomes the
        length of later renewals unless ``keep_length`` (``extend(by=...)``: this lease
        only). The next renewal comes when the lease has as much left as a renewal's
        length at its usual point: never one that would shorten what was just asked for.
        """
        if self.state is not State.HELD:
            return  # released or given up while the request was in flight: nothing to record
        if started < self.recorded_at:
            return  # older than what is recorded: that request was overtaken (io prevents it)
        self.recorded_at = started
        self.set_ms = ttl_ms
        if not keep_length:
            self.ttl_ms = ttl_ms
        self.expires_at = started + held_for(self.target, ttl_ms)  # a quorum's less drift
        length = held_for(self.target, self.ttl_ms)
        self.next_renew = self.expires_at - length * (1 - RENEW_FRACTION)

    def _renewal_failed(self, started: float) -> bool:
        """A renewal sent at ``started`` got no answer. True if the lease is now lost.

        Transient failures are retried until the lease would have ended anyway.
        """
        if self.state is not State.HELD:
            return False
        left = self.expires_at - started
        if left <= 0:
            return self._lose()
        self.next_renew = started + min(RETRY_DELAY, left / 4)
        return False

    def _retry_later(self, now: float) -> None:
        """A renewal round failed unexpectedly (a bug, not the network): try again soon."""
        self.next_renew = now + RETRY_DELAY

    def _uncertain(self, started: float, ttl_ms: int) -> None:
        """A request setting ``ttl_ms``, sent at ``started``, may or may not have reached the
        server (timed out, cancelled). Believe the earlier of the two possible ends, and
        renew at once: a renewal carries the ttl the holder believes in, so afterwards
        server and holder agree again. (Believing the old end would let a shortening
        ``extend`` that did land go unnoticed while another holder takes the lock.)"""
        if self.state is not State.HELD:
            return
        self.expires_at = min(self.expires_at, started + held_for(self.target, ttl_ms))
        self.next_renew = started

    def _lose(self) -> bool:
        """The lease is gone. True if this is news, to one caller only, whatever thread each
        runs in: it is reported once (a renewal's "gone" concluded as its holder's release
        found the key gone too, and each sent "lost": review 96, F2)."""
        with self._gated():
            if self.state in (State.HELD, State.ORPHANED, State.RELEASING):
                self.state = State.LOST
                return True
            return False

    def _releasing(self) -> None:
        """The outermost exit is about to send the release."""
        if self.state is State.HELD or self.state is State.ORPHANED:
            self.state = State.RELEASING

    def _kept_through_shutdown(self) -> None:
        """Renewed whether or not its owner still runs: its loop's shutdown is closing the
        generator suspended in its block, and bounds how long that may take (the owner, a
        task asyncio.run has ended, would otherwise have it reported lost under the
        generator's clean-up: review 19, 01)."""
        self.alive = _always

    def _orphan(self) -> None:
        """Stop renewing: ``max_hold`` passed, or the section was dropped open."""
        if self.state is State.HELD:
            self.state = State.ORPHANED

    def _release(self) -> None:
        """The owner gave it back (whatever the server said: a lost lease stays LOST, even
        when the renewer finds it so at this very moment)."""
        with self._gated():
            if self.state is not State.LOST:
                self.state = State.RELEASED


class Left(Exception):
    """A re-entry found the lease's last section gone (see Lease.left): not an error of the
    caller's, who takes the name anew."""


class Cleanup:
    """The clean-up of a claim whose acquire was cut short and whose token-compared release
    could not reach the server: its SET may still land (a paused server runs buffered
    commands when it resumes), leaving a lock nobody holds. Retried until the release lands
    or the claim's ttl has passed (after which the server has dropped it anyway)."""

    __slots__ = ("claim", "lease", "next_renew", "renewing", "started", "target", "until")

    def __init__(
        self, claim: Claim, target: Any, started: float, lease: Lease | None = None
    ) -> None:
        self.claim = claim
        self.target = target
        self.started = started
        self.until = started + claim.ttl_ms / 1000
        self.next_renew = started  # try at once
        self.renewing = False
        # The lease whose release this is, if its holder had it (a block dropped open, a
        # release cut short): its "released" event comes when the clean-up ends.
        self.lease = lease

    def __repr__(self) -> str:
        return f"<Cleanup {self.claim.keys.key!r}>"

    @property
    def key(self) -> str:
        return self.claim.keys.key

    def attempted(self, now: float, done: bool) -> bool:
        """After one attempt: True when there is nothing left to do."""
        if done or now >= self.until:
            return True
        self.next_renew = now + RETRY_DELAY
        return False


def say_released(lease: Lease, held: float) -> None:
    """Send ``lease``'s last event, "released" (``held``: the time held), once: a listener's
    own KeyboardInterrupt out of it reached the release's interrupt handling, which gave the
    lease up and said "released" again -- a "held now" gauge went below zero (review 94a,
    F3). Marked as said as the first listener is called, not before: an interrupt on the way
    there reached the same handling, which found it said, and it never was (review 95,
    F1)."""
    if lease.said_released:
        return
    if not events.listeners:
        lease.said_released = True  # (nobody to tell, now or later)
        return
    # (setattr, not a function of ours: a Python function's return is where a signal lands)
    events.emit("released", lease.name, lease.key, held, lease.source,
                heard=partial(setattr, lease, "said_released", True))  # fmt: skip


def found_lost(lease: Lease) -> None:
    """The holder's own command (its release, an extend) found ``lease`` gone: "lost", once
    per lease, by whichever finds it first, the renewer included (see Lease._lose)."""
    if lease._lose() and events.listeners and not lease.said_released:
        events.emit("lost", lease.name, lease.key, None, lease.source)


def notify_lost(lease: Lease) -> None:
    """Run the lease's on_lost callback; nothing it raises may stop the renewer -- not even
    SystemExit or KeyboardInterrupt, which end only the renewer's thread there, not the
    process: every later lease of the process then went unrenewed and expired under its
    holder with no on_lost (review 16, 02: an on_lost calling sys.exit())."""
    if events.listeners:
        events.emit_renewing("lost", lease.name, lease.key, lease.source)
    if lease.on_lost is not None:
        try:
            lease.on_lost(lease)
        except BaseException:
            log.exception("on_lost callback for %r failed", lease.key)


def _always() -> bool:
    return True

"""Redlock: locks and semaphores over N independent masters, written once and free of I/O.

Every step goes to all masters at once (a :class:`Fanout`); the driver waits a short per-node
timeout and reports each master's reply or failure. An acquisition counts only if a quorum of
masters granted it *and* some of the lease is left after the time the round took and an
allowance for clock drift; otherwise it is released on every master (a SET that timed out may
still have landed) and retried after a random delay until ``wait`` runs out. Extension needs
the quorum too. No waiter queue spans masters (a hand-off granted by one master is no
quorum), so a waiter backs off with jitter and tries again.

How big a quorum must be, and how many failed masters it tolerates:

- A lock (limit 1) needs a majority, ``N // 2 + 1``: two majorities always share a master,
  which grants the lock to one holder only. It tolerates ``N - (N // 2 + 1)`` failed masters.
- A semaphore with limit ``L >= 2`` needs more than a majority. Each master admits at most
  ``L`` holders, so all masters together hold at most ``N * L`` grants; ``L + 1`` holders that
  each hold ``Q`` grants need ``(L + 1) * Q`` of them. Over-admission is impossible exactly when
  ``(L + 1) * Q > N * L``, i.e. ``Q = N * L // (L + 1) + 1``. A majority is not enough: with
  N=3 and L=2, three holders could each own a different pair of masters (each master then
  holding two) and all three would run. Tolerated failures are ``N - Q``:

  ====  ===  ===  =========
  N     L    Q    tolerates
  ====  ===  ===  =========
  3     1    2    1
  3     2    3    0
  5     1    3    2
  5     2    4    1
  5     3    4    1
  7     2    5    2
  ====  ===  ===  =========
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

from . import _scripts as scripts
from ._protocol import Acquired, Claim, Fanout, Granted, Kind, NotGranted, Sleep, Steps, backoff
from ._scripts import Outcome

# Redlock's allowance for clock drift between masters: 1% of the ttl plus 2 ms.
DRIFT_FRACTION = 0.01
DRIFT_MS = 2.0


def quorum(masters: int, limit: int = 1) -> int:
    """How many masters must grant a lease with this ``limit`` (see the module docstring)."""
    return masters * limit // (limit + 1) + 1


def validity_ms(ttl_ms: int, elapsed_ms: float) -> float:
    """What is left of a lease granted by a round that took ``elapsed_ms``."""
    return ttl_ms - elapsed_ms - (ttl_ms * DRIFT_FRACTION + DRIFT_MS)


def held_for(target: object, ttl_ms: int) -> float:
    """Seconds a lease just set to ``ttl_ms`` (measured from the request) may be counted on.

    On one Redis, all of it but the millisecond the server's scripts may round off: a
    reader's share and a semaphore slot are scored in whole milliseconds of the server's
    clock (its TIME, floored, plus the ttl), and end up to 1 ms before the ttl has passed
    since the request -- a rival got in while the holder's ``remaining()`` still said 0.8 ms
    (found by a helper chasing the readers-writers model's flakes). On a quorum of masters,
    Redlock's validity: less the clock-drift allowance, as the acquire and extend rounds count
    it (``Lease.remaining()`` ignored it and overstated the lease by 1% of the ttl, b13).
    ``target`` is the lease's target.
    """
    if isinstance(getattr(target, "algorithms", None), Quorum):
        return validity_ms(ttl_ms, 0.0) / 1000
    return (ttl_ms - SCORED_IN_MS) / 1000


SCORED_IN_MS = 1  # (see held_for)


def _granted(replies: list[object], operation: str, wanted: Outcome) -> int:
    granted = 0
    for reply in replies:
        if isinstance(reply, BaseException):
            continue  # a master that failed or timed out grants nothing
        code = reply[0] if isinstance(reply, list) else reply
        granted += scripts.outcome(operation, code) is wanted
    return granted


class Quorum:
    """The algorithms over ``masters`` independent Redis masters."""

    def __init__(self, masters: int) -> None:
        if masters < 3:
            raise ValueError(f"a quorum needs at least 3 masters, got {masters}")
        self.masters = masters

    def acquire(
        self,
        claim: Claim,
        wait: float | None,
        listening: bool = False,  # a quorum has no queue: it waits with jittered backoff
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        tried: bool = False,  # never: see fast_try
    ) -> Steps[Acquired]:
        deadline = math.inf if wait is None else clock() + wait
        needed = quorum(self.masters, claim.limit)
        failures = 0
        while True:
            started = clock()
            replies = yield Fanout(claim.acquire_step(0))
            elapsed_ms = (clock() - started) * 1000
            won = _granted(replies, "acquire", Outcome.ACQUIRED)
            if won >= needed and validity_ms(claim.ttl_ms, elapsed_ms) > 0:
                return Granted(sent_at=started)
            yield Fanout(claim.release_step())  # everywhere: a timed-out grant may exist
            remaining = deadline - clock()
            if remaining <= 0:
                return NotGranted()
            failures += 1
            yield Sleep(min(remaining, backoff(failures, rand)))

    def fast_try(self, claim: Claim, wait: float | None, listening: bool) -> None:
        """No lean path: every attempt is a round on every master."""
        return None

    def release(self, claim: Claim) -> Steps[bool | None]:
        """Give the lease back on every master: True if a quorum confirmed it was ours;
        False if so many masters answered it was not (someone else's, or gone) that the rest
        are too few for a quorum; else None: unconfirmed, not lost -- the holder's own clock
        decides (_guard.py).

        One refusal proves nothing: the acquire won on a quorum, not on every master, and a
        master that refused the acquire (someone's stale lease there) refuses the release too.
        With another master paused at the release, a lease held 0.1 s of its 30 s was
        reported lost (review 41)."""
        replies = yield Fanout(claim.release_step())
        needed = quorum(self.masters, claim.limit)
        if _granted(replies, "release", Outcome.RELEASED) >= needed:
            return True
        refused = _granted(replies, "release", Outcome.NOT_OWNER)
        refused += _granted(replies, "release", Outcome.GONE)
        return False if self.masters - refused < needed else None

    def extend(
        self, claim: Claim, ttl_ms: int, clock: Callable[[], float] = time.monotonic
    ) -> Steps[bool]:
        """Reset the lease on every master; it holds on only if a quorum extended it in time."""
        started = clock()
        replies = yield Fanout(claim.extend_step(ttl_ms))
        elapsed_ms = (clock() - started) * 1000
        extended = _granted(replies, "extend", Outcome.EXTENDED)
        return extended >= quorum(self.masters, claim.limit) and validity_ms(ttl_ms, elapsed_ms) > 0

    def adopt(
        self, claim: Claim, held_by: str, clock: Callable[[], float] = time.monotonic
    ) -> Steps[bool]:
        """Take over the lease ``held_by`` holds on every master, as ``claim``; it is ours only
        if a quorum swapped it in time. Short of that, what did swap is given back: the
        token then holds too few masters for anyone to adopt or keep."""
        started = clock()
        replies = yield Fanout(claim.adopt_step(held_by))
        elapsed_ms = (clock() - started) * 1000
        adopted = _granted(replies, "adopt", Outcome.ADOPTED)
        in_time = validity_ms(claim.ttl_ms, elapsed_ms) > 0
        if adopted >= quorum(self.masters, claim.limit) and in_time:
            return True
        if adopted:
            yield Fanout(claim.release_step())
        return False

    def owned(self, claim: Claim) -> Steps[bool]:
        replies = yield Fanout(claim.owned_step())
        return _granted(replies, "owned", Outcome.OWNER) >= quorum(self.masters, claim.limit)

    def holders(self, kind: Kind, key: str, limit: int = 1) -> Steps[int]:
        """The holder count that decides admission: an acquire with ``limit`` L succeeds
        only if ``quorum(N, L)`` masters count fewer than L, i.e. if that quorum-th smallest
        count is < L. (A lock's quorum would understate a semaphore: with N=3, L=2 and counts
        [0, 0, 2], every acquire is refused, yet the majority's count is 0.)"""
        replies = yield Fanout(kind.count_step(key))
        counts = sorted(
            math.inf if isinstance(reply, BaseException) else int(reply) for reply in replies
        )
        found = counts[quorum(self.masters, limit) - 1]
        return int(found) if found != math.inf else 2**31

    def abandon(self, claim: Claim) -> Steps[None]:
        yield Fanout(claim.release_step())

"""The protocol core: every lock/semaphore algorithm, written once and free of I/O.

An algorithm is a generator that yields *steps* (run this script, block on that list for so
long, sleep) and receives each step's reply; it returns its result. The thin drivers in
:mod:`redlock_deco.drivers` execute the steps on a sync or an asyncio client, so the sync and
async paths cannot drift apart, and tests can drive an algorithm with scripted replies and a
fake clock.

Waiting design: a waiter blocks with BLPOP on a per-lock *signal list* that releases push to,
rather than subscribing to pub/sub. Chosen because (1) the signal is data, not a message: a
release that lands between the failed attempt and the start of the BLPOP is still in the list,
so wake-ups cannot be lost without a subscribe-then-retry dance; (2) a release wakes exactly one
waiter, and Redis serves blocked BLPOPs first-come first-served, so 64 waiters do not stampede
and the longest waiter goes first; (3) it needs no extra connection or listener thread and
works the same through redis.asyncio and a cluster client. Every block is also bounded by the
holder's remaining lease (a crashed holder sends nothing) and by the client's socket timeout.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, TypeVar

from redis.crc import key_slot

from . import scripts
from .scripts import Outcome, Script

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Eval:
    """Run a package script (EVALSHA, falling back to EVAL)."""

    script: Script
    keys: tuple[str, ...]
    args: tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Call:
    """Run one plain Redis command; a keyless one (WAIT) goes to ``route``'s node on a
    cluster."""

    args: tuple[str | int, ...]
    route: str | None = None


@dataclass(frozen=True, slots=True)
class Block:
    """BLPOP ``key`` for at most ``timeout`` seconds; the reply is None on timeout."""

    key: str
    timeout: float


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Fanout:
    """Run ``step`` on every master of a quorum at once; the reply is one entry per master:
    its reply, or the exception it failed with (a timeout counts as a failure)."""

    step: Eval


Step: TypeAlias = Eval | Call | Block | Sleep | Fanout
Steps: TypeAlias = Generator[Step, Any, T]

# A BLPOP timeout of 0 means "forever": never send less than this.
MIN_BLOCK = 0.001
# Retry this long after the holder's lease should have ended (server expiry is exact to ~1 ms).
EXPIRY_SLACK = 0.002
# A waiter stays registered this much longer than its block, covering its round trips.
WINDOW_SLACK = 1.0
# A fencing counter is kept this long after the last acquisition of its name (7 days); past
# that the server's clock (in microseconds) carries the sequence on.
FENCE_KEEP_MS = 7 * 24 * 3600 * 1000
# Waiting for replicas (replicas=N): WAIT at least this long, at most this long, per attempt.
REPLICA_WAIT_MIN = 0.05
REPLICA_WAIT_MAX = 1.0
# Jittered backoff, used where no signal list can be used (quorum) or after a failed WAIT.
BACKOFF_BASE = 0.005
BACKOFF_CAP = 0.25


def hash_tag(key: str) -> str | None:
    """The Redis Cluster hash tag of ``key`` (text of its first ``{...}``), or None."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    return key[start + 1 : end] if end > start + 1 else None


def sibling(key: str, suffix: str) -> str:
    """A key for ``suffix`` that lands in the same cluster hash slot as ``key``.

    Keeps scripts that touch a lock and its waiter keys single-slot (cluster-safe). A key
    with its own tag keeps it; otherwise the whole key becomes the tag -- unless it contains
    a ``}``, which would end that tag early: then a short tag of the key's own slot is used.
    """
    if hash_tag(key) is not None:
        return f"{key}:{suffix}"
    if "}" not in key:
        return f"{{{key}}}:{suffix}"
    return f"{{{tag_for_slot(key_slot(key.encode()))}}}:{key}:{suffix}"


@functools.lru_cache(maxsize=1024)
def tag_for_slot(slot: int) -> str:
    """A short hash tag whose cluster slot is ``slot`` (found by search once, then cached)."""
    for n in itertools.count():
        candidate = f"s{n}"
        if key_slot(candidate.encode()) == slot:
            return candidate
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class Keys:
    """The Redis keys of one lock or semaphore: the lease key and its waiting machinery."""

    key: str
    waiters: str
    signal: str | None  # None: no signal list can be used here, wait with jittered backoff
    limit: str | None = None  # semaphores: where the limit is kept for `inspect`
    fence: str | None = None  # fenced locks: the per-name fencing counter

    @classmethod
    def for_key(cls, key: str, kind: Kind | None = None, fencing: bool = False) -> Keys:
        limit = sibling(key, "limit") if kind is not None and not kind.reentrant else None
        fence = sibling(key, "fence") if fencing else None
        return cls(key, sibling(key, "waiters"), sibling(key, "signal"), limit, fence)

    def extra(self) -> tuple[str, ...]:
        return () if self.limit is None else (self.limit,)


@dataclass(frozen=True, slots=True)
class Kind:
    """What differs between a token lock and a semaphore: their scripts."""

    acquire_script: Script
    release_script: Script
    extend_script: Script
    owned_script: Script
    count_script: Script
    reentrant: bool

    def count_step(self, key: str) -> Eval:
        return Eval(self.count_script, (key,), ("",))


LOCK = Kind(
    scripts.LOCK_ACQUIRE,
    scripts.LOCK_RELEASE,
    scripts.LOCK_EXTEND,
    scripts.LOCK_OWNED,
    scripts.LOCK_COUNT,
    reentrant=True,
)
SEMAPHORE = Kind(
    scripts.SEM_ACQUIRE,
    scripts.SEM_RELEASE,
    scripts.SEM_EXTEND,
    scripts.SEM_OWNED,
    scripts.SEM_COUNT,
    reentrant=False,  # each acquisition takes another slot
)


@dataclass(frozen=True, slots=True)
class Claim:
    """One attempt's identity: which lease, under which token, for how long."""

    kind: Kind
    keys: Keys
    token: str
    ttl_ms: int
    limit: int = 1
    replicas: int = 0  # replica acknowledgements (WAIT) required after acquiring

    def acquire_step(self, window_ms: int) -> Eval:
        keys = self.keys
        waiting = (keys.key, keys.waiters, keys.signal or keys.waiters, *keys.extra())
        args: tuple[str | int, ...] = (self.token, self.ttl_ms, window_ms, self.limit)
        if keys.fence is not None:
            waiting, args = (*waiting, keys.fence), (*args, FENCE_KEEP_MS)
        return Eval(self.kind.acquire_script, waiting, args)

    def release_step(self) -> Eval:
        keys = self.keys
        waiting = (keys.key, keys.waiters, keys.signal or keys.waiters, *keys.extra())
        return Eval(self.kind.release_script, waiting, (self.token,))

    def extend_step(self, ttl_ms: int) -> Eval:
        keys = (self.keys.key, *self.keys.extra())
        return Eval(self.kind.extend_script, keys, (self.token, ttl_ms))

    def owned_step(self) -> Eval:
        return Eval(self.kind.owned_script, (self.keys.key,), (self.token,))

    def leave_step(self) -> Eval:
        keys = self.keys
        return Eval(
            scripts.WAITER_LEAVE, (keys.waiters, keys.signal or keys.waiters), (self.token,)
        )


@dataclass(frozen=True, slots=True)
class Granted:
    """An acquisition succeeded; a fenced lock's carries its fencing token. ``sent_at`` is
    when the attempt that won was sent (the lease is measured from there, not from the
    start of a long wait: that would make a fresh lease look expired)."""

    fencing_token: int | None = None
    sent_at: float | None = field(default=None, compare=False)  # timing, not the outcome


@dataclass(frozen=True, slots=True)
class NotGranted:
    """The wait ran out. ``acknowledged`` is set when the last attempt *was* granted but fewer
    replicas than required acknowledged it (so it was given back): how many did."""

    acknowledged: int | None = None


Acquired: TypeAlias = Granted | NotGranted


def backoff(failures: int, rand: Callable[[], float]) -> float:
    """Equal-jitter exponential backoff: half fixed, half random, capped."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** min(failures, 16))
    return ceiling / 2 + ceiling / 2 * rand()


class Algorithms(Protocol):
    """The algorithm family a target runs: one node, or a quorum of masters."""

    def acquire(
        self,
        claim: Claim,
        wait: float | None,
        max_block: float,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> Steps[Acquired]: ...
    def release(self, claim: Claim) -> Steps[bool | None]: ...
    def extend(self, claim: Claim, ttl_ms: int) -> Steps[bool]: ...
    def owned(self, claim: Claim) -> Steps[bool]: ...
    def holders(self, kind: Kind, key: str, limit: int = 1) -> Steps[int]: ...
    def abandon(self, claim: Claim) -> Steps[None]: ...


class SingleNode:
    """The algorithms on one Redis (a single server, a cluster, a Sentinel-managed primary)."""

    def acquire(
        self,
        claim: Claim,
        wait: float | None,
        max_block: float,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> Steps[Acquired]:
        """Take the lease until ``wait`` seconds have passed (None: forever, 0: once)."""
        deadline = math.inf if wait is None else clock() + wait
        # Only a waiter that will block on the signal list registers as one.
        blocks = wait != 0 and claim.keys.signal is not None
        window_ms = math.ceil((max_block + WINDOW_SLACK) * 1000) if blocks else 0
        failures = 0
        while True:
            sent_at = clock()
            reply = yield claim.acquire_step(window_ms)
            code, lease_ms = reply[0], reply[1]
            acquired = scripts.outcome("acquire", code) is Outcome.ACQUIRED
            unreplicated: int | None = None
            if acquired and claim.replicas:
                # Held on the primary only: wait until enough replicas have the write too, or
                # a failover could hand the lock to someone else (Redisson's safe mode).
                timeout = min(REPLICA_WAIT_MAX, max(REPLICA_WAIT_MIN, deadline - clock()))
                wait_ms = math.ceil(timeout * 1000)
                acked = yield Call(("WAIT", claim.replicas, wait_ms), route=claim.keys.key)
                if int(acked) < claim.replicas:
                    yield claim.release_step()  # too few copies: this attempt failed
                    acquired, lease_ms, unreplicated = False, -2, int(acked)
            if acquired:
                return Granted(int(reply[2]) if len(reply) > 2 else None, sent_at)
            remaining = deadline - clock()
            if remaining <= 0:
                if window_ms:
                    yield claim.leave_step()  # leave no waiter entry behind
                return NotGranted(unreplicated)
            # A holder that crashed sends no release: wake when its lease must have ended.
            bound = remaining if lease_ms < 0 else min(remaining, lease_ms / 1000 + EXPIRY_SLACK)
            if claim.keys.signal is None or lease_ms == -2:
                failures += 1
                yield Sleep(min(bound, backoff(failures, rand)))
            else:
                # Sliced below the client's socket timeout: a longer BLPOP would fail or be
                # silently retried by redis-py, and a waiter would give up far too late.
                yield Block(claim.keys.signal, max(MIN_BLOCK, min(bound, max_block)))
            # Loop: after any wake-up, try once more even if the deadline just passed, so a
            # signal taken from the list is never wasted.

    def release(self, claim: Claim) -> Steps[bool]:
        """Give the lease back; False if it was no longer ours (nothing was touched then).

        "Gone" counts as no longer ours: a server that restarted without its data lost the
        lease, and saying so matters more than the one false alarm it costs -- a release
        re-sent by a client's retry policy after its reply was lost (clients built from
        URLs do not retry for that reason; see providers.URL_RETRIES).
        """
        code = yield claim.release_step()
        return scripts.outcome("release", code) is Outcome.RELEASED

    def extend(self, claim: Claim, ttl_ms: int) -> Steps[bool]:
        """Reset the lease to ``ttl_ms``; False if it was no longer ours."""
        code = yield claim.extend_step(ttl_ms)
        return scripts.outcome("extend", code) is Outcome.EXTENDED

    def owned(self, claim: Claim) -> Steps[bool]:
        """Does this claim still hold its lease? Read-only."""
        code = yield claim.owned_step()
        return scripts.outcome("owned", code) is Outcome.OWNER

    def holders(self, kind: Kind, key: str, limit: int = 1) -> Steps[int]:
        """How many hold ``key`` (a lock: 0 or 1; a semaphore: live leases by server time)."""
        count = yield kind.count_step(key)
        return int(count)

    def abandon(self, claim: Claim) -> Steps[None]:
        """Undo an acquire interrupted mid-flight: its SET may have landed without us hearing
        the reply, and its waiter entry may remain. Both touch only this token's data."""
        yield claim.release_step()
        yield claim.leave_step()


SINGLE = SingleNode()

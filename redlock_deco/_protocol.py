"""The protocol core: every lock/semaphore algorithm, written once and free of I/O.

An algorithm is a generator that yields *steps* (run this script, block on that list for so
long, sleep) and receives each step's reply; it returns its result. The thin drivers in
:mod:`redlock_deco._drivers` execute the steps on a sync or an asyncio client, so the sync and
async paths cannot drift apart, and tests can drive an algorithm with scripted replies and a
fake clock.

Waiting design: direct hand-off. A waiter registers for its grant (:class:`Listen`), then
an attempt that finds the lease taken joins a FIFO queue on the server in the same script,
with the waiter's own terms (its ttl; a semaphore waiter's limit). A release gives the lease
straight to the first queued waiter that still listens, for that waiter's own ttl, and
PUBLISHes the grant on its process's channel, where one subscriber per process and server
wakes it (see :mod:`redlock_deco._waiting` and ``lua/waiters.lua``). The waiter wakes up
*holding* the lease: no race for it, no acquire round trip, and a releaser that comes
straight back queues behind those already waiting. Only a waiter that needs a fencing token
or replica acknowledgements confirms first (:attr:`Claim.confirm`). A grantee that died
holds the lease for its own ttl, as it would had it taken the lock itself; a waiter whose
process is gone is skipped at once (nobody heard its grant), and a grant that reaches a
process where nobody waits for it any more is given back at once (:mod:`._waiting`). Every
wait is bounded by the holder's remaining lease (a crashed holder sends nothing) and by
RECHECK, after which the waiter asks the server again, keeping its place: a lost grant
costs latency, never correctness.

Retries: a command that ran and lost its reply (a reset connection) is re-sent by the
client's retry policy. Every script here is idempotent per token: an attempt that finds
its own token holding the key took it (the lost reply said so), a queue holds a token at most
once, a release finds its lease gone and says so. A duplicate queue entry would be served
again later and hand the key back to a holder whose lease had ended, which would then renew
it as if nothing had happened: a second holder with no signal.

A granted lease is measured from the waiter's last attempt, which the grant followed: as
conservative as any acquire's. A grant read long after that attempt (a stopped process,
a waiter that waited long) is confirmed before it is used, see :func:`_fresh`.

Why one module: the single-node algorithms share Claim, Keys, Kind, the step types and reply
handling, and the reasoning above (retries, hand-off, freshness) covers all of them at once;
the quorum's are in ``_quorum.py``.
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

from . import _scripts as scripts
from ._scripts import Outcome, Script

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
    acquiring: bool = False  # sent by an acquirer (its connection lane, see drivers)


@dataclass(frozen=True, slots=True)
class Listen:
    """Register to hear a hand-off for ``token`` (subscribing this process to its grants on
    the first use); the reply is a registration to pass to :class:`Wait`, or None if hand-offs
    cannot reach this process there (then the waiter polls). ``timeout``: how long opening the
    subscription may take at most (never past the caller's ``wait``)."""

    token: str
    timeout: float = math.inf


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for ``registration``'s hand-off at most ``timeout`` seconds; the reply is when
    it arrived (monotonic seconds), or None."""

    registration: Any
    timeout: float


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Replicated:
    """Run ``step`` (an acquire attempt) and, if it took the lease, ``WAIT`` for ``replicas``
    acknowledgements (at most ``timeout_ms``) on the very connection that carried it: WAIT
    counts the calling connection's writes only, so on another connection an older,
    replicated write would "confirm" an acquisition the replicas never saw, and a failover
    would then hand the lock to a second holder. The reply is (the attempt's reply, how many
    replicas acknowledged it, or None when it took nothing)."""

    step: Eval
    replicas: int
    timeout_ms: int

    def wait_command(self, socket_timeout: float | None = None) -> tuple[str | int, ...]:
        """WAIT, ending in time for its reply to come within the connection's
        ``socket_timeout`` (if any): a WAIT longer than the socket waits for its reply raised
        TimeoutError in place of too few copies, and was never tried again (review 58). The
        server ends a WAIT at its next cron tick, up to WAIT_LAG later (review 60); a reply
        later still counts as no copy (the drivers' too_slow)."""
        timeout_ms = self.timeout_ms
        if socket_timeout:
            room = int(socket_timeout * 1000) - WAIT_LAG_MS
            timeout_ms = max(1, min(timeout_ms, room))  # (0: for good)
        return ("WAIT", self.replicas, timeout_ms)


def took(reply: Any) -> bool:
    """Did an acquire attempt's reply take the lease?"""
    return type(reply) is list and bool(reply) and reply[0] == 1


@dataclass(frozen=True, slots=True)
class Fanout:
    """Run ``step`` on every master of a quorum at once; the reply is one entry per master:
    its reply, or the exception it failed with (a timeout counts as a failure)."""

    step: Eval


Step: TypeAlias = Eval | Call | Listen | Wait | Sleep | Fanout | Replicated
Steps: TypeAlias = Generator[Step, Any, T]

# The shortest wait worth a step.
MIN_WAIT = 0.001
# Retry this long after the holder's lease should have ended (server expiry is exact to ~1 ms).
EXPIRY_SLACK = 0.002
# A waiter asks the server again after at most this long without a grant: the bound on what
# a lost grant (or a grantee that never took its hand-off) costs.
RECHECK = 1.0
# The queue lives this long after its last join; every waiter re-joins within RECHECK.
QUEUE_WINDOW_MS = 3000
# The lease a hand-off gives a queue entry without terms (queued by a version before them);
# every entry of this version carries its waiter's own ttl, which its grant gives it.
HANDOFF_MS = 1000
# A grant is used without confirming only if it is used within this fraction of the
# waiter's ttl after its last attempt (see _fresh).
FRESH_FRACTION = 0.5
# Acquire modes (see lua/lock_acquire.lua).
TRY, QUEUE, AGAIN = 0, 1, 2
# A fencing counter is kept this long after the last acquisition of its name (7 days); past
# that the server's clock (in microseconds) carries the sequence on.
FENCE_KEEP_MS = 7 * 24 * 3600 * 1000
# Waiting for replicas (replicas=N): WAIT at least this long, at most this long, per attempt.
REPLICA_WAIT_MIN = 0.05
REPLICA_WAIT_MAX = 1.0
WAIT_LAG_MS = 150  # how late a server ends a WAIT: at its next cron tick (hz 10: 100 ms)
# Jittered backoff, used where no hand-off can reach a waiter (a quorum, a client that
# cannot subscribe) or after a failed WAIT.
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


#: Every suffix :func:`sibling` is given: a lease key's waiter queue, semaphore limit,
#: fencing counter and a lock's readers (``inspect`` skips such keys, a force release refuses
#: them).
SUFFIXES = ("queue", "limit", "fence", "readers")
#: What a lock key holds while readers hold it (``lua/waiters.lua``): never a token.
SHARED_VALUE = "redlock-deco:shared"
#: How a reader's token ends (the queue tells waiting readers from writers by it).
READER_SUFFIX = "/r"


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
    queue: str  # the waiters, in arrival order
    limit: str | None = None  # semaphores: where the limit is kept for `inspect`
    fence: str | None = None  # fenced locks: the per-name fencing counter
    readers: str | None = None  # locks: their shared holders (token -> end of its lease)

    @classmethod
    def for_key(cls, key: str, kind: Kind | None = None, fencing: bool = False) -> Keys:
        return _keys(key, kind is not None and not kind.reentrant, fencing)

    def extra(self) -> tuple[str, ...]:
        """A semaphore's limit key, or a lock's readers key (the scripts' third key)."""
        if self.limit is not None:
            return (self.limit,)
        return () if self.readers is None else (self.readers,)


@functools.lru_cache(maxsize=4096)
def _keys(key: str, limited: bool, fencing: bool) -> Keys:
    """Key layouts are cached: a hot name is laid out once, not on every call."""
    queue, limit, fence, readers = (sibling(key, suffix) for suffix in SUFFIXES)
    if limited:
        return Keys(key, queue, limit, fence if fencing else None)
    return Keys(key, queue, None, fence if fencing else None, readers)


@dataclass(frozen=True, slots=True)
class Kind:
    """A primitive kind, declared once (:data:`KINDS`): its scripts, and everything the rest
    of the package reads about it -- how its first attempt may go, its default key prefix,
    what its lease key holds (how ``inspect`` and force release recognise it) and which
    bookkeeping keys beside it (:data:`SUFFIXES`) it may write.

    Adding a primitive is a kind here, its Lua (``lua/``), its class and its tests.
    """

    name: str  # what inspect and force release call it
    prefix: str  # the default ``prefix=`` of its decorator and class
    redis_type: str  # what its lease key is: "string" (a token lock) or "zset" (slots)
    siblings: tuple[str, ...]  # its bookkeeping keys' suffixes (see Keys)
    acquire_script: Script
    release_script: Script
    extend_script: Script
    owned_script: Script
    count_script: Script
    adopt_script: Script
    reentrant: bool
    shared: bool = False  # a reader of a token lock (see lua/waiters.lua)
    # The first attempt may be one plain SET NX PX, no script (see Claim.plain_step).
    plain_first: bool = False

    def count_step(self, key: str) -> Eval:
        return Eval(self.count_script, (key, *Keys.for_key(key, self).extra()), ("",))

    def token(self, unique: str) -> str:
        """An owner token of this kind from a process's ``unique`` one (``_tokens``): a
        reader's says so (the scripts tell readers from writers by it)."""
        return unique + READER_SUFFIX if self.shared else unique


LOCK = Kind(
    "lock",
    "lock:",
    "string",
    ("queue", "fence", "readers"),
    scripts.LOCK_ACQUIRE,
    scripts.LOCK_RELEASE,
    scripts.LOCK_EXTEND,
    scripts.LOCK_OWNED,
    scripts.LOCK_COUNT,
    scripts.LOCK_ADOPT,
    reentrant=True,
    plain_first=True,
)
#: A token lock taken in shared (read) mode: any number of readers, or one ``LOCK`` holder.
#: Its key is the lock's (``LOCK.prefix``): readers and writers of a name share it.
SHARED = Kind(
    "shared",
    "lock:",
    "string",
    ("queue", "fence", "readers"),
    scripts.SHARED_ACQUIRE,
    scripts.SHARED_RELEASE,
    scripts.SHARED_EXTEND,
    scripts.SHARED_OWNED,
    scripts.LOCK_COUNT,
    scripts.SHARED_ADOPT,
    reentrant=True,
    shared=True,
)
SEMAPHORE = Kind(
    "semaphore",
    "sem:",
    "zset",
    ("queue", "limit"),
    scripts.SEM_ACQUIRE,
    scripts.SEM_RELEASE,
    scripts.SEM_EXTEND,
    scripts.SEM_OWNED,
    scripts.SEM_COUNT,
    scripts.SEM_ADOPT,
    reentrant=False,  # each acquisition takes another slot
)
#: Every primitive kind; the operator tools, the ACL helper and ``inspect`` read this.
KINDS: tuple[Kind, ...] = (LOCK, SHARED, SEMAPHORE)


@dataclass(frozen=True, slots=True)
class Claim:
    """One attempt's identity: which lease, under which token, for how long."""

    kind: Kind
    keys: Keys
    token: str
    ttl_ms: int
    limit: int = 1
    replicas: int = 0  # replica acknowledgements (WAIT) required after acquiring
    # A grant is confirmed by asking the server before it is used: for a fencing token and
    # for replica acknowledgements, which only that answer carries.
    confirm: bool = False
    # PUBLISH counts prove a waiter's process gone (not on a cluster: they cover one node).
    counted: bool = True

    def plain_step(self) -> Call | None:
        """The first attempt as one plain ``SET NX PX`` (no script: the cheapest command
        there is), where nothing else is needed from it: a lock, unfenced, whose caller is
        prepared to wait (a try-once caller needs the script's check for an attempt that
        a client retry re-sent after it had landed)."""
        if not self.kind.plain_first or self.keys.fence is not None:
            return None
        args = ("SET", self.keys.key, self.token, "NX", "PX", self.ttl_ms)
        return Call(args, acquiring=True)

    @property
    def entry(self) -> str:
        """This waiter's queue entry: its token and its own terms (``lua/waiters.lua``'s
        ``entry``, which the acquire scripts build from the same arguments)."""
        return f"{self.token}|{self.ttl_ms}|{self.limit}"

    def _script(self, script: Script) -> Script:
        """``script``'s text for where this claim runs: PUBLISH counts prove nothing exactly
        on a Redis Cluster, whose slots can be moved (``Script.on_cluster``)."""
        return script.on(not self.counted)

    def acquire_step(self, mode: int = TRY) -> Eval:
        keys = self.keys
        args: tuple[str | int, ...] = (
            self.token, self.ttl_ms, mode, QUEUE_WINDOW_MS, HANDOFF_MS, int(self.counted),
            self.limit,
        )  # fmt: skip
        if keys.fence is not None:
            args = (*args, FENCE_KEEP_MS)
        fence = () if keys.fence is None else (keys.fence,)
        return Eval(
            self._script(self.kind.acquire_script),
            (keys.key, keys.queue, *keys.extra(), *fence),
            args,
        )

    def release_step(self, leaving: bool = False) -> Eval:
        """The release; ``leaving``: by a waiter giving up, which also leaves the queue."""
        keys = self.keys
        args = (self.token, HANDOFF_MS, int(self.counted), int(leaving), self.entry, self.limit)
        return Eval(
            self._script(self.kind.release_script),
            (keys.key, keys.queue, *keys.extra()),
            args,
        )

    def extend_step(self, ttl_ms: int) -> Eval:
        keys = (self.keys.key, *self.keys.extra())
        return Eval(self._script(self.kind.extend_script), keys, (self.token, ttl_ms))

    def owned_step(self) -> Eval:
        return Eval(
            self._script(self.kind.owned_script),
            (self.keys.key, *self.keys.extra()),
            (self.token,),
        )

    def adopt_step(self, held_by: str) -> Eval:
        """Take over the lease ``held_by`` holds, under this claim's token and ttl."""
        keys = (self.keys.key, *self.keys.extra())
        return Eval(self._script(self.kind.adopt_script), keys, (held_by, self.token, self.ttl_ms))


#: Each kind's acquire script, to undo an attempt from its step alone (see undo_step).
_BY_ACQUIRE = {
    kind.acquire_script.on(cluster): kind
    for kind in (LOCK, SHARED, SEMAPHORE)
    for cluster in (False, True)
}


def undo_step(step: Eval) -> Eval | None:
    """The release that undoes the acquire attempt ``step`` (leaving the queue too), or None
    if ``step`` is no acquire attempt. For a driver that gave up on the attempt's reply and
    stops using its connection: written behind it on that connection, it runs after the
    attempt whenever the server gets to them, never before (see _fanout)."""
    kind = _BY_ACQUIRE.get(step.script)
    if kind is None:
        return None
    token, ttl_ms, counted, limit = step.args[0], step.args[1], step.args[5], step.args[6]
    keys = Keys.for_key(step.keys[0], kind)
    claim = Claim(kind, keys, str(token), int(ttl_ms), int(limit), counted=counted == 1)
    return claim.release_step(leaving=True)


#: Each kind's release script: what only gives back (see gives_back).
_RELEASES = frozenset(
    kind.release_script.on(cluster)
    for kind in (LOCK, SHARED, SEMAPHORE)
    for cluster in (False, True)
)


def gives_back(step: Step) -> bool:
    """Whether ``step`` only gives back: a release, or a waiter leaving the queue (which
    passes on a hand-off that reached it). What an event loop's shutdown still sends once it
    has stopped taking (see drivers.AsyncTarget.stop)."""
    return type(step) is Eval and step.script in _RELEASES


#: The kinds a grant message names (``lua/waiters.lua``'s ``told``), by their letter.
GRANT_KINDS = {"L": LOCK, "R": SHARED, "S": SEMAPHORE}


def granted_claim(message: str, counted: bool = True) -> Claim | None:
    """The claim the grant ``message`` announced (``"<token> <kind> <key>"``), for a process
    where nobody waits for it any more: its release gives the grant back (comparing the
    token, and serving the queue on, as the grantee's own release would); None if it is no
    grant. Its ttl bounds the background retries of a give-back that was cut short."""
    token, kind_letter, key = [*message.split(" ", 2), "", ""][:3]
    kind = GRANT_KINDS.get(kind_letter)
    if kind is None or not key:
        return None
    return Claim(kind, Keys.for_key(key, kind), token, HANDOFF_MS, counted=counted)


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


def _fresh(claim: Claim, age: float) -> bool:
    """Can a grant be used as is, ``age`` seconds after our last attempt was sent (measured
    when it is used, not when it was read: a grant read by another thread while this one sat
    in a slow attempt -- a socket timeout, then the client's retry -- may be taken only much
    later, long after its lease ended and passed on; found by the simulator, seed 24009)?

    Not when the claim must confirm at once (:attr:`Claim.confirm`), nor when so much of the
    lease may have passed that the renewer could not take it on in time: a waiter whose
    process was stopped reads its grant only when it resumes, possibly long after the lease
    ended and the lock passed on. It confirms first (one round trip), which
    then finds out. (Nor once the waiter has asked again, see the caller: a grant read after
    that may predate the question -- its hand-off lease since passed on and the waiter queued
    anew -- and only the server can tell.)
    """
    return not claim.confirm and age < claim.ttl_ms / 1000 * FRESH_FRACTION


def remaining(wait: float | None, started: float, now: float) -> float | None:
    """What is left at ``now`` of ``wait`` (None: forever) since ``started``."""
    return None if wait is None else max(0.0, wait - (now - started))


def fast_granted(reply: Any, sent_at: float) -> Granted | None:
    """The lease, if :meth:`SingleNode.fast_try`'s attempt (sent at ``sent_at``) took it."""
    return None if reply is None else Granted(None, sent_at)


class Algorithms(Protocol):
    """The algorithm family a target runs: one node, or a quorum of masters."""

    def acquire(
        self,
        claim: Claim,
        wait: float | None,
        listening: bool = False,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        tried: bool = False,
    ) -> Steps[Acquired]: ...
    def fast_try(self, claim: Claim, wait: float | None, listening: bool) -> Call | None: ...
    def release(self, claim: Claim) -> Steps[bool | None]: ...
    def extend(self, claim: Claim, ttl_ms: int) -> Steps[bool]: ...
    def adopt(self, claim: Claim, held_by: str) -> Steps[bool]: ...
    def owned(self, claim: Claim) -> Steps[bool]: ...
    def holders(self, kind: Kind, key: str, limit: int = 1) -> Steps[int]: ...
    def abandon(self, claim: Claim) -> Steps[None]: ...


class SingleNode:
    """The algorithms on one Redis (a single server, a cluster, a Sentinel-managed primary)."""

    def acquire(
        self,
        claim: Claim,
        wait: float | None,
        listening: bool = False,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        tried: bool = False,
    ) -> Steps[Acquired]:
        """Take the lease until ``wait`` seconds have passed (None: forever, 0: once).

        ``tried``: the caller already sent :meth:`fast_try`'s attempt and found the lock
        busy; go on from there.

        ``listening``: hand-offs already reach this process on this server, so the first
        attempt queues at once if the lease is taken. Otherwise it only tries; a waiter then
        starts listening and queues with its next attempt (a grant published before anyone
        listens would be lost, and the waiter skipped as gone).

        A waiter registers for its grant *before* the attempt that may queue it: a grant then
        always finds its waiter registered, so one that finds nobody is one nobody waits for
        any more, which the subscriber gives back at once (a grantee interrupted between its
        attempt and its registration would otherwise hold the lock for its whole ttl).
        """
        deadline = math.inf if wait is None else clock() + wait
        # A plain attempt already made (tried) did not queue, whoever listens by now.
        mode = QUEUE if listening and wait != 0 and not tried else TRY
        registration: Any = None
        polling = wait == 0  # no hand-off can reach us: back off and try again
        failures = 0
        done = False  # took the lease, or left the queue with the server's answer
        plain = tried  # the caller's plain SET NX: its "busy" may be our own lease
        try:
            if mode == QUEUE:
                registration = yield Listen(claim.token, deadline - clock())
                if registration is None:
                    polling, mode = True, TRY
            while True:
                sent_at = clock()
                acked: Any = None
                if tried:
                    # Busy, as fast_try found; how long the holder has left is learnt by the
                    # queueing attempt.
                    tried, reply, code, lease_ms = False, None, 0, -1
                elif claim.replicas:
                    # Held on the primary only until enough replicas have the write too, or a
                    # failover could hand the lock to someone else (Redisson's safe mode).
                    timeout = min(REPLICA_WAIT_MAX, max(REPLICA_WAIT_MIN, deadline - clock()))
                    step = Replicated(claim.acquire_step(mode), claim.replicas,
                                      math.ceil(timeout * 1000))  # fmt: skip
                    reply, acked = yield step
                    code, lease_ms = reply[0], reply[1]
                else:
                    reply = yield claim.acquire_step(mode)
                    code, lease_ms = reply[0], reply[1]
                acquired = scripts.outcome("acquire", code) is Outcome.ACQUIRED
                unreplicated: int | None = None
                if acquired and claim.replicas and (acked is None or int(acked) < claim.replicas):
                    yield claim.release_step()  # too few copies: this attempt failed
                    acquired, lease_ms, unreplicated = False, -2, int(acked or 0)
                if acquired:
                    done = True
                    fence = reply[2] if type(reply) is list and len(reply) > 2 else None
                    return Granted(None if fence is None else int(fence), sent_at)
                if not polling and registration is None:
                    registration = yield Listen(claim.token, deadline - clock())
                    if registration is None:
                        polling, mode = True, TRY
                    elif mode == TRY:
                        mode = QUEUE  # listening now: queue at once
                        continue
                remaining = deadline - clock()
                if remaining <= 0:
                    if mode != TRY or plain:
                        # Leave the queue; a hand-off that reached us meanwhile is passed on.
                        # After a plain SET NX, too: a client retry that re-sent it after its
                        # reply was lost is answered "busy" by our own lease, which would
                        # otherwise keep the lock for its whole ttl (found by the simulator).
                        yield claim.release_step(leaving=True)
                    done = True
                    return NotGranted(unreplicated)
                # A holder that crashed sends no release: wake when its lease must have ended.
                bound = (
                    remaining if lease_ms < 0 else min(remaining, lease_ms / 1000 + EXPIRY_SLACK)
                )
                if polling or lease_ms == -2:
                    failures += 1
                    yield Sleep(min(bound, backoff(failures, rand)))
                    continue
                handed_at = yield Wait(registration, max(MIN_WAIT, min(bound, RECHECK)))
                if handed_at is not None and mode == QUEUE and _fresh(claim, clock() - sent_at):
                    # Woken up holding it, for our own ttl. Measured from our last attempt,
                    # which the grant must have followed: as early as the lease could have
                    # begun, like any acquire's.
                    done = True
                    return Granted(None, sent_at)
                # Ask the server: confirm a hand-off, or find one whose grant was lost, or
                # queue on (keeping our place).
                mode = AGAIN
        finally:
            if registration is not None:
                # Cut short (an exception, an interrupt) before the queue entry could be
                # taken out: a grant for it is given back by the subscriber (see _waiting).
                registration.close(not done)

    def fast_try(self, claim: Claim, wait: float | None, listening: bool) -> Call | None:
        """The lean path: a first attempt for the caller to send itself (no generator, no
        step objects beyond it) when nobody of ours listens on this server (no contention
        lately): one plain ``SET NX PX``, whose success alone grants the lease -- see
        :func:`fast_granted`. Busy: run ``acquire(..., tried=True)``. None where the first
        attempt must be a script (fenced, try-once, contended lately) or a success needs
        more (replica acknowledgements): ``acquire`` alone then."""
        if listening or wait == 0 or claim.replicas:
            return None
        return claim.plain_step()

    def release(self, claim: Claim) -> Steps[bool]:
        """Give the lease back; False if it was no longer ours (nothing was touched then).

        "Gone" counts as no longer ours: a server that restarted without its data lost the
        lease, and saying so matters more than the one false alarm it costs -- a release
        re-sent by a client's retry policy after its reply was lost. (Clients built from
        URLs count what they re-send, and the guard judges such a release by the holder's
        clock: see providers.CountedRetry.)
        """
        code = yield claim.release_step()
        return scripts.outcome("release", code) is Outcome.RELEASED

    def extend(self, claim: Claim, ttl_ms: int) -> Steps[bool]:
        """Reset the lease to ``ttl_ms``; False if it was no longer ours."""
        code = yield claim.extend_step(ttl_ms)
        return scripts.outcome("extend", code) is Outcome.EXTENDED

    def adopt(self, claim: Claim, held_by: str) -> Steps[bool]:
        """Take over the lease the token ``held_by`` holds now, as ``claim``; False if it
        holds none."""
        code = yield claim.adopt_step(held_by)
        return scripts.outcome("adopt", code) is Outcome.ADOPTED

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
        yield claim.release_step(leaving=True)


SINGLE = SingleNode()

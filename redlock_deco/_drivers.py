"""Drivers: execute the protocol core's steps on a real client. They only do I/O.

What a step means on the wire is decided once, by :func:`command` and :func:`fallback`; the
sync and asyncio drivers below are the same dozen lines, one with ``await``. Scripts run with
EVALSHA and fall back to EVAL on NOSCRIPT (a restarted or flushed server forgot the script;
EVAL runs it and caches it again).

Waiting (:class:`~redlock_deco._protocol.Listen`, :class:`~redlock_deco._protocol.Wait`) takes
no pooled connection per waiter: the target's one subscriber (:mod:`redlock_deco._waiting`)
hears every hand-off for this process.

Connection lanes (:func:`lane_sizes`): a client's pool has a fixed number of connections
(redis-py 8: 100, and a full non-blocking pool *raises*). 120 waiters blocked in BLPOP once
left a holder's release failing with "Too many connections" and the lock stuck for its ttl.
Commands are therefore sorted into lanes, each with its own share of the pool: *holding*
(release, extend, renew, owned: a reserve acquirers can never take) and *acquiring*
(attempts); one connection is kept for the subscriber.

Why one module: what a step means on the wire (commands, fallbacks, lanes, direct writes) and
both drivers that send it, read side by side so the sync and asyncio targets cannot drift.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import importlib
import inspect
import os
import queue
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from types import FunctionType
from typing import Any, Protocol, TypeVar

import redis
from redis.exceptions import (
    AskError,
    ClusterError,
    MovedError,
    NoScriptError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from . import _waiting as waiting
from ._errors import ProviderError
from ._pools import (
    UNBOUNDED_POOL,
    WholeConnect,
    counting,
    guard,
    guard_async_nodes,
    guard_nodes,
    made_whole,
    mark_single,
    remember_single,
    uncached,
)
from ._protocol import (
    SINGLE,
    Acquired,
    Algorithms,
    Call,
    Claim,
    Eval,
    Listen,
    Replicated,
    Sleep,
    Step,
    Steps,
    Wait,
    fast_granted,
    gives_back,
    remaining,
    took,
)
from ._worker import Lanes

T = TypeVar("T")
Args = tuple[str | int, ...]


def command(step: Step) -> Args:
    """The Redis command that carries out ``step``."""
    if type(step) is Eval:
        return ("EVALSHA", step.script.sha, len(step.keys), *step.keys, *step.args)
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


# Pools at least UNBOUNDED_POOL large (_pools) are practically unbounded. We still bound our
# own use of them, as if they had redis-py 6's default size: otherwise 1,000 waiters starting
# at once open a connection each for their first attempt (and run out of file descriptors),
# where a bounded pool lets them take turns.
ASSUMED_POOL = 100


def pool_size(client: Any) -> int | None:
    """How many connections of ``client``'s pool we may use (None: not a pooled client)."""
    size = getattr(getattr(client, "connection_pool", None), "max_connections", None)
    if not isinstance(size, int) or size <= 0:
        return None
    return size if size < UNBOUNDED_POOL else ASSUMED_POOL


# How long a thread waits for a place in a connection lane before it raises (never a hang):
# a place is held for one command, and no interrupt loses one (see Places), so only a
# command that does not end keeps one out this long.
PLACE_WAIT = 60.0


class Places:
    """``n`` places for threads, taken and given back in C (``queue.SimpleQueue``):
    ``threading.BoundedSemaphore`` is written in Python and cost two of its lock round trips
    on every command of the uncontended path.

    Taken inside the ``try`` whose ``finally`` gives it back: a KeyboardInterrupt raised as
    ``acquire`` returned once lost a place for good, and with the holding lane empty every
    release and renewal of the process blocked forever (review 4, r03). Given back by one C
    call with no Python frame of its own (``release`` is a ``functools.partial`` of the
    queue's ``put``): a signal is raised as a Python function starts, and a Ctrl-C at the
    start of a ``release`` written in Python lost the place -- a holding lane of one then made
    every renewal and release of the process, the interrupt's own clean-up first, wait
    PLACE_WAIT (review 96, F1). A release whose acquire was interrupted before it took a
    place gives back one it never had: the next ``acquire`` that finds more than ``n - 1``
    places free while it holds one drops the surplus (until then the lane is one wider, the
    client's pool still bounding it: an error, never a hang)."""

    __slots__ = ("_free", "_n", "release")

    def __init__(self, n: int) -> None:
        self._n = n
        self._free: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(n):
            self._free.put(None)
        self.release: Callable[[], None] = functools.partial(self._free.put, None)

    def acquire(self) -> None:
        free = self._free
        try:
            free.get(timeout=PLACE_WAIT)
        except queue.Empty:
            raise redis.exceptions.ConnectionError(
                f"no connection of this client's lane came free within {PLACE_WAIT:g} s: "
                "every one is busy with a command that does not end (a stalled server and a "
                "client without socket_timeout?), or was lost to an interrupt in the middle "
                "of its clean-up"
            ) from None
        # Free places and places held add up to n, but for a surplus: with one held (ours),
        # n free means one too many. (Other threads' gets and puts move places between the
        # two and leave the sum as it is, so no place in use is ever dropped here.)
        while free.qsize() >= self._n:
            try:
                free.get_nowait()
            except queue.Empty:
                break


def lane_sizes(pool: int) -> tuple[int, int]:
    """(holding, acquiring) places of a pool of ``pool`` connections, one left for the
    subscriber: together never more than the pool (at least one each)."""
    holding = max(1, min(16, (pool - 1) // 4))
    return holding, max(1, pool - 1 - holding)


def make_lanes(pool: int | None, semaphore: Any) -> list[Any] | None:
    """One ``semaphore(n)`` per lane (None for an unbounded pool). A pool of 1 or 2 has no
    connection to spare for a subscriber (waiters poll there instead: see
    :func:`can_listen`); a single connection is shared by holders and acquirers."""
    if pool is None:
        return None
    if pool >= 3:
        return [semaphore(n) for n in lane_sizes(pool)]
    shared = semaphore(1)
    return [semaphore(1) if pool == 2 else shared, shared]


def can_listen(client: Any) -> bool:
    """Can hand-offs reach waiters through ``client``: it subscribes, and its pool spares a
    connection for that."""
    pool = pool_size(client)
    return waiting.supported(client) and (pool is None or pool >= 3)


def is_cluster(client: Any) -> bool:
    return hasattr(client, "get_node_from_key")


# A cluster slot being migrated refuses a script whose keys are split between its two nodes
# (TRYAGAIN): redis-py's cluster client tries again for about 0.1 s, then raises
# ClusterError("TTL exhausted."), having run nothing. Our scripts take several keys of one
# slot (the lock, its queue, its fence), where a single-key command would have followed the
# ASK redirect; a completed body's release failed with a redis error, and the lock was left
# to its ttl (review 33). Such a step is sent again for this long, this often.
MIGRATION_PATIENCE = 2.0
MIGRATION_RETRY = 0.05


# Not for the renewer's rounds: renewals of a target share a few threads, and a round that waited
# out a migration held up every other lease of the target behind it -- a lock on another node,
# nothing to do with the move, was lost (review 34, 03). A renewal refused so is tried again
# at its next round, and a lease whose slot stays refused past its ttl is reported lost.
_patient: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "redlock_deco_patient", default=True
)


@contextlib.contextmanager
def impatient() -> Iterator[None]:
    """Steps sent inside are not sent again while their slot migrates (the renewer's)."""
    _patient.set(False)
    try:
        yield
    finally:
        # set, not reset by token: a round closed at a loop's shutdown runs this in another
        # context, where a token's reset raises ValueError (as _providers' _UNWRITTEN).
        _patient.set(True)


def refused_while_migrating(exc: BaseException) -> bool:
    """Was ``exc`` a cluster's refusal that ran nothing (every try redirected or TRYAGAIN)?"""
    return isinstance(exc, TryAgainError) or (
        type(exc) is ClusterError and str(exc) == "TTL exhausted."
    )


def still_moving(exc: ResponseError) -> ClusterError:
    """What a step refused for longer than MIGRATION_PATIENCE raises: redis-py's ClusterError,
    as a script redis-py's cluster client sent does (GUARANTEES). A replicated attempt, on its
    own connection to the key's node, meets the TRYAGAIN or ASK itself, and raised that
    (redis-py's ResponseError kinds, which a caller catching ClusterError missed)."""
    return ClusterError(f"the slot stayed in migration for {MIGRATION_PATIENCE} s: {exc}")


def lane_of(step: Step) -> int:
    """0 holding, 1 acquiring."""
    if type(step) is Replicated:
        return 1
    if type(step) is Eval:
        return 1 if step.script.waiting else 0
    return 1 if type(step) is Call and step.acquiring else 0


def pack_text(args: Args) -> bytes:
    """``args`` as one RESP command (UTF-8 text, as redis-py's default encoder writes it)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = str(arg).encode() if type(arg) is int else arg.encode()  # type: ignore[union-attr]
        parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


def _hiredis_pack() -> Callable[[Args], bytes] | None:
    """hiredis's ``pack_command`` where it is installed (redis-py's optional parser): the same
    bytes as :func:`pack_text` (tests/core checks them side by side), in a third of the time
    (2.5 us a command here, against 7.5: ~5% of an uncontended call)."""
    try:  # by name: it is optional, and where it is absent there is nothing to type-check
        hiredis = importlib.import_module("hiredis")
    except ImportError:
        return None
    packed: Callable[[Args], bytes] | None = getattr(hiredis, "pack_command", None)
    return packed


#: ``args`` as one RESP command: hiredis's packing where it is installed, else ours.
pack: Callable[[Args], bytes] = _hiredis_pack() or pack_text


def checkout(pool: Any, into: list[Any]) -> Any:
    """``pool.get_connection()``, as this redis-py wants it called, appended to ``into``
    before it is returned: an interrupt as this function returned kept the connection out
    of the pool for good, its caller never having stored it (review 4, r03)."""
    into.append(
        pool.get_connection("EVALSHA") if _takes_command_name(pool) else pool.get_connection()
    )
    return into[-1]


_NAMED: dict[type, bool] = {}  # pool class -> its get_connection requires a command name


# How many idle connections a direct pool keeps out of redis-py's pool between commands.
SPARES = 2


class Spares:
    """A few connections of one pool, each in a slot of its own, reused by direct commands
    without going through the pool.

    redis-py's checkout and return cost about as much client CPU as the round trip itself
    (redis-py 8: a health read with two timeout changes, connection-count metrics and an
    event dispatch, each way), and a contended critical section pays them twice. A slot's
    connection is checked out once, on first use, and kept: a thread claims the slot (a
    non-blocking lock), polls the socket once instead of the pool's health read -- anything
    to read (the server closed it, or a push came), or a reconnect redis-py asks for, and it
    is disconnected and connected again, as the pool's checkout does -- and frees the slot.
    A thread that finds every slot busy uses the pool as before.

    Only for a pool of redis-py's default size or larger (see :func:`spares_for`): kept
    connections are taken out of our own lanes, so the pool's limit holds, but they are also
    out of the application's reach, which a pool it sized itself must not lose. Slots, not a
    stack of idle connections: a connection never moves between two lists, so an interrupt
    can never leave it in neither (the interrupt-at-every-line test found that window between
    a ``pop`` and an ``append``); an interrupt as a slot's lock is taken loses that slot, a
    loss bounded by the number of slots. A retired target (its provider registered again)
    gives every slot's connection back, a busy one as its command ends (review 7: a release
    through a retired target filled a slot nobody returned, and the pool ran out). A forked
    child empties every slot at fork time: the parent's are its parent's sockets.
    """

    __slots__ = ("__weakref__", "_closed", "_disconnect", "_locks", "_slots", "pool")

    def __init__(self, pool: Any, keep: int) -> None:
        self.pool = pool
        self._closed = False
        self._disconnect = False
        self._empty(keep)
        _ALL_SPARES.add(self)

    def _empty(self, keep: int) -> None:
        self._locks = [threading.Lock() for _ in range(keep)]
        self._slots: list[list[Any]] = [[] for _ in range(keep)]  # each: [] or [connection]

    def claim(self, into: list[int]) -> int:
        """The index of a slot claimed for this thread, also appended to ``into`` (for the
        caller's ``finally``, whatever interrupts it); -1 if every slot is busy, or closed."""
        if self._closed:
            return -1
        for index, lock in enumerate(self._locks):
            if lock.acquire(blocking=False):
                into.append(index)
                return index
        return -1

    def connection(self, index: int) -> Any:
        """The connection of the claimed slot ``index``, ready for a command."""
        slot = self._slots[index]
        if not slot:
            return checkout(self.pool, slot)  # kept in the slot from the moment it is out
        conn = slot[0]
        # Closed first if it owes a reply: a slot never goes back through the pool's release,
        # which marks one so, and a reply still on its way is not readable yet -- an
        # interrupt between a write and its read, then another on the clean-up's disconnect,
        # left a slot owing an OK that the next acquire read (review 50, R5).
        counted = counting(conn)
        try:
            sock = conn._sock
            stale = sock is not None and readable(sock)
            stale = stale or bool(getattr(conn, "should_reconnect", bool)())
            stale = stale or (
                counted is not None and bool(counted._owed or counted._stale or counted._unfit)
            )
        except (OSError, ValueError):  # closed under us (pool.disconnect from another thread)
            stale = True
        if stale:
            conn.disconnect()
        if conn._sock is None:
            # Connected here, as the pool's checkout connects, outside the command's retries:
            # a server that refuses connections fails the call once, not once per retry.
            conn.connect()  # (cut short, it closes itself: see _pools)
        return conn

    def free(self, index: int) -> None:
        """Free the claimed slot ``index``; on a closed target, give its connection back."""
        lock = self._locks[index]
        lock.release()
        # Checked after the release: close() either finds the slot free, or has set
        # _closed before trying it, which this sees.
        if self._closed and lock.acquire(blocking=False):
            self._give_back(index)

    def connections(self) -> list[Any]:
        """The connections the slots keep (for tests and the clean-up)."""
        return [conn for slot in self._slots for conn in slot]

    def close(self, disconnect: bool = False) -> None:
        """The target is retired: no slot is used again, and every slot's connection goes
        back to the pool, now if the slot is free, else as its command frees it; closed
        first if ``disconnect`` (the client is the target's own)."""
        self._disconnect = disconnect
        self._closed = True
        for index, lock in enumerate(self._locks):
            if lock.acquire(blocking=False):
                self._give_back(index)

    def _give_back(self, index: int) -> None:
        """Return slot ``index``'s connection (its lock held, for good: the slot is done)."""
        slot = self._slots[index]
        if slot:
            if self._disconnect:
                slot[0].disconnect()
            self.pool.release(slot[0])
            slot.clear()


def spares_for(pool: Any, size: int | None) -> int:
    """How many spare connections a direct pool of ``size`` may keep: SPARES for a pool of
    redis-py's default size or an unbounded one, none for a pool the application sized
    itself (its connections stay within its reach), one with client-side caching (its
    connections are proxies), or one whose credentials renew (a returned connection is
    re-authenticated: the pool's release is where that happens)."""
    if pool is None or size is None or size < ASSUMED_POOL:
        return 0
    if getattr(pool, "cache", None) is not None:
        return 0
    if pool.connection_kwargs.get("credential_provider") is not None:
        return 0
    return SPARES


_ALL_SPARES: weakref.WeakSet[Spares] = weakref.WeakSet()


def _forked() -> None:
    """In a forked child (one thread): every slot empty, none of the parent's sockets."""
    for spares in list(_ALL_SPARES):
        spares._empty(len(spares._locks))


os.register_at_fork(after_in_child=_forked)


def readable(sock: Any) -> bool:
    """Has ``sock`` anything to read (data, or the peer's close), without waiting? ``poll``
    where there is one: ``select`` refuses a descriptor above 1,023, which a process with many
    open files gives its sockets. Looked up at each call, not at import: eventlet's
    ``monkey_patch()``, run after this module was imported, removes ``select.poll`` (peer
    suites: every release and renewal then raised AttributeError and left the lock held)."""
    poll = getattr(select, "poll", None)
    if poll is not None:
        poller = poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select((sock,), (), (), 0)[0])


def _takes_command_name(pool: Any) -> bool:
    """redis-py before 5.3 requires ``get_connection(command_name)``; later ones warn on it."""
    kind = type(pool)
    named = _NAMED.get(kind)
    if named is None:
        named = _NAMED[kind] = _requires_command_name(kind)
    return named


def _requires_command_name(kind: type) -> bool:
    """Read from the first ``get_connection`` up ``kind``'s classes that names its
    parameters: a subclass's ``get_connection(self, *args, **kwargs)`` passes them on to
    redis-py's, and taken as needing none, every lock call on such a pool raised TypeError
    on redis-py before 5.3 (test_topologies' FifoPool, on redis-py 5.0)."""
    for klass in kind.__mro__:
        method = vars(klass).get("get_connection")
        if method is None:
            continue
        try:
            parameters = inspect.signature(method).parameters
        except (TypeError, ValueError):  # pragma: no cover - a pool without a signature
            return False
        parameter = parameters.get("command_name")
        if parameter is not None:
            return parameter.default is inspect.Parameter.empty
        if not any(each.kind is inspect.Parameter.VAR_POSITIONAL for each in parameters.values()):
            return False
    return False


def one_connection(client: Any, key: str) -> Any:
    """A client of ``client``'s pool (on a cluster: of ``key``'s node) bound to one connection
    until closed, for commands whose meaning depends on the connection (WAIT)."""
    if is_cluster(client):
        client = client.get_redis_connection(client.get_node_from_key(key))
    return client.client()


# How many commands this thread or task re-sent under a client's retry policy (a ContextVar:
# each thread, and each asyncio task, counts its own). A release re-sent after a connection
# reset that followed its run finds the lease gone -- it ran the first time -- and its holder,
# told so, would report a LockLost for a call protected to its end (review 5, r01); the guard
# then decides by the holder's own clock instead (see guard._released). URL clients count
# through their retry policy (providers.CountedRetry), the direct path below by itself.
_RESENT: contextvars.ContextVar[int] = contextvars.ContextVar("redlock_deco_resent", default=0)


def resent() -> int:
    return _RESENT.get()


def count_resent() -> None:
    _RESENT.set(_RESENT.get() + 1)


def roundtrip(conn: Any, args: Args) -> Any:
    """One command on ``conn``, written and read directly, retried as the connection's own
    retry policy says (a pooled connection a proxy dropped silently fails on first use, and
    a URL client retries that once), each re-sending counted (``resent()``)."""
    packed = [pack(args)]

    def attempt() -> Any:
        conn.send_packed_command(packed)
        return conn.read_response()

    def failed(_error: BaseException) -> None:
        count_resent()  # sent again next (or, out of retries, the caller gets the error)
        conn.disconnect()

    policy = conn.retry
    kind = type(policy)
    plain = _RETRY_KINDS.get(kind)
    if plain is None:  # (Retry is an abstract class's: isinstance is slow, and asked once)
        plain = _RETRY_KINDS[kind] = isinstance(policy, Retry)
    if plain:
        # redis-py's own loop, without a counting wrapper's (providers.CountedRetry) closure
        # and frame on every command: this path is the uncontended lock's.
        return Retry.call_with_retry(policy, attempt, failed)
    return policy.call_with_retry(attempt, failed)


_RETRY_KINDS: dict[type, bool] = {}  # retry policy class -> a redis.retry.Retry?


def _single_is_safe(client: Any) -> bool:
    """Not a sync single-connection client without a lock of its own (redis-py < 5.1)."""
    return getattr(client, "connection", None) is None or hasattr(client, "single_connection_lock")


def _single_without_lock(client: Any) -> ProviderError:
    return ProviderError(
        f"{type(client).__name__} was made with single_connection_client=True, and on "
        f"redis-py {redis.__version__} such a client has no lock of its own: the library's "
        "commands (its renewals come from a thread of its own) and the application's would "
        "share its one connection at once and read each other's replies. Use redis-py 5.1 "
        "or later, or a client on a connection pool (single_connection_client=False)"
    )


def direct_pool(client: Any) -> Any:
    """The pool whose connections the scripts may be written to directly, or None.

    Only a plain ``redis.Redis`` on a standard pool with the default encoding: for those,
    ``execute_command``'s per-call work (argument encoding, retry and observability
    wrappers) cost about as much client CPU as the round trip itself (measured: 60 µs a
    command against 36 µs written directly), on the path every acquire and release takes.
    Anything else (cluster, Sentinel, custom classes) goes through the client as usual.
    """
    pool: Any = getattr(client, "connection_pool", None)
    if type(client) is not redis.Redis or type(pool) not in (
        redis.ConnectionPool,
        redis.BlockingConnectionPool,
    ):
        return None
    encoding = str(pool.connection_kwargs.get("encoding", "utf-8"))
    return pool if encoding.replace("-", "").lower() == "utf8" else None


_seen: tuple[object, bool] = (None, False)  # redis.Redis.execute_command last seen, and traced?


def _is_redis_pys_own(method: object) -> bool:
    """True for redis-py's own ``Redis.execute_command``: a plain function whose code is in
    redis/client.py. A wrapt proxy (OpenTelemetry, ddtrace) is no plain function, and a
    replacement (Sentry's), even one made with ``functools.wraps``, has code of its own."""
    if type(method) is not FunctionType:  # (isinstance: a wrapt proxy passes for its function)
        return False
    code = method.__code__
    return code.co_name == "execute_command" and code.co_filename.endswith(_REDIS_CLIENT_FILE)


_REDIS_CLIENT_FILE = os.path.join("redis", "client.py")


def traced(client: Any) -> bool:
    """True when something wraps this client's ``execute_command`` -- OpenTelemetry's,
    ddtrace's or Sentry's redis integration, or one of the application's own -- on its class
    or on the client itself. Its commands then go through it, so that tracing sees them as it
    sees any other; only a client nobody wraps is written to directly (direct_pool). Checked
    on every command (a class lookup and an identity test, ~0.1 us): instrumentation is often
    switched on after the client was made, and can be switched off again."""
    global _seen
    method = vars(redis.Redis).get("execute_command")
    if method is not _seen[0]:
        _seen = (method, not _is_redis_pys_own(method))
    return _seen[1] or "execute_command" in vars(client)


class SyncTarget:
    """One sync client and what the driver derives from it once."""

    __slots__ = (
        "checked", "client", "cluster", "counted", "direct", "lanes", "owned", "renewal_worker",
        "spares", "waiting",
    )  # fmt: skip
    algorithms: Algorithms = SINGLE

    def __init__(self, client: Any, *, owned: bool = False) -> None:
        own = uncached(client)  # (see _pools: client-side caching is in the scripts' way)
        if own is not None:
            # The application's own pool guarded all the same: its calls are protected as
            # any other client's (see _pools).
            guard(client.connection_pool, asynchronous=False)
            client, owned = own, True
        self.client = client
        guard(getattr(client, "connection_pool", None), asynchronous=False)  # see _pools
        guard_nodes(client)  # (a cluster's)
        self.owned = owned  # built here from a URL: ours to disconnect when retired
        self.direct = direct_pool(client)
        if (self.direct is None or traced(client)) and not _single_is_safe(client):
            # (refused here, before any acquire: refused at its first command, a call's
            # clean-up was queued and logged the refusal every half second until its ttl --
            # review 55, F3)
            raise _single_without_lock(client)
        remember_single(client)  # (its lock a new one in a forked child)
        size = pool_size(client)
        keep = spares_for(self.direct, size)
        self.spares = Spares(self.direct, keep) if keep else None
        self.lanes = make_lanes(None if size is None else size - keep, Places)
        self.renewal_worker: Lanes | None = None  # _renewal.py's, created on demand
        self.checked = False  # the first-use server check (eviction policy) has run
        self.cluster = is_cluster(client)
        self.counted = not self.cluster
        self.waiting = waiting.SyncWaiting(self, self.counted) if can_listen(client) else None

    @property
    def listening(self) -> bool:
        return self.waiting is not None and self.waiting.listening

    def retire(self) -> None:
        """This target was replaced (its provider registered again): let its thread go."""
        if self.renewal_worker is not None:
            self.renewal_worker.retire()
        if self.spares is not None:
            self.spares.close(disconnect=self.owned)  # a busy slot's connection: once freed
        if self.waiting is not None:
            self.waiting.retire()
        if self.owned:
            # Idle connections, the slots' included, closed now: redis-py 8's pools and
            # connections refer to each other, so a retired client waits for the cycle
            # collector, which may close a socket before its connection (a ResourceWarning,
            # an error under -W error). Connections in use close as usual, with their client.
            self.client.connection_pool.disconnect(inuse_connections=False)

    def execute(self, step: Step) -> Any:
        kind = type(step)
        if kind is Wait:
            return step.registration.wait(step.timeout)  # type: ignore[union-attr]
        if kind is Listen:
            if self.waiting is None:
                return None
            return self.waiting.listen(step.token, step.timeout)  # type: ignore[union-attr]
        if kind is Sleep:
            time.sleep(step.seconds)  # type: ignore[union-attr]
            return None
        send = self._send_patiently if self.cluster and _patient.get() else self._send
        if self.lanes is None:
            return send(step)
        lane = self.lanes[lane_of(step)]
        try:
            lane.acquire()
            return send(step)
        finally:
            lane.release()

    def _send_patiently(self, step: Step) -> Any:
        """:meth:`_send` on a cluster, sent again while its slot migrates (see
        MIGRATION_PATIENCE)."""
        give_up = time.monotonic() + MIGRATION_PATIENCE
        while True:
            try:
                return self._send(step)
            except (ClusterError, TryAgainError) as exc:
                if not refused_while_migrating(exc):
                    raise
                if time.monotonic() >= give_up:
                    if isinstance(exc, TryAgainError):  # (a replicated attempt's own)
                        raise still_moving(exc) from exc
                    raise
            except AskError as exc:  # (and MovedError, its subclass)
                if type(step) is not Replicated:
                    raise
                if time.monotonic() >= give_up:
                    raise still_moving(exc) from exc  # (not AskError: GUARANTEES)
                # The replicated attempt's own connection to the key's node: redis-py's
                # redirects are not followed there, and MovedError/AskError reached the caller
                # after a reshard or during a move (review 58). Nothing ran: the slot map is
                # learnt again (after a MOVED: an ASK leaves it right), and the attempt sent
                # again while the move lasts.
                if isinstance(exc, MovedError):
                    self.client.nodes_manager.initialize()
            time.sleep(MIGRATION_RETRY)

    def _send(self, step: Step) -> Any:
        if type(step) is Replicated:
            return self._send_replicated(step)
        if type(step) is Call and step.route is not None:
            return self.client.execute_command(*step.args, **routing(self.client, step))
        if self.direct is not None and not traced(self.client):
            try:
                return self._send_direct(command(step))
            except NoScriptError:
                # The same path, not execute_command: on redis-py 5 that does not retry a
                # pooled connection a restart or a proxy left dead, and the first script after
                # a flushed cache failed there though its EVALSHA had reconnected (CI, 3.10).
                return self._send_direct(fallback(step))
        if getattr(self.client, "connection", None) is not None:
            return self._send_single(step)
        try:
            return self.client.execute_command(*command(step))
        except NoScriptError:
            return self.client.execute_command(*fallback(step))

    def _send_single(self, step: Step) -> Any:
        """A step through a client made with ``single_connection_client=True``: its one
        connection never goes back to a pool, so nothing marks it when an interrupt between a
        command's write and its read (ours or the application's) leaves a reply on it (see
        _pools), and the next acquire read that reply as its own -- a second holder (review
        44, N2). Under the client's own lock no command is under way, so a reply owed now is
        an interrupted command's: the connection is closed first. So is one whose count was
        never kept, the library having made it whole while it was the client's (at its first
        call): an application command cut before then left its reply, and the first acquire
        -- a bare ``SET NX``, which any reply but nil grants -- read that ``OK``, and every
        later one the reply before its own (review 54, F1: a second holder each time). One
        reconnect, once: a WATCH or SELECT the application sent on it by hand before the
        library's first call is lost with it (GUARANTEES)."""
        client = self.client
        lock = getattr(client, "single_connection_lock", None)  # (redis-py >= 5.1)
        if lock is None:
            raise _single_without_lock(client)  # (traced since the target was made)
        with lock:
            conn = client.connection
            # Made whole here if the pool's guard never saw it: a pool reset after the client
            # took its connection (a forked child's at its first pooled command, or the
            # application's reset()) left it out of the lists the guard looks at, plain, its
            # cut commands' replies uncounted -- the next acquire read an ``OK`` as its own
            # (review 61, F1: a second holder). Made whole now, its count unknown: closed once.
            counted = None if conn is None else made_whole(conn, WholeConnect, idle=False)
            if counted is not None and (
                counted._owed or counted._stale or counted._unfit or counted._unknown
            ):
                conn.disconnect()  # (through a caching proxy: it empties its cache)
            if counted is not None:
                # (from now on it closes itself at a write owing a reply, whoever writes: the
                # application's next command after its own cut one read that reply -- the
                # reply search's single-connection kind; review 52's R52-3 on asyncio)
                counted._single = True
            try:
                return client.execute_command(*command(step))
            except NoScriptError:
                return client.execute_command(*fallback(step))

    def _send_direct(self, args: Args) -> Any:
        """One command on a pooled connection, written and read directly (see direct_pool).

        A connection that failed mid-command is closed before it goes back to the pool, so
        no later command can read its reply. One that answered with an error is in a clean
        state and reused.
        """
        spares = self.spares
        if spares is not None:
            claimed: list[int] = []  # the slot claimed, if any (see Spares.claim)
            try:
                index = spares.claim(claimed)
                if index >= 0:
                    conn = spares.connection(index)
                    try:
                        return roundtrip(conn, args)
                    except ResponseError:
                        raise
                    except BaseException:
                        conn.disconnect()  # a reply may still be on its way (see below)
                        raise
            finally:
                for index in claimed:
                    spares.free(index)
        pool = self.direct
        out: list[Any] = []  # the connection taken, if any (see checkout)
        try:
            return roundtrip(checkout(pool, out), args)
        except ResponseError:
            raise  # an answer: the connection is in a clean state
        except BaseException:
            for conn in out:
                conn.disconnect()  # a reply may still be on its way: never read it as another's
            raise
        finally:
            for conn in out:
                pool.release(conn)

    def _send_replicated(self, step: Replicated) -> Any:
        """The attempt, then (if it took the lease) WAIT, on one connection."""
        attempt = step.step
        if self.direct is not None and not traced(self.client):
            pool = self.direct
            out: list[Any] = []  # the connection taken, if any (see checkout)
            try:
                conn = checkout(pool, out)
                sock = conn._sock
                try:
                    reply = roundtrip(conn, command(attempt))
                except NoScriptError:
                    reply = roundtrip(conn, fallback(attempt))
                acked = None
                if took(reply):
                    try:
                        acked = roundtrip(conn, step.wait_command(conn.socket_timeout))
                    except RedisTimeoutError:
                        conn.disconnect()  # (WAIT's reply still to come)
                        acked = 0  # (see too_slow)
                return reply, confirmed(acked, conn._sock is sock)
            except ResponseError:
                raise
            except BaseException:
                for taken in out:
                    taken.disconnect()
                raise
            finally:
                for taken in out:
                    pool.release(taken)
        single = one_connection(self.client, attempt.keys[0])
        try:
            sock = single.connection._sock
            try:
                reply = single.execute_command(*command(attempt))
            except NoScriptError:
                reply = single.execute_command(*fallback(attempt))
            acked = None
            if took(reply):
                waiting = step.wait_command(single.connection.socket_timeout)
                with too_slow():
                    acked = 0  # (if WAIT's reply comes too late)
                    acked = single.execute_command(*waiting)
            return reply, confirmed(acked, single.connection._sock is sock)
        finally:
            single.close()


def too_slow() -> contextlib.AbstractContextManager[object]:
    """Around a replicated attempt's WAIT: its reply not read within the socket's timeout
    counts as no copy (the lease is given back, and the attempt tried again within
    ``wait``). Raised, it ended the call at its first attempt with TimeoutError: the server
    ends a WAIT only at its next cron tick, up to 100 ms late (review 60)."""
    return contextlib.suppress(RedisTimeoutError)


def confirmed(acked: Any, same_socket: bool) -> Any:
    """WAIT's count, or 0 when the connection was replaced between the attempt's first
    sending and WAIT's reply (a retry's reconnect, a fitness check): WAIT counts only its
    own socket's writes, and on a new socket that has written nothing Valkey counts every
    replica at once (review 10, 01: an acquisition no replica had was confirmed; Redis
    answers 0 there). 0 gives the lease back as not replicated: the safe side."""
    return acked if same_socket or acked is None else 0


class AsyncTarget:
    """One ``redis.asyncio`` client (bound to one event loop) and what derives from it."""

    __slots__ = (
        "busy", "checked", "client", "closed", "cluster", "counted", "lanes", "sealed", "sending",
        "waiting",
    )  # fmt: skip
    algorithms: Algorithms = SINGLE

    def __init__(self, client: Any) -> None:
        self.client = client
        guard(getattr(client, "connection_pool", None), asynchronous=True)  # see _pools
        self.lanes = make_lanes(pool_size(client), asyncio.BoundedSemaphore)
        self.checked = False
        self.busy = 0  # algorithms running on it now (see run_async)
        self.closed = False  # its loop's shutdown stopped it: it only gives back (see stop)
        self.sealed = False  # its loop's shutdown is closing the client: it sends nothing
        self.sending = 0  # commands in flight on it now
        self.cluster = is_cluster(client)
        self.counted = not self.cluster
        self.waiting = waiting.AsyncWaiting(self, self.counted) if can_listen(client) else None

    @property
    def listening(self) -> bool:
        return self.waiting is not None and self.waiting.listening

    def stop(self) -> None:
        """Its loop is closing: end the subscriber, and take nothing more -- only give back
        until :meth:`seal`. Its waiters are refused, and leave the queue as they go: a
        release at that moment still found the subscription open on the server, handed one
        of them the lock, and, with their leaving refused too, it stayed taken for the
        waiter's whole ttl (review 101a, F1: aclose() with waiters queued)."""
        self.closed = True
        if self.waiting is not None:
            self.waiting.stop()

    def seal(self) -> None:
        """Its client is being closed: send nothing more. A command sent on the closed
        client reconnected it, and nothing closed that connection again (review 21, 02 and
        22, 02: a clean-up at asyncio.run's end still waiting for a lock)."""
        self.closed = self.sealed = True

    def check_open(self, step: Step) -> None:
        if self.sealed or (self.closed and not gives_back(step)):
            raise ProviderError(
                "this event loop has shut down and its redlock-deco clients are closed, so "
                "nothing more can be sent on them (what it held is released, or expires "
                "within its ttl): take and release locks before the loop's end"
            )

    async def execute(self, step: Step) -> Any:
        kind = type(step)
        # (Before a wait too: one begun after the shutdown stopped the subscriber waited for
        # nothing -- and revived it, which heard a grant that could then be neither
        # confirmed nor given back, and the lock stayed taken for the waiter's whole ttl.)
        self.check_open(step)
        if kind is Wait:
            return await step.registration.wait(step.timeout)  # type: ignore[union-attr]
        if kind is Sleep:
            await asyncio.sleep(step.seconds)  # type: ignore[union-attr]
            return None
        self.sending += 1
        try:
            if kind is Listen:
                if self.waiting is None:
                    return None
                return await self.waiting.listen(step.token, step.timeout)  # type: ignore[union-attr]
            send = self._send_patiently if self.cluster and _patient.get() else self._send
            if self.lanes is None:
                return await send(step)
            lane = self.lanes[lane_of(step)]
            await lane.acquire()
            try:
                return await send(step)
            finally:
                lane.release()
        finally:
            self.sending -= 1

    async def _send_patiently(self, step: Step) -> Any:
        """:meth:`_send` on a cluster, sent again while its slot migrates (see
        MIGRATION_PATIENCE)."""
        give_up = time.monotonic() + MIGRATION_PATIENCE
        while True:
            try:
                return await self._send(step)
            except (ClusterError, TryAgainError) as exc:
                if not refused_while_migrating(exc):
                    raise
                if time.monotonic() >= give_up:
                    if isinstance(exc, TryAgainError):  # (a replicated attempt's own)
                        raise still_moving(exc) from exc
                    raise
            except AskError as exc:  # (and MovedError: see the sync driver's)
                if type(step) is not Replicated:
                    raise
                if time.monotonic() >= give_up:
                    raise still_moving(exc) from exc  # (as the sync driver's)
                if isinstance(exc, MovedError):
                    await self.client.nodes_manager.initialize()
            await asyncio.sleep(MIGRATION_RETRY)

    async def _send(self, step: Step) -> Any:
        if self.cluster:
            guard_async_nodes(self.client)  # (the nodes learnt since the last command too)
        else:
            if getattr(self.client, "single_connection_client", False):
                # (its connection made now, if not yet, so that it is marked before anyone's
                # command: made by the first command, it went unmarked until the library's
                # next one, and an application command cut in between left its reply to
                # another -- the asyncio reply search)
                await mark_single(self.client)
        if type(step) is Replicated:
            return await self._send_replicated(step)
        if type(step) is Call and step.route is not None:
            return await self.client.execute_command(*step.args, **routing(self.client, step))
        try:
            return await self.client.execute_command(*command(step))
        except NoScriptError:
            return await self.client.execute_command(*fallback(step))

    async def _send_replicated(self, step: Replicated) -> Any:
        """The attempt, then (if it took the lease) WAIT, on one connection."""
        attempt = step.step
        if is_cluster(self.client):
            await self.client.initialize()  # the slot map (a no-op once it is known)
            node = self.client.get_node_from_key(attempt.keys[0])
            conn = node.acquire_connection()

            async def call(args: Args) -> Any:
                await conn.send_packed_command(conn.pack_command(*args))
                return await node.parse_response(conn, args[0])

            try:
                try:
                    reply = await call(command(attempt))
                except NoScriptError:
                    reply = await call(fallback(attempt))
                if not took(reply):
                    return reply, None
                try:
                    return reply, await call(step.wait_command(conn.socket_timeout))
                except RedisTimeoutError:
                    await conn.disconnect()  # (WAIT's reply still to come)
                    return reply, 0  # (see too_slow)
            except ResponseError:
                raise
            except BaseException:
                await conn.disconnect()
                raise
            finally:
                # (redis-py 5.x's node has no release: its commands put a connection back so)
                release = getattr(node, "release", None)
                if release is not None:
                    release(conn)
                else:
                    node._free.append(conn)
        single = self.client.client()
        try:
            await single.initialize()  # its one connection, connected before the attempt
            stream = single.connection._writer
            try:
                reply = await single.execute_command(*command(attempt))
            except NoScriptError:
                reply = await single.execute_command(*fallback(attempt))
            acked = None
            if took(reply):
                waiting = step.wait_command(single.connection.socket_timeout)
                with too_slow():
                    acked = 0  # (if WAIT's reply comes too late)
                    acked = await single.execute_command(*waiting)
            return reply, confirmed(acked, single.connection._writer is stream)
        finally:
            await (getattr(single, "aclose", None) or single.close)()


class Executes(Protocol):
    def execute(self, step: Step) -> Any: ...


class ExecutesAsync(Protocol):
    busy: int

    async def execute(self, step: Step) -> Any: ...


def run(steps: Steps[T], target: Executes) -> T:
    """Drive an algorithm to its result on a sync client.

    A grant registration (the reply to :class:`Listen`) is closed here if the algorithm may
    not have received it: a KeyboardInterrupt raised as the generator resumed arrives in
    place of the reply, and the generator's own clean-up never sees it (review 4, r01).
    """
    try:
        step = next(steps)
        while True:
            reply = None
            try:
                reply = target.execute(step)
                step = steps.send(reply)
            except StopIteration:
                raise
            except BaseException:
                if type(step) is Listen:
                    # By token, not by reply: on Python 3.10 the interrupt can come as
                    # execute returns, before ``reply`` is stored (review 5 r07). Idempotent:
                    # the algorithm may have closed it too.
                    _drop_registration(target, step.token)
                raise
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        steps.close()


def _drop_registration(target: Executes, token: str) -> None:
    waiting = getattr(target, "waiting", None)  # only a single server's sync target listens
    if waiting is not None:
        waiting.drop(token)


def acquire(claim: Claim, wait: float | None, started: float, target: Any) -> Acquired:
    """Acquire ``claim`` on ``target`` within ``wait`` (None: forever) from ``started``.

    The lean path first: where the algorithm has one (:meth:`Algorithms.fast_try`), the
    uncontended attempt is one plain command, executed here without a generator (about 2 us
    of client CPU a call, on every uncontended acquire); then the algorithm itself.
    """
    algorithms: Algorithms = target.algorithms
    first = algorithms.fast_try(claim, wait, target.listening)
    if first is not None:
        granted = fast_granted(target.execute(first), started)
        if granted is not None:
            return granted
    left = remaining(wait, started, time.monotonic())
    steps = algorithms.acquire(claim, left, target.listening, tried=first is not None)
    return run(steps, target)


async def acquire_async(claim: Claim, wait: float | None, started: float, target: Any) -> Acquired:
    """:func:`acquire` on an asyncio client; a task cancelled during the lean attempt stops
    there, as :func:`run_async` stops after any step."""
    algorithms: Algorithms = target.algorithms
    first = algorithms.fast_try(claim, wait, target.listening)
    if first is not None:
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)  # Python 3.11+; 3.10 relies on redis-py
        before = cancelling() if cancelling is not None else 0
        reply = await target.execute(first)
        if cancelling is not None and cancelling() > before:
            raise asyncio.CancelledError
        granted = fast_granted(reply, started)
        if granted is not None:
            return granted
    left = remaining(wait, started, time.monotonic())
    steps = algorithms.acquire(claim, left, target.listening, tried=first is not None)
    return await run_async(steps, target)


async def run_async(steps: Steps[T], target: ExecutesAsync) -> T:
    """Drive an algorithm to its result on an asyncio client.

    A task cancelled during a step stops at the next step: redis-py (8.x) sometimes completes
    a command whose task was cancelled meanwhile instead of raising CancelledError, and a
    waiter told to stop would otherwise wait on until ``wait`` ran out (seen: 30 s). The
    algorithm is given the step's reply first, so that what the reply holds is its to clean
    up as it closes (a registration for grants, which otherwise stayed registered for good:
    review 3); then the cancellation is raised, whatever the algorithm returned.
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+; 3.10 relies on redis-py
    before = cancelling() if cancelling is not None else 0
    target.busy += 1  # the loop's shutdown keeps the client open meanwhile
    try:
        step = next(steps)
        while True:
            reply = await target.execute(step)
            try:
                step = steps.send(reply)
            finally:
                if cancelling is not None and cancelling() > before:
                    raise asyncio.CancelledError  # replaces a result, on purpose
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        target.busy -= 1
        steps.close()

"""Connections that an interrupt cannot leave half-connected in a redis-py pool.

redis-py's checkout gives a connection back to its pool on *any* exception, and its connect
cleans up only after its own errors (``RedisError``). A ``KeyboardInterrupt`` (sync) or a
cancellation (asyncio) between opening the socket and the end of the handshake (AUTH, HELLO,
CLIENT SETINFO, SELECT) so left a connection in the pool that looks connected and is not, and
the next checkout handed it out as it was:

- with its handshake cut before ``SELECT``, its commands ran in database 0: a lock taken
  there did not exclude the holders of the same name in the client's own database -- a
  second holder (review 34, 01: 3 of 3, a traced client, a ``redis.Redis`` subclass, a
  Sentinel's ``master_for`` client);
- cut before its reader was made, a grant subscription on it read nothing, for good -- the
  hand-off gone for the process -- and a command on it failed with ``AttributeError``
  (review 32, 01).

So every pool the library sends through gets connections that close themselves when a
connect is cut short (:func:`guard`): its class for the connections it makes from now on,
and the connections it has already made. Repairing the pool after the interrupt instead left
a window in which another thread drew the half-connected connection first (review 34, 08).

The same holds between a command's write and its read. redis-py's ``execute_command`` runs a
dozen lines of its own there, none of which closes the connection when a
``KeyboardInterrupt`` lands on them, and gives the connection back to its pool in a
``finally``; redis-py 8 then skips its checkout's "anything to read?" test (while maintenance
notifications are on, the default), and 5.x's test misses a reply still on its way. The next
command on that connection read the interrupted one's reply as its own: a release read an
acquire's nil and raised ``ScriptReplyError`` on another thread, whose holder then saw
``LockLost`` (the interrupts CI leg, a traced client: 1 run in 6; review 43: a second holder
when an acquire read an earlier one's success). So a connection counts the replies it owes
(a pipeline's too: the application's pipeline cut between two of its replies put the
connection back a reply off, and the library's next direct command read it -- review 44, N3),
and one given back to its pool owing any is closed before its next write. A sync ``RedisCluster``'s
node clients are guarded alike (:func:`guard_nodes`): its own command path has the same lines
between write and read.

The application's own calls on that pool are protected the same way; nothing else about its
connections changes. asyncio connections count alike (:class:`WholeAsyncConnect`): a
cancellation lands only inside redis-py's write or read, which disconnect, but a signal
handler's exception lands anywhere (review 50, R1).

Why one module: the count of replies owed, the marks that close a connection (owing, unfit)
and the pools and caching proxies they are read through are one invariant -- no command reads
another's reply -- kept by the same few attributes of one connection mixin; split, each part
would have to know the others' states.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

import redis
import redis.connection
from redis.exceptions import ResponseError


class Counting:
    """What a connection of either kind counts: the replies it owes (see :func:`guard`)."""

    _owed = 0  # replies written for and not read yet (a subscription's extra ones aside)
    _packed = 0  # commands in what pack_commands() made last (a pipeline's), for its write
    _stale = False  # given back to its pool owing a reply: closed before its next write
    # Made whole while checked out: what it owed then was never counted, so it is marked
    # stale as it goes back (not closed before its next write: a WATCH pipeline holding it
    # would send its EXEC on a new connection, unwatched).
    _unknown = False
    _single = False  # a single-connection client's one connection (see mark_single)
    _connecting = False  # inside its connect, whose handshake writes before it reads

    def pack_commands(self, commands: Any) -> Any:
        commands = list(commands)
        packed = super().pack_commands(commands)  # type: ignore[misc]
        self._packed = len(commands)
        return packed

    def _size(self) -> int:
        """The replies the write about to be made will owe; taken once."""
        replies = self._packed or 1
        self._packed = 0
        return replies

    def _read_one(self) -> None:
        if self._owed > 0:
            self._owed -= 1

    def _handshaking(self) -> bool:
        """Inside this connection's own connect (whose handshake writes several commands
        before it reads)? The flag says so, and a frame of that connect still running
        confirms it: a cut as the connect's ``finally`` began skipped the flag's reset,
        and it said so for good -- the close of a single connection owing a reply never
        fired again (WholeConnect._before_use, WholeAsyncConnect's write), and every command
        on that single connection read the reply before its own (the reply search, CI:
        seed 561861202, a SET answered by a cut GET's nil). A flag found stale is reset.
        The same for an asyncio connection, whose connect a signal handler's exception
        cuts the same way."""
        if not self._connecting:
            return False
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:  # (an awaiting coroutine's frame is its awaited one's f_back)
            if frame.f_code in _CONNECTS and frame.f_locals.get("self") is self:
                return True
            frame = frame.f_back
        self._connecting = False
        return False


class WholeConnect(Counting):
    """A mixin for a sync connection: a connect cut short by an interrupt closes what it
    opened, as redis-py's connect does after its own errors; and it knows when a reply is
    owed (see :func:`guard`)."""

    _unfit = False  # a read on it cut short, the socket left open: refused at its next use

    def _close_if_stale(self) -> None:
        if self._stale:
            self.disconnect()
            self._stale = False  # (after: one cut short inside is closed again next time)

    def can_read(self, *args: Any, **kwargs: Any) -> bool:
        # Closed first if it owes a reply nobody will read: redis-py's client-side cache reads
        # whatever is waiting on a connection before each command, as invalidations -- an
        # interrupted command's error reply was raised by the application's next command
        # (the reply search found it on a pooled connection, then on a single one).
        self._before_use()
        try:
            return bool(super().can_read(*args, **kwargs))  # type: ignore[misc]
        except BaseException:
            # Cut between redis-py's recv and its buffer's write, what was received is lost:
            # an invalidation the cache's drain had taken off the socket was never applied,
            # and the cache served an overwritten value for good (the reply search, CI:
            # seed 54288386, a GET three writes old). The cache is emptied. (Not closed: a
            # reply owed closes it anyway, and a pooled one refused mid-command raised a
            # ConnectionError into the application's; a subscription's wait cut by a
            # signal is sound -- closing it lost its messages, review 51, S1.)
            cache = _cache_around(self)
            if cache is not None:
                cache.flush()
            raise

    def _before_use(self) -> None:
        """Before a write, or the cache's read of what waits: closed if it owes a reply
        nobody will read, refused if a cut read left it unfit (see _refuse_if_unfit)."""
        if getattr(self, "pid", None) != os.getpid():
            # A forked child's: its socket is the parent's too (a single-connection client's
            # one connection: redis-py resets only pools), and replies crossed between the
            # processes -- the parent's acquire granted on the child's reply (review 58, F2;
            # review 60: the application's command in the child). Closed here only (redis-py
            # shuts a socket down only in the process that made it), and connected anew.
            self.disconnect()
            self.pid = os.getpid()
        self._close_if_stale()
        self._refuse_if_unfit()
        if self._single and self._owed and not self._handshaking():
            # (a single-connection client's commands each write and then read, one at a
            # time under its lock: a reply owed as one begins is a cut one's, whose
            # command -- the application's too -- left it to the next: see SyncTarget's
            # _send_single, and mark_single for asyncio's)
            self.disconnect()

    def _refuse_if_unfit(self) -> None:
        """Closed, and a ConnectionError raised, as if the server had closed it: whatever
        the cut read left unread may be anything. Raised, not reconnected quietly: a WATCH
        pipeline holding the connection would have sent its transaction on a new one that
        watched nothing, and overwritten a concurrent change -- redis-py turns the error
        into a WatchError (review 50, R4); a checkout connects again, a command's retry
        sends it again (it was not written). A single-connection client's one connection is
        only closed, and connects again as the command is written: no pipeline ever holds
        it (redis-py gives those the pool's others), and its command, refused so, failed
        with no retry to send it again (a URL client's default: the reply search, CI)."""
        if self._unfit:
            self.disconnect()
            self._packed = 0  # (a pipeline refused so: its size is not the next write's)
            if self._single:
                return
            raise redis.ConnectionError("closed: a read on this connection had been cut short")

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self._before_use()
        # The size of what is written taken first: the connect's handshake and the health
        # check's PING are written through here too, and one of them took a pipeline's size
        # as its own -- a failed PING's, forgotten with its connection, left the pipeline
        # counted as one command, and cut after its first reply it went back owing the
        # rest, marked owing none (the reply search, CI: a subscription read an EXEC's).
        replies = self._size()
        # Counted after redis-py's connect and health check (run here, not inside its write):
        # either may disconnect -- a failed health-check PING does, and its retry connects
        # again -- which forgets what is owed; counted first, the command was then written
        # owing nothing, and a reply left unread went to the next command, a second holder
        # (review 46, F1). And counted before the write: an interrupt just after it must not
        # find the count short (one before it costs a needless reconnect).
        self._ready(check_health)
        self._owed += replies
        super().send_packed_command(command, check_health=False)  # type: ignore[misc]

    def _ready(self, check_health: bool) -> None:
        """What redis-py's write does before it writes: connect, check health."""
        if not self._sock:  # type: ignore[attr-defined]
            if hasattr(super(), "connect_check_health"):  # redis-py >= 6 (this class has one)
                self.connect_check_health(check_health=False)
            else:
                self.connect()
        if check_health:
            self.check_health()  # type: ignore[attr-defined]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        pushes = _pushes(self) if kwargs.get("push_request") else None
        if pushes is not None:
            pushes.clear()
        try:
            reply = super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ResponseError:
            # An error reply is a reply read. Uncounted, every connection a handshake had made
            # owed the two CLIENT SETINFO errors of a server before 7.2 for good, and each
            # command after its first reconnected (a thousand waiters gave up, CI).
            self._read_one()
            raise
        except BaseException:
            # Read told not to disconnect on an error (redis-py's client-side cache reads the
            # invalidations waiting before each command so, a subscription too), a read cut
            # short may leave redis-py's buffer wrong: an interrupt inside its purge, after a
            # message, left the position past the end, and every command on the connection
            # then waited for a reply it had been sent -- a lock call until the socket timed
            # out, or for good (the reply search). Refused at its next use. Only then: a read
            # cut while it waited (a subscription's, by a signal) left the buffer rewound and
            # the connection sound, and refusing it lost its messages (review 51, S1).
            if self._sock is not None and _buffer_broken(self):  # type: ignore[attr-defined]
                self._unfit = True
            raise
        if pushes and _never_a_reply(pushes[-1]):
            # An invalidation (or a maintenance notice) read by redis-py's client-side cache
            # before a command answers no command. Counted, it stood for a cut command's
            # reply still owed: the close at the next write did not fire, that command
            # read the cut one's reply and left its own to the library's acquire -- a bare
            # SET NX, which any reply but nil grants (review 55, F1: a second holder).
            return reply
        self._read_one()  # (after the read: an interrupt inside it disconnects)
        return reply

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().disconnect(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            # Finished: cut short between redis-py's reset of its reader and its release of
            # the socket, the connection kept the socket with no reader, and every checkout
            # of it raised AttributeError, for good (the reply search found it).
            super().disconnect()  # type: ignore[misc]
            self._forget()
            raise
        self._forget()

    def _forget(self) -> None:
        """What the old socket owed, and that it was unfit, are gone with it. Forgotten only
        once it is closed: zeroed first, an interrupt inside redis-py's disconnect left the
        socket open, its reply on it and nothing owed -- the next acquire read it (review
        45, R03). And a subscription redis-py reconnects after an error kept the mark, and
        was closed again at its next read, its channels lost until it subscribed anew.
        Inside redis-py's client-side caching proxy, its cache is emptied too: the server
        forgets what the old socket tracked and will never invalidate it, and a close of the
        connection inside, not through the proxy (which empties it), left the cache serving
        an overwritten value for good (review 50, R2)."""
        self._owed = 0
        self._stale = False
        self._unfit = False
        self._unknown = False
        cache = _cache_around(self)
        if cache is not None:
            cache.flush()

    def connect(self) -> None:
        connecting, self._connecting = self._connecting, True
        try:
            super().connect()  # type: ignore[misc]
        except BaseException:
            self.disconnect()
            raise
        finally:
            self._connecting = connecting

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:  # redis-py >= 6
        connecting, self._connecting = self._connecting, True
        try:
            super().connect_check_health(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            self.disconnect()
            raise
        finally:
            self._connecting = connecting


class WholeAsyncConnect(Counting):
    """:class:`WholeConnect` for a redis.asyncio connection: a cancelled connect closes what
    it opened (a cancellation in the handshake is an ordinary event there: any timeout); and
    it counts the replies it owes. A cancellation lands only where redis-py awaits, inside
    its write or its read, each of which disconnects on any exception; but a
    ``KeyboardInterrupt`` or a signal handler's exception (raised wherever Python code runs)
    between the application's write and its read gave the connection back owing a reply, and
    the library's next acquire on it read that ``OK`` as its own -- inside while another
    held the lock (review 50, R1). The same marks as the sync mixin's, read the same way;
    nothing on asyncio reads a connection before its write (no client-side cache), so a
    stale one is closed as its next write starts."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if self._stale or (self._single and self._owed and not self._handshaking()):
            # (a single-connection client's commands each write and then read, one at a
            # time under its lock: a reply owed as one is written is an interrupted one's)
            await self.disconnect()
        # (sized before the connect and the health check, counted after them: see the sync
        # mixin -- their own writes come through here)
        replies = self._size()
        if not self.is_connected:  # type: ignore[attr-defined]
            if hasattr(super(), "connect_check_health"):  # redis-py >= 6
                await self.connect_check_health(check_health=False)
            else:
                await self.connect()
        if check_health:
            await self.check_health()  # type: ignore[attr-defined]
        self._owed += replies
        await super().send_packed_command(command, check_health=False)  # type: ignore[misc]

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            reply = await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ResponseError:
            self._read_one()  # (an error reply is a reply read: see the sync mixin)
            raise
        timeout = kwargs.get("timeout", args[1] if len(args) > 1 else None)
        if reply is None and timeout is not None:
            return None  # (a read given a timeout answers None when it ran out: nothing read)
        self._read_one()
        return reply

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().disconnect(*args, **kwargs)  # type: ignore[misc]
        finally:
            if not self.is_connected:  # type: ignore[attr-defined]
                # (forgotten only once closed: a close cut short keeps what the socket owes)
                self._owed = 0
                self._stale = False
                self._unknown = False

    async def connect(self) -> None:
        connecting, self._connecting = self._connecting, True
        try:
            await super().connect()  # type: ignore[misc]
        except BaseException:
            await self.disconnect()
            raise
        finally:
            self._connecting = connecting

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:  # redis-py >= 6
        connecting, self._connecting = self._connecting, True
        try:
            await super().connect_check_health(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            await self.disconnect()
            raise
        finally:
            self._connecting = connecting


# The connects whose frames confirm a connection's handshake flag (see _handshaking).
_CONNECTS = tuple(
    method.__code__
    for kind in (WholeConnect, WholeAsyncConnect)
    for method in (kind.connect, kind.connect_check_health)
)

_WHOLE: dict[tuple[type, type], type] = {}  # (a connection class, mixin) -> the two


def _whole(plain: type, mixin: type) -> type:
    if issubclass(plain, mixin):
        return plain
    made = _WHOLE.get((plain, mixin))
    if made is None:
        name = f"Whole{plain.__name__}"
        # (no slots of its own: a slotted class's instances, a cluster node's, can take it)
        namespace = {"__module__": plain.__module__, "__slots__": ()}
        made = _WHOLE[plain, mixin] = type(name, (mixin, plain), namespace)
    return made


def cached(client: Any) -> bool:
    """Has ``client``'s pool redis-py's client-side cache?"""
    return getattr(getattr(client, "connection_pool", None), "cache", None) is not None


# Pools at least this large are practically unbounded (redis-py 5's default is 2**31).
UNBOUNDED_POOL = 10_000


def fills_up(pool: Any) -> bool:
    """Does ``pool`` raise when all its connections are out ("Too many connections"): a
    bounded one that does not wait (not a ``BlockingConnectionPool``)?"""
    size = getattr(pool, "max_connections", None)
    return (
        isinstance(size, int)
        and size < UNBOUNDED_POOL
        and not isinstance(pool, redis.BlockingConnectionPool)
    )


def uncached_pool(pool: Any, sized: bool = False) -> Any:
    """A pool like ``pool`` (its connection class and settings), without the cache; of its
    kind and size if ``sized``, else a plain ``redis.ConnectionPool``."""
    settings = dict(pool.connection_kwargs)
    settings.pop("cache", None)
    settings.pop("cache_config", None)
    if sized:
        settings["max_connections"] = pool.max_connections
    return (type(pool) if sized else redis.ConnectionPool)(
        connection_class=pool.connection_class, **settings
    )


def uncached(client: Any) -> Any:
    """For a plain ``redis.Redis`` on a standard pool with redis-py's client-side cache, and
    not wrapped on the instance: a client on a pool of its own, with the same connection
    settings and size and no cache, for the library's commands and its grant subscription
    (None for any other client). Its scripts are never cached anyway, and the cache gets in
    their way: its PubSub cannot read through the cache's connection proxy (redis-py 8.1:
    AttributeError; any other client's grant subscription gets a pool of its own, see
    _waiting), and on a cache hit the proxy drains the connection that fetched the entry --
    checked out by another thread, that thread's reply is read and dropped, and an acquire
    waited for it for good (review 47, G3; redis-py's, for the application's own commands
    too). A client wrapped on the instance (OpenTelemetry's ``instrument_client``, a wrapper
    of your own) is used as it is, so that the wrapper sees the library's commands."""
    pool: Any = getattr(client, "connection_pool", None)
    if not cached(client) or type(client) is not redis.Redis or "execute_command" in vars(client):
        return None
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        return None
    return redis.Redis(connection_pool=uncached_pool(pool, sized=True))


_NEVER_REPLIES = frozenset(
    # CLIENT TRACKING's invalidations, and redis-py 8's maintenance notifications
    {"invalidate", "moving", "migrating", "migrated", "failing_over", "failed_over"}
)


def _never_a_reply(push: Any) -> bool:
    """Is ``push`` (a RESP3 push message) of a kind no command is answered with?"""
    if not isinstance(push, list) or not push:
        return False
    kind = push[0]
    if isinstance(kind, bytes):
        kind = kind.decode("utf-8", "replace")
    return isinstance(kind, str) and kind.lower() in _NEVER_REPLIES


def _pushes(connection: Any) -> list[Any] | None:
    """The last push message ``connection``'s parser handed over, recorded as it does (its
    ``handle_push_response`` wrapped on the instance, once per parser: a connect makes a new
    one); None when it has none to wrap."""
    parser = getattr(connection, "_parser", None)
    record: list[Any] | None = getattr(parser, "_redlock_deco_pushes", None)
    if record is not None:
        return record
    handle = getattr(parser, "handle_push_response", None)
    if handle is None:
        return None
    made: list[Any] = []

    def handle_push_response(response: Any, *args: Any, **kwargs: Any) -> Any:
        made[:] = [response]  # (the last only: a long-lived connection handles many)
        return handle(response, *args, **kwargs)

    try:
        parser.handle_push_response = handle_push_response  # type: ignore[union-attr]
        parser._redlock_deco_pushes = made  # type: ignore[union-attr]
    except AttributeError:  # pragma: no cover - a parser with slots
        return None
    return made


# Where a pool keeps its connections (a BlockingConnectionPool: every one made in _connections).
_LISTS = ("_available_connections", "_in_use_connections", "_connections")


def guard(pool: Any, asynchronous: bool) -> None:
    """Make ``pool``'s connections, those to come and those it has, close themselves when a
    connect is cut short (see the module). A pool it cannot see into is left as it is."""
    plain = getattr(pool, "connection_class", None)
    if not isinstance(plain, type):
        return
    mixin = WholeAsyncConnect if asynchronous else WholeConnect
    # Under the lock the pool moves its connections under: looked at while another thread
    # moved one, a connection given back after the look was marked as checked out, idle
    # and owing for good -- the first acquire read its OK (review 58, F1); one drawn after
    # the look was marked stale, and closed under the WATCH just sent on it: the EXEC ran
    # unwatched (F3). (What a thread already inside redis-py's checkout or release does
    # after the lock is released, the pool's checkout settles: see made_whole.)
    with _moves_of(pool, asynchronous):
        pool.connection_class = _whole(plain, mixin)
        if asynchronous:
            _mark_owing_on_async_release(pool)
        else:
            _mark_owing_on_release(pool)
            _whole_on_checkout(pool)
            _SYNC_POOLS.add(pool)
        _make_all_whole(pool, mixin)  # (a function: its loops' back edges -- test_back_edges)


def _make_all_whole(pool: Any, mixin: type) -> None:
    """The connections ``pool`` has made whole, as idle or checked out (see guard)."""
    # (Each list copied at once, by list(): iterated as it was, a set another thread changed
    # raised RuntimeError out of the library's first call -- review 57.)
    listed = [list(getattr(pool, where, ())) for where in _LISTS]
    made = {
        id(connection): connection
        for connections in listed
        for connection in connections
        if connection is not None  # (a BlockingConnectionPool's queue holds None for room)
    }.values()
    idle = {id(connection) for connection in _idle(pool)}
    for connection in made:
        made_whole(connection, mixin, idle=id(connection) in idle)


def _moves_of(pool: Any, asynchronous: bool) -> Any:
    """The lock ``pool`` moves its connections between its lists under (a
    BlockingConnectionPool: its queue's), or nothing (asyncio: one thread; or a pool of
    another kind)."""
    if asynchronous or getattr(pool, "pid", None) != os.getpid():
        # (a forked child's pool: its lock may be held by a thread of the parent's, which
        # no thread here will ever release -- review 59: a child's first lock call hung for
        # good; redis-py resets the pool, lock and lists, at its next use)
        return contextlib.nullcontext()
    queued = getattr(pool, "pool", None)
    lock = getattr(queued, "mutex", None) if queued is not None else getattr(pool, "_lock", None)
    if isinstance(lock, _THREAD_LOCKS):
        return lock
    return contextlib.nullcontext()


_THREAD_LOCKS = (type(threading.Lock()), type(threading.RLock()))


def made_whole(connection: Any, mixin: type, *, idle: bool) -> Any:
    """``connection`` made whole in place if it is not (its count unknown: see
    _mark_uncounted); the connection that counts, or None if its class forbids it.

    Called by guard on the connections a pool has, and by the guarded pool's checkout on each
    connection it hands out (every use of a pooled connection starts there): guard's look at
    the pool's lists is not atomic with the pool's other threads, and a connection made from
    the class before guard's, or moving between two lists as it looked, was missed -- a plain
    connection in a guarded pool for good, whose cut command's ``OK`` the library's next
    acquire read as its own (review 57, F1: a second holder; BlockingConnectionPool on
    redis-py 8.1, the library's first call amid the application's threads opening
    connections, 37 of 50)."""
    # (Inside redis-py's client-side caching proxy, the connection it wraps: the proxy made
    # whole had none of a connection's attributes, and every command drawn onto it raised
    # AttributeError -- review 47, G2 -- while the connection inside wrote and read
    # uncounted, a second holder -- G1.)
    connection = _wrapped(connection)
    if isinstance(connection, mixin):
        return connection  # (counted all along)
    with contextlib.suppress(TypeError):  # a class whose layout forbids it: left as it is
        connection.__class__ = _whole(type(connection), mixin)
        _mark_uncounted(connection, idle=idle)
        return connection
    return None


def _mark_uncounted(connection: Counting, idle: bool) -> None:
    """What ``connection``, just made whole, owes was never counted. Idle and connected: an
    application command cut between its write and its read before the library's first call
    went back to the pool with its reply on the way, and the first acquire read that OK
    (review 50, R3) -- closed before its next use: one reconnect, once. Checked out, it may
    be in the middle of a pipeline, to be cut between its replies (review 53, R53-1: a
    second holder), or of its connect, whose command is then written by redis-py's own
    frame, uncounted (the asyncio reply search): marked as it goes back, connected or not."""
    if idle:
        if _connected(connection):
            connection._stale = True
    else:
        connection._unknown = True


def _connected(connection: Any) -> bool:
    if isinstance(connection, WholeAsyncConnect):
        return bool(connection.is_connected)  # type: ignore[attr-defined]
    return connection._sock is not None


def _idle(pool: Any) -> list[Any]:
    """The connections waiting in ``pool`` (a BlockingConnectionPool's in its queue)."""
    waiting = list(getattr(pool, "_available_connections", ()))
    queued = list(getattr(getattr(pool, "pool", None), "queue", ()))  # (copied at once)
    return waiting + [connection for connection in queued if connection is not None]


def _mark_owing_on_release(pool: Any) -> None:
    """``pool.release`` marks a connection given back with a reply owed (see the module), so
    that it is closed before its next write, whoever draws it. Marked, not closed here: a
    close takes long enough for an interrupt storm to land in it, and a connection whose
    release was cut short never went back -- review 43's storm emptied the pool in seconds
    (MaxConnectionsError) when this closed it."""
    plain = pool.release
    if getattr(plain, "marks_owing", False):
        return

    def release(connection: Any) -> None:
        counted = counting(connection)
        if counted is not None:
            counted._single = False  # (see the asyncio release: review 54, F2)
        if counted is not None and (counted._owed or counted._stale or counted._unknown):
            counted._stale = True
            cache = getattr(connection, "_cache", None)
            if counted is not connection and cache is not None:
                # Its close will not go through the cache's proxy, which empties the cache
                # when it closes: what the server tracked for the old socket it will never
                # invalidate.
                cache.flush()
        plain(connection)

    release.marks_owing = True  # type: ignore[attr-defined]
    pool.release = release


def _whole_on_checkout(pool: Any) -> None:
    """``pool.get_connection`` makes whole a connection it hands out that is not (see
    made_whole): idle until now, it is closed before its first write if connected."""
    plain = pool.get_connection
    if getattr(plain, "makes_whole", False):
        return

    @functools.wraps(plain)  # (its signature: callers read it for redis-py's command name)
    def get_connection(*args: Any, **kwargs: Any) -> Any:
        connection = None
        try:
            connection = plain(*args, **kwargs)
            counted = made_whole(connection, WholeConnect, idle=True)
            if counted is not None and counted._unknown:
                # Handed out, so idle until now: what it owes, nobody counted. (Marked as
                # checked out by guard, it went back through a release begun before guard
                # wrapped it, owing the OK of a command cut on it -- review 58, F1.)
                counted._unknown = False
                _mark_uncounted(counted, idle=True)
            return connection
        except BaseException:
            cache = getattr(pool, "cache", None)
            if connection is None and cache is not None:
                # Cut inside redis-py's checkout: redis-py 8.2 reads the invalidations
                # waiting on an idle connection there (handle_pending_push_notifications)
                # and applies them only once it has read them all, and an interrupt in
                # between dropped them with the connection left open -- the cache served an
                # overwritten value for good (the reply search, seed 420572596). Emptied.
                with contextlib.suppress(Exception):  # (the cut is what the caller gets)
                    cache.flush()
            if connection is not None:
                # Given back, marked: interrupted here (before its caller had it), it was kept
                # out of the pool for good (the interrupt-at-every-line tests), and maybe
                # between made whole and marked, owing what nobody counted.
                counted = counting(connection)
                if counted is not None:
                    _mark_uncounted(counted, idle=True)
                pool.release(connection)
            raise

    get_connection.makes_whole = True  # type: ignore[attr-defined]
    pool.get_connection = get_connection
    ensure = getattr(pool, "ensure_connection", None)
    if ensure is None:
        return

    def ensure_connection(connection: Any) -> None:
        try:
            ensure(connection)
        except BaseException:
            # Closed before its next use: redis-py 8.2's drain of an idle connection's pushes
            # swaps the parser's handlers for collecting stubs before its try, and puts them
            # back in its finally; cut in between, the connection kept the stubs for good,
            # and every invalidation after was dropped -- the cache served an overwritten
            # value (the reply search, seed 594709374). Its connect sets the cache's anew.
            counted = counting(connection)
            if counted is not None:
                _mark_uncounted(counted, idle=True)
            raise

    pool.ensure_connection = ensure_connection


def _mark_owing_on_async_release(pool: Any) -> None:
    """:func:`_mark_owing_on_release` for a redis.asyncio pool (whose release is awaited)."""
    plain = pool.release
    if getattr(plain, "marks_owing", False):
        return

    async def release(connection: Any) -> None:
        if isinstance(connection, WholeAsyncConnect):
            if connection._owed or connection._unknown:
                connection._stale = True
            # (no single-connection client's any more: kept, a subscription drawing it was
            # closed under itself as it wrote its second SUBSCRIBE before reading the first's
            # reply, and lost a message -- review 54, F2)
            connection._single = False
        await plain(connection)

    release.marks_owing = True  # type: ignore[attr-defined]
    pool.release = release


async def mark_single(client: Any) -> None:
    """The asyncio side of the sync single-connection path (``SyncTarget._send_single``): a
    ``redis.asyncio`` client made with ``single_connection_client=True`` never gives its
    connection back to a pool, so nothing marked it when an interrupt between a command's
    write and its read left a reply on it. Its connection is marked as the client's one, and
    closes itself when a command is written on it owing a reply -- at the write, under the
    client's lock: checked before a command queued for that lock, a command holding it and
    then cut gave it back owing, and the queued acquire read that ``OK`` (review 52, R52-1
    and R52-2: a second holder). The application's commands are so covered too (R52-3), from
    the library's first call on.

    Marked under the client's lock, where no command of the client is under way: marked
    amid another task's connect (begun before the library made the connection whole, so not
    known as one), the handshake's second write found the first's reply owed and closed the
    connection under it, and that command then waited out its socket timeout for a reply
    its new connection never owed (the asyncio reply search, redis-py 5.0). And what it owed
    before the library made it whole was never counted: an application command cut then
    left its reply, which the library's first acquire read -- a bare ``SET NX`` takes any
    reply but nil as granted (review 54, F1, the sync twin). Closed before its next write
    then, once (a WATCH or SELECT sent on it by hand before is lost: GUARANTEES)."""
    connection = getattr(client, "connection", None)
    if getattr(connection, "_single", False):
        return
    if connection is None:
        await client.initialize()  # (its connection, made now: it is marked before any use)
    async with client._single_conn_lock:
        # (made whole here if the guard never saw it: a pool reset after the client took it
        # left it out of the pool's lists -- see the sync driver's _send_single; review 61)
        connection = made_whole(client.connection, WholeAsyncConnect, idle=False)
        if isinstance(connection, WholeAsyncConnect):
            if connection._unknown and _connected(connection):
                connection._stale = True
            connection._single = True


# The sync single-connection clients the library has seen (see remember_single).
_SINGLE_CLIENTS: weakref.WeakSet[Any] = weakref.WeakSet()


def remember_single(client: Any) -> None:
    """``client``'s lock (redis-py's, around each of its commands) is a new one in a forked
    child, if it is a sync single-connection client: a parent's thread inside a command -- the
    application's, or the library's renewal -- held it at the fork, and the child's first
    lock call waited for it for good, past any ``wait`` (review 61, F2). Remembered when it
    is registered as a provider, and when a target is built on it (a factory's). Its one
    connection, the parent's socket, is closed at its first use in the child (the pid check
    in WholeConnect._before_use)."""
    if getattr(client, "connection", None) is not None and hasattr(
        client, "single_connection_lock"
    ):
        _SINGLE_CLIENTS.add(client)


# The sync pools the library has guarded (see _forked).
_SYNC_POOLS: weakref.WeakSet[Any] = weakref.WeakSet()


def _forked() -> None:
    """In a forked child, every lock of the sync clients and pools the library has used is a
    new one. A parent's thread inside a pool's checkout or release at the fork held its lock
    for good in the child, and redis-py (6 and later) keeps that lock when its pid check
    resets the pool: the first use of the pool in the child waited for it for good -- the
    child's own at-fork clean-up too, which drops the parent's subscriptions and clients and
    so gives their connections back (test_fork_locks' search over every lock in reach)."""
    for client in list(_SINGLE_CLIENTS):
        client.single_connection_lock = threading.RLock()
    for pool in list(_SYNC_POOLS):
        for name in ("_lock", "_fork_lock"):
            made = _MADE_LIKE.get(type(getattr(pool, name, None)))
            if made is not None:
                setattr(pool, name, made())


# A new lock of the same kind (a lock's type cannot be called on Python 3.10).
_MADE_LIKE: dict[type, Callable[[], Any]] = {
    type(threading.Lock()): threading.Lock,
    type(threading.RLock()): threading.RLock,
}


os.register_at_fork(after_in_child=_forked)


def counting(connection: Any) -> WholeConnect | None:
    """The connection that counts the replies ``connection`` owes: itself, or the one inside
    redis-py's client-side caching proxy (``CacheProxyConnection``), which guard() made
    whole; the release and the single-connection path read the count through the proxy,
    which has none, and never marked a connection owing a reply (review 46, F2)."""
    inner = _wrapped(connection)
    return inner if isinstance(inner, WholeConnect) else None


_PROXY: Any = getattr(redis.connection, "CacheProxyConnection", None)  # (redis-py >= 5.1)


def _buffer_broken(connection: Any) -> bool:
    """Is redis-py's read buffer of ``connection`` past its own end (a purge cut between its
    truncate and its seek)? Parsers that keep their buffer inside (hiredis) are left alone."""
    buffer = getattr(
        getattr(getattr(connection, "_parser", None), "_buffer", None), "_buffer", None
    )
    if not isinstance(buffer, io.BytesIO):
        return False
    try:
        # (getvalue, not getbuffer: an export of the buffer, however brief, makes a write
        # from another thread -- redis-py's cache drains connections across threads -- fail
        # with BufferError)
        return buffer.tell() > len(buffer.getvalue())
    except ValueError:  # closed
        return False


def _cache_around(connection: Any) -> Any:
    """The cache of redis-py's client-side caching proxy around ``connection``, if any: the
    proxy registers a callback of its own on the connection inside (tracking turned on at
    each connect), as a weak method, which names it."""
    if _PROXY is None:
        return None
    for callback in getattr(connection, "_connect_callbacks", ()):
        method = callback() if isinstance(callback, weakref.WeakMethod) else callback
        proxy = getattr(method, "__self__", None)
        if isinstance(proxy, _PROXY):
            return getattr(proxy, "_cache", None)
    return None


def _wrapped(connection: Any) -> Any:
    """The connection inside redis-py's client-side caching proxy, or ``connection``."""
    if _PROXY is not None and isinstance(connection, _PROXY):
        return connection._conn
    return connection


def guard_nodes(client: Any) -> None:
    """:func:`guard` for a sync ``RedisCluster``'s node clients: those it has, and those its
    nodes manager makes later (a node that joins, a topology refreshed). redis-py's cluster
    writes a command and reads its reply on the node's pooled connection with lines of its
    own in between, and gives the connection back in a ``finally``, as ``execute_command``
    does. Anything else is left as it is."""
    manager: Any = getattr(client, "nodes_manager", None)
    make = getattr(manager, "create_redis_node", None)
    if make is None:
        return
    if not getattr(make, "guards", False):
        # (wrapped before the nodes it has are looked at: a node made between the two was
        # missed by both)

        def create_redis_node(*args: Any, **kwargs: Any) -> Any:
            made = make(*args, **kwargs)
            guard(getattr(made, "connection_pool", None), asynchronous=False)
            return made

        create_redis_node.guards = True  # type: ignore[attr-defined]
        manager.create_redis_node = create_redis_node
    for node in list(getattr(manager, "nodes_cache", {}).values()):
        made = getattr(node, "redis_connection", None)
        if made is not None:
            guard(getattr(made, "connection_pool", None), asynchronous=False)


class NodeMarksOwing:
    """A mixin for a redis.asyncio cluster node (``ClusterNode``): a connection it hands out
    owing a reply is marked, and closed by its next write. A node's free connections are
    idle, so a reply one owes is an interrupted command's: the node writes a command and
    reads its reply on a connection with lines of its own between, and puts it back in a
    ``finally`` (8.x) or after the read (5.x), through no release a pool's guard could
    wrap."""

    __slots__ = ()

    def acquire_connection(self) -> Any:
        connection = super().acquire_connection()  # type: ignore[misc]
        if isinstance(connection, WholeAsyncConnect) and (connection._owed or connection._unknown):
            connection._stale = True
        return connection


def guard_async_nodes(client: Any) -> None:
    """:func:`guard` for a redis.asyncio ``RedisCluster``'s nodes, those it knows now: run
    before each of the library's commands, so that a node learnt since (a topology refreshed,
    a MOVED) is guarded before the library's command reaches it. A connection a node had
    made before, idle and connected, owes what nobody counted: closed before its next use,
    as a pool's (review 50, R1 and R3)."""
    manager: Any = getattr(client, "nodes_manager", None)
    for node in list(getattr(manager, "nodes_cache", {}).values()):
        if isinstance(node, NodeMarksOwing):
            continue
        with contextlib.suppress(TypeError, AttributeError):  # a node it cannot see into
            node.connection_class = _whole(node.connection_class, WholeAsyncConnect)
            _make_whole(node._connections, idle=node._free)
            node.__class__ = _whole(type(node), NodeMarksOwing)


def _make_whole(connections: Any, idle: Any) -> None:
    """Asyncio ``connections`` made whole in place; connected, the ``idle`` ones marked
    stale and the others as of an unknown count (see guard). (A function of its own: a
    loop inside the caller's handler has a back edge that 3.13 leaves outside it --
    test_back_edges.py.)"""
    free = {id(connection) for connection in idle}
    for connection in list(connections):
        if made_whole(connection, WholeAsyncConnect, idle=id(connection) in free) is None:
            raise TypeError("a connection class whose layout forbids the library's mixin")

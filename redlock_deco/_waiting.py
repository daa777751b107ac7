"""Waiting for a hand-off: one subscriber per server and process (per event loop for asyncio),
however many threads or tasks wait.

A release hands the lease to the head of the queue and PUBLISHes that waiter's token on its
process's channel (see ``lua/waiters.lua``). Here one subscriber connection per target reads
those grants and wakes the waiter they name: a thread through an event, a task through its own
event. 1,000 waiters cost one connection for waiting, not 1,000 (the BLPOP design before this
held a pooled connection per waiter, and releases then starved for connections).

- A waiter registers *before* the attempt that may queue it, so a grant always finds its
  waiter registered while it waits (on one of the process's subscribers: several targets,
  or event loops, may share a server and so hear each other's grants; :class:`Registry` is
  the process's view of them all).
- A waiter cut short (an exception or interrupt before it could leave the queue) leaves an
  entry that a release may serve later: a grant for such a token is given back at once, by
  a release of that token, which passes it on (it compares tokens: nothing is lost or
  released twice). Left alone it would keep the lock for the waiter's whole ttl.
- Every other grant nobody waits for is ignored: a late or duplicate copy of one a waiter
  already took (it asked the server itself meanwhile), or one read late from a subscription
  nobody read for a while (a sync subscription is read only while some thread waits). Giving
  those back would release a lease its holder still holds and renews (found in review: a
  grant read seconds later released a live lease, and a second holder got in).
- A lost grant (the subscriber reconnected) costs latency, never correctness: every wait is
  bounded (``protocol.RECHECK``), after which the waiter asks the server itself.
- The subscription is opened by the first waiter, so an uncontended process holds no extra
  connection; sync waiters read it themselves (:class:`SyncWaiting`), asyncio ones through
  a reader task that ends after IDLE seconds with nobody waiting.

Why one module: the grant registry, the board and both subscribers carry out one protocol (a
grant nobody waits for is given back) that must stay consistent across all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import redis

from . import _tokens as tokens
from ._flag import Flag
from ._pools import cached, fills_up, uncached_pool
from ._protocol import Claim, granted_claim
from ._worker import background, set_within

log = logging.getLogger("redlock_deco")

CHANNEL_PREFIX = "redlock-deco:"
# An asyncio reader task with nobody waiting ends after this long (the next waiter starts one).
IDLE = 10.0
# How long a first waiter waits for its subscription; past it, it polls instead.
START_TIMEOUT = 2.0
# A waiter whose subscription another thread is making looks again this often.
SUBSCRIBE_POLL = 0.05
# Each read of the subscription blocks at most this long.
READ_TIMEOUT = 1.0
# A subscription not confirmed after this long is presumed dead, and made again.
UNCONFIRMED = 1.0
# After a failed read (connection trouble), subscribe again after this long.
RETRY_DELAY = 0.1
# An interrupted reader subscribes again for the process's other waiters this long at most.
RESUBSCRIBE_WAIT = 0.5
# A token whose waiter was cut short is remembered this long (its entry may be served
# while others keep the queue alive), and at most this many of them.
CUT_KEEP = 3600.0
CUT_MAX = 10_000


def channel() -> str:
    """This process's grant channel (the token's holder part: it changes in a forked child)."""
    return CHANNEL_PREFIX + tokens.holder_prefix().rstrip(":")


def supported(client: Any) -> bool:
    """Can ``client`` subscribe? (redis-py's asyncio cluster client cannot in some versions.)"""
    return callable(getattr(client, "pubsub", None))


def location(client: Any) -> int | None:
    """The database ``client`` sends to, as its pool says (None: unknown, such as a cluster
    client's, whose nodes all use database 0).

    The database alone tells subscribers of one server apart: a grant reaches only the
    subscribers of the server that published it, which is the server its waiter queued on,
    and channels ignore the database. Host, port and socket path are not compared: one server
    is reached as ``localhost`` and as ``127.0.0.1``, over TCP and a unix socket, and a
    subscriber that took those for another server refused to give a dead waiter's grant back
    -- each held the lock for its own ttl (review 41: 17.7 s against 1.7 s).
    """
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return None
    try:
        return int(kwargs.get("db") or 0)
    except (TypeError, ValueError):
        return None


def _text(data: Any) -> str:
    return data.decode() if isinstance(data, bytes) else str(data)


class Registry:
    """The grants of this process: tokens whose waiter waits now (on any subscriber of the
    process), and tokens whose waiter was cut short before it could leave the queue (a grant
    for one is given back). One per process, shared by every target and event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting: dict[str, int] = {}  # token -> registrations (normally 1)
        # token -> (remembered until, where it waited: see Board.where)
        self.cut: OrderedDict[str, tuple[float, int | None]] = OrderedDict()

    def add(self, token: str) -> None:
        with self._lock:
            self.waiting[token] = self.waiting.get(token, 0) + 1

    def remove(self, token: str, cut_short: bool, where: int | None = None) -> None:
        """``token``'s waiter stopped waiting; ``cut_short``: before it could leave the
        queue (it neither took the lease nor had an answer to its leaving release), on the
        database ``where``."""
        now = time.monotonic()
        with self._lock:
            left = self.waiting.get(token, 0) - 1
            if left > 0:
                self.waiting[token] = left
            else:
                self.waiting.pop(token, None)
            _forget_old(self.cut, now)  # (a loop under a C lock: see _forget_old)
            if cut_short:
                self.cut[token] = (now + CUT_KEEP, where)

    def give_back(self, token: str, where: int | None = None) -> bool:
        """Should a grant for ``token`` that finds no waiter be given back (once), by a
        subscriber on database ``where`` (see :func:`location`)? Not by one on another
        database: channels ignore the database, and a give-back there found no such key --
        the grant was lost, the lock held by nobody for the waiter's whole ttl (review 39).
        None: any."""
        with self._lock:
            if token in self.waiting:
                return False
            found = self.cut.get(token)
            if found is None or (found[1] is not None and where is not None
                                 and found[1] != where):  # fmt: skip
                return False
            del self.cut[token]
            return True


registry = Registry()

# Every subscriber of this process, to close its inherited copy in a forked child.
_subscribers: weakref.WeakSet[SyncWaiting | AsyncWaiting] = weakref.WeakSet()


def _every_subscriber() -> list[SyncWaiting | AsyncWaiting]:
    """A copy of :data:`_subscribers`, taken again if another thread added one meanwhile: a
    WeakSet is iterated in Python, and every new event loop's first wait adds its subscriber,
    so a subscriber reading a grant raised "Set changed size during iteration" out of a
    waiter's acquire (review 40, 3: 16 in 30 s with frequent thread switches)."""
    while True:
        try:
            return list(_subscribers)
        except RuntimeError:
            continue


def abandon_closed() -> bool:
    """Tell the subscribers of event loops closed by hand (see AsyncWaiting._abandoned)
    that they are: whether there were any. Asked when a grant reaches a subscriber of this
    process that does not know its token: one of a closed loop's waiters, perhaps, still
    registered, so the grant was not given back -- and a loop of another thread, already
    running (or a sync thread), starts none, so no new loop noticed the close: each dead
    waiter in turn held the lock for its own ttl (review 38: 17 s, against 2)."""
    closed = [s for s in _every_subscriber() if isinstance(s, AsyncWaiting) and s.loop_closed()]
    for subscriber in closed:
        subscriber._abandoned()
    return bool(closed)


def _forked() -> None:
    """In a forked child: a registry of its own, and every grant subscription inherited from
    the parent closed -- on the child's side only. A fork copies the subscription's socket,
    and the connection lives on while any copy is open: after the parent died, a child that
    lived on (a multiprocessing.Process, a daemonised helper) kept the parent's channel
    subscribed, so releases counted its dead waiters as listening and handed each the lock
    for its own ttl (review 14: a lock blocked 19.5 s after its holder was killed, against
    1.4 s without the child). ``close()``, never ``shutdown()``, which would end the
    parent's connection too."""
    global registry
    registry = Registry()
    for subscriber in _every_subscriber():
        subscriber.forget_inherited()


def _close_copy(connection: Any) -> None:
    """Close this process's copy of ``connection``'s socket (a redis-py connection, sync or
    asyncio), leaving the connection itself, which other processes may share, open."""
    sock = getattr(connection, "_sock", None)  # sync connections
    if sock is None:  # asyncio: the stream's transport has it
        transport = getattr(getattr(connection, "_writer", None), "transport", None)
        found = transport.get_extra_info("socket") if transport is not None else None
        sock = getattr(found, "_sock", found)  # asyncio wraps it in a TransportSocket
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.close()
    elif sock is not None:
        # uvloop's transport hands out a PseudoSocket: no socket.socket, and its close()
        # refuses. Its descriptor is this process's copy: the child kept the dead parent's
        # subscription open, the server counted its waiters as listening, and each was
        # granted the lock for its own ttl (review 87b, F1). The child never runs that loop.
        with contextlib.suppress(Exception):
            os.close(sock.fileno())


os.register_at_fork(after_in_child=_forked)


class Board:
    """Who waits for which token on one subscriber. Pure bookkeeping; the callers hold their
    own lock (sync) or run in one loop (asyncio) -- but for an abandoned loop's, which every
    other subscriber of the process may clear (see AsyncWaiting._abandoned)."""

    __slots__ = ("counted", "waiting", "where")

    def __init__(self, counted: bool, where: int | None = None) -> None:
        self.waiting: dict[str, Any] = {}
        self.counted = counted  # PUBLISH counts prove a waiter gone there (not a cluster)
        self.where = where  # the database its target sends to (None: unknown; see location)

    def add(self, token: str, waiter: Any) -> None:
        self.waiting[token] = waiter
        registry.add(token)

    def forget(self, token: str, waiter: Any, cut_short: bool) -> None:
        # (One pop, not a read and then a delete: the subscribers of a process clear an
        # abandoned loop's board each from its own thread (abandon_closed), and one's delete
        # after the other's raised a KeyError out of an unrelated waiter's wait; review 86b.)
        found = self.waiting.pop(token, None)
        if found is waiter:
            registry.remove(token, cut_short, self.where)
        elif found is not None:
            self.waiting.setdefault(token, found)  # (another waiter's: kept)

    def deliver(self, message: str) -> tuple[Any, Claim | None]:
        """The waiter a grant message names; or (None, the claim to give back) for a waiter
        that was cut short; else (None, None): another subscriber of ours has its waiter, or
        it is a late copy of a grant already taken."""
        token, _, _ = message.partition(" ")
        waiter = self.waiting.get(token)
        if waiter is not None:
            return waiter, None
        where = self.where
        if registry.give_back(token, where) or (
            abandon_closed() and registry.give_back(token, where)
        ):
            return None, granted_claim(message, self.counted)
        return None, None


def _unsent(claim: Claim, target: Any, asynchronous: bool) -> None:
    """Until the renewer's module sets :data:`give_back_later`: nothing to queue it on."""


# A give-back cut short (interrupted, cancelled -- at a loop's shutdown, even before its
# first step) is left to the renewer's clean-ups, as an acquire cut short is, which a loop's
# shutdown tries once more; otherwise nobody gave the grant back, and the name stayed held
# by nobody for the grantee's whole ttl. Set by ``_renewal``, which imports the drivers,
# which import this module.
give_back_later: Callable[[Claim, Any, bool], None] = _unsent


# -- sync --------------------------------------------------------------------------------
#
# No subscriber thread: one of the waiting threads reads the subscription (the *reader*),
# handing others' grants to them. A grant for the reader itself costs no thread switch at all
# -- with a dedicated thread every hand-off paid two (subscriber, then waiter), which on a
# loaded machine was most of its latency. A reader that leaves wakes another waiter to take
# over, so the subscription is read whenever anyone waits.


class Handoff:
    """One thread's registration: woken when a release hands it the lease."""

    __slots__ = ("_event", "_owner", "ask", "at", "inside", "token")

    def __init__(self, owner: SyncWaiting, token: str) -> None:
        self._owner = owner
        self._event = Flag()  # not threading.Event: see _flag
        self.token = token
        self.at: float | None = None  # when its grant arrived
        self.inside = False  # in wait() now, without its grant: it can take over reading
        self.ask = False  # its grant may have been lost: ask the server now (see ask_server)

    def granted(self, at: float) -> None:
        self.at = at
        self._event.set()

    def nudge(self) -> None:
        """Wake it without a grant: the reader left, someone must read."""
        self._event.set()

    def ask_server(self) -> None:
        """End its wait at once without a grant, so that it asks the server (as at its
        recheck): a grant for it may have gone with a dropped subscription."""
        self.ask = True
        self._event.set()

    def wait(self, timeout: float) -> float | None:
        """When the grant arrived (monotonic), or None if ``timeout`` passed first (or it
        should ask the server: see ask_server)."""
        return self._owner.wait(self, timeout)

    def take(self) -> float | None:
        """The grant's time, consumed (a later wait, after a failed confirm, waits anew)."""
        at, self.at = self.at, None
        if at is not None:
            self._event.clear()
        return at

    def close(self, cut_short: bool = False) -> None:
        """Stop waiting; ``cut_short``: before the queue entry could be taken out (a grant
        for it is then given back)."""
        self._owner.forget(self, cut_short)


class SyncWaiting:
    """The grant subscription of one sync target, and the threads waiting on it.

    Opened by the first waiter and kept (one connection per server and process); a
    killed process's subscription closes with it, which is how releases know to skip its
    waiters.
    """

    def __init__(self, target: Any, counted: bool) -> None:
        self.client = target.client
        self._target = target  # runs the release step that gives a grant back
        self._lock = threading.Lock()  # the board
        # The registration whose thread reads the subscription now, or None. Recorded by
        # identity under _lock, not as a Lock held: a KeyboardInterrupt as a lock's acquire
        # returned (before the caller stored True) or as the leaving function started left
        # a Lock held for good, and nobody in the process read grants again (review 5 r10).
        self._reader: Handoff | None = None
        self._board = Board(counted, location(target.client))
        self._pubsub: Any = None  # touched only by the reader
        self._since = 0.0  # when the reader subscribed it
        self._retired = False  # its target was replaced: closed once nobody waits on it
        self._subscribed_event = Flag()  # not threading.Event: see _flag
        _subscribers.add(self)

    @property
    def listening(self) -> bool:
        """Subscribed now: an attempt may queue at once, its grant will reach us."""
        return self._subscribed_event.is_set()

    @property
    def _subscribed(self) -> bool:
        return self._subscribed_event.is_set()

    def listen(self, token: str, timeout: float = START_TIMEOUT) -> Handoff | None:
        """Register ``token``'s waiter (subscribing first if needed, for at most ``timeout``
        seconds and START_TIMEOUT); None if it cannot."""
        if timeout <= 0 and not self.listening:
            return None  # (see AsyncWaiting.listen)
        handoff = Handoff(self, token)
        deadline = time.monotonic() + min(timeout, START_TIMEOUT)
        try:
            with self._lock:
                self._board.add(token, handoff)
            while True:  # (not `while not subscribed`: see test_back_edges)
                if self._subscribed:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    handoff.close()
                    return None
                if self._become_reader(handoff):
                    # In a function of its own: an interrupt on the inner `try` line (as a
                    # tracer raises it) skipped this function's handler, and the waiter
                    # stayed registered for good.
                    self._subscribe_reading(handoff, deadline)
                    continue
                # Someone reads: it subscribes, or it already has and now waits for its own
                # grant (for up to a second: never wait for it to leave).
                self._subscribed_event.wait(min(remaining, SUBSCRIBE_POLL))
            return handoff  # inside the try: an interrupt on this very line is handled too
        except BaseException:
            # Interrupted before the caller got the registration, so nobody else can close
            # it: it would stay registered for good, and the subscriber never idle.
            self._leave_reading(handoff)
            handoff.close()
            raise

    def _subscribe_reading(self, handoff: Handoff, deadline: float) -> None:
        """Read the subscription until it is open, as the reading thread (the reader)."""
        try:
            self._read(handoff, deadline, until_subscribed=True)
        finally:
            self._leave_reading(handoff)

    def forget(self, handoff: Handoff, cut_short: bool) -> None:
        with self._lock:
            self._board.forget(handoff.token, handoff, cut_short)
        if self._retired:
            self.close_if_unused()

    def retire(self) -> None:
        """The target was replaced (its provider registered again): the subscription is
        closed as soon as nobody waits on it. Kept, nobody would ever read it again, yet it
        stayed subscribed -- a connection per registration until the collector came, and
        releases went on counting its channel as listening (review 32, 02)."""
        self._retired = True
        self.close_if_unused()

    def close_if_unused(self) -> None:
        closer = Handoff(self, "")
        with self._lock:
            if self._board.waiting or self._reader is not None:
                return  # the last waiter's close comes back here
            self._reader = closer  # nobody else touches the subscription meanwhile
        try:
            self._drop_subscription()
        finally:
            with self._lock:
                self._reader = None

    def drop(self, token: str) -> None:
        """Close ``token``'s registration, cut short, wherever it is: an interrupt lost it on
        its way back to the algorithm (on Python 3.10 a signal is raised in the caller as a
        function returns, before the caller stores what it returned: review 5 r07)."""
        with self._lock:
            handoff = self._board.waiting.get(token)
            if handoff is not None:
                self._board.forget(token, handoff, True)

    def wait(self, handoff: Handoff, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        handoff.inside = True
        try:
            while True:
                at = handoff.take()
                if at is not None:
                    return at
                remaining = deadline - time.monotonic()
                if remaining <= 0 or handoff.ask:
                    handoff.ask = False
                    return None
                if self._become_reader(handoff):
                    try:
                        self._read(handoff, deadline)
                    finally:
                        self._leave_reading(handoff)
                elif handoff._event.wait(remaining) and handoff.at is None:
                    handoff._event.clear()  # nudged: the reader left; try to become it
        finally:
            handoff.inside = False
            # Still the reader if an interrupt cut in above: leave (and pass it on). Else, if
            # nobody reads, we may have been woken to take over reading and be leaving
            # instead (our deadline came): pass it on, or grants go unread until a recheck.
            if not self._leave_reading(handoff) and self._reader is None:
                self._pass_reading(handoff)

    def _read(self, handoff: Handoff, deadline: float, until_subscribed: bool = False) -> None:
        """Read grants (handing on others') until ours came, or ``deadline``."""
        try:
            self._read_on(handoff, deadline, until_subscribed)
        except BaseException:
            # Interrupted while reading: the subscription is dropped, and the next reader
            # subscribes afresh. Kept, it could be dead for good with nobody subscribing
            # again, and every wait of the process fell back to its recheck: interrupted
            # between creating it and subscribing, or between reading the confirmation and
            # noting it (review 31, 01: a Ctrl-C in a process's first contended wait, 12 of
            # 40 with real signals), or inside redis-py's reconnect after a connection error,
            # after the confirmed subscription's socket was replaced (review 32, 01).
            # The new one is confirmed before the old one goes: a release in between announced
            # the other waiters' grants to nobody, and the server took them for a dead
            # process's and served a later waiter of another process first (review 84b, F1).
            # (Taken out first: an interrupted close is never repeated, see _drop_subscription.)
            interrupted = self._take_subscription()
            try:
                self._subscribe_for_others(handoff)
            finally:
                _closed(interrupted)
            self._others_ask_server(handoff)
            raise

    def _subscribe_for_others(self, handoff: Handoff) -> None:
        """Subscribe afresh, confirmed, before an interrupted reader's clean-up goes on, if
        other waiters of this process still wait: that clean-up gives back what the reader
        was granted, and the release hands it on -- maybe to one of them, whose grant went to
        a channel nobody listened on; taken for a dead process's, it was skipped, the lock
        left free up to a recheck (a second) while it waited, and a later waiter of another
        process went first (review 79b, F1). Bounded; a failure leaves it to the next reader."""
        with self._lock:
            others = _next_inside(self._board.waiting.values(), handoff) is not None
        if not others:
            return
        try:
            # (a handoff nobody grants: the loop reads until the subscription is confirmed,
            # passing on any grant for the others on the way)
            # (the interrupted one still holds its connection: see _subscriber)
            self._read_on(Handoff(self, ""), time.monotonic() + RESUBSCRIBE_WAIT, True, True)
        except Exception as exc:
            log.debug("redlock-deco: subscribing again for the other waiters failed: %r", exc)
            self._drop_subscription()

    def _others_ask_server(self, handoff: Handoff) -> None:
        """Have the process's other waiters ask the server now: grants read off the socket
        but not yet handed on went with the dropped subscription -- readers let in together
        by one release each get one, all at once -- and each of those waiters, in on the
        server, learnt it only at its recheck, up to a second later, its share keeping
        every writer out meanwhile (review 81b, F1)."""
        with self._lock:  # (a generator, not a comprehension with an if: test_back_edges)
            others = list(other for other in self._board.waiting.values() if other is not handoff)
        for other in others:
            other.ask_server()

    def _drop_subscription(self) -> None:
        """Forget the subscription, then close it: taken out first, so an interrupted close
        is never repeated (closed twice, redis-py 5's pool listed its connection as free
        twice, and a release then went out on a subscribed connection: review 32, 01)."""
        _closed(self._take_subscription())

    def _take_subscription(self) -> Any:
        """Forget the subscription (the next reader subscribes afresh); it, to be closed."""
        pubsub, self._pubsub = self._pubsub, None
        self._subscribed_event.clear()
        return pubsub

    def _read_on(
        self, handoff: Handoff, deadline: float, until_subscribed: bool, beside: bool = False
    ) -> None:
        while handoff.at is None and not (until_subscribed and self._subscribed):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                if self._pubsub is not None and not self._subscribed and unconfirmed(self._since):
                    self._drop_subscription()  # see unconfirmed()
                if self._pubsub is None:
                    self._since = time.monotonic()
                    self._pubsub = _subscriber(self.client, beside)
                    subscribe(self._pubsub)
                message = self._pubsub.get_message(timeout=min(remaining, READ_TIMEOUT))
            except Exception as exc:  # connection trouble: grants are lost until we are back
                log.debug("redlock-deco: grant subscription failed (%r); subscribing again", exc)
                self._drop_subscription()
                time.sleep(min(RETRY_DELAY, max(0.0, deadline - time.monotonic())))
                continue
            if message is None:
                continue
            kind = _text(message.get("type"))
            if kind == "subscribe":
                self._subscribed_event.set()
            elif kind == "message":
                with self._lock:
                    waiter, give_back = self._board.deliver(_text(message["data"]))
                if waiter is not None:
                    waiter.granted(time.monotonic())
                elif give_back is not None:
                    try:
                        self._target.execute(give_back.release_step())
                    except Exception as exc:  # the grant then lapses after its ttl
                        log.warning("redlock-deco: could not give back a grant: %r", exc)
                    except BaseException:
                        give_back_later(give_back, self._target, False)
                        raise

    def _become_reader(self, handoff: Handoff) -> bool:
        """Take the reading if nobody reads; True when ``handoff``'s thread is the reader."""
        with self._lock:
            if self._reader is None:
                self._reader = handoff
        return self._reader is handoff

    def forget_inherited(self) -> None:
        """In a forked child: the parent's subscription is not ours (see ``_forked``)."""
        pubsub, self._pubsub = self._pubsub, None
        self._subscribed_event.clear()
        _close_copy(getattr(pubsub, "connection", None))

    def _leave_reading(self, handoff: Handoff) -> bool:
        """Stop reading if ``handoff``'s thread is the reader (idempotent), and pass the
        reading on to a waiter that is waiting now and has no grant yet: one that was
        granted (or is between waits, confirming) would never read, and grants would go
        unread until some waiter's recheck -- up to a second -- after every batch of readers
        admitted together."""
        with self._lock:
            if self._reader is not handoff:
                return False
            self._reader = None
        self._pass_reading(handoff)
        return True

    def _pass_reading(self, handoff: Handoff) -> None:
        with self._lock:
            other = _next_inside(self._board.waiting.values(), handoff)
        if other is not None:
            other.nudge()


def _subscriber(client: Any, beside: bool = False) -> Any:
    """``client.pubsub()``, its ``subscribed_event`` a :class:`Flag`. redis-py's is a
    ``threading.Event``, set in ``subscribe()`` and cleared in ``reset()``: a KeyboardInterrupt
    inside its Condition code left the lock held, and the interrupted waiter's own clean-up
    (``close()``, then ``reset()``) waited for it for good -- one Ctrl-C, a hang past
    ``wait=`` (review 44, N1). ``beside``: made while the process's other subscription
    still holds its connection (see SyncWaiting._read)."""
    pubsub: Any
    pool = getattr(client, "connection_pool", None)
    if not cached(client) and not (beside and fills_up(pool)):
        pubsub = client.pubsub()
    else:
        # redis-py's PubSub cannot read through the client-side cache's connection proxy
        # (8.1: AttributeError, no health_check_interval): every grant subscription failed,
        # and every waiter polled, 2 s for a lock held 0.3 s (a subclass's, a Sentinel's, a
        # client wrapped on the instance: a plain one sends everything around the cache, see
        # _pools.uncached). The subscription gets an uncached pool of its own, closed with it.
        # So does one made beside another on a pool that raises when full: the lanes leave
        # one connection for the subscriber, and a second one there took a lane's -- other
        # threads' releases failed with "Too many connections", their locks held on
        # (review 94b, F1).
        own = uncached_pool(pool)
        pubsub = redis.Redis(connection_pool=own).pubsub()  # type: ignore[no-untyped-call, unused-ignore]
        pubsub.own_pool = own  # (see _closed)
    if isinstance(getattr(pubsub, "subscribed_event", None), threading.Event):
        pubsub.subscribed_event = Flag()
    _forgetting(pubsub)
    return pubsub


def subscribe(pubsub: Any) -> None:
    """Subscribe ``pubsub`` (from :func:`_subscriber`) to this process's grants."""
    pubsub.subscribe(channel())
    _forgetting(pubsub)  # (a cluster's has its pool now)


def _forgetting(pubsub: Any) -> None:
    """Have ``pubsub``'s pool be a :class:`_ForgettingPool`, once it has one: a cluster's
    subscription picks its node's pool at its first command."""
    pool = pubsub.connection_pool
    if pool is not None and type(pool) is not _ForgettingPool:
        pubsub.connection_pool = _ForgettingPool(pool, pubsub)


class _ForgettingPool:
    """The pool a grant subscription gives its connection back to, which has the
    subscription forget the connection first. redis-py's ``PubSub.reset`` releases its
    connection, then forgets it: cut in between (a KeyboardInterrupt), the object still named
    a connection back in the pool, and its finaliser -- ``reset()`` again -- closed and
    released that connection once another thread had checked it out: closed under that
    thread's command, and listed as free while in use, for a third to write on (found by the
    threaded reply search). Forgotten first, a cut release leaves at worst a connection that
    is closed and never given back. Everything else is the pool's."""

    __slots__ = ("_pool", "_pubsub")

    def __init__(self, pool: Any, pubsub: Any) -> None:
        self._pool = pool
        self._pubsub = weakref.ref(pubsub)

    def release(self, connection: Any) -> None:
        pubsub = self._pubsub()
        if pubsub is not None and pubsub.connection is connection:
            pubsub.connection = None
        self._pool.release(connection)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def _forget_old(cut: OrderedDict[str, tuple[float, int | None]], now: float) -> None:
    """Drop the oldest cut-short tokens: past their time, or beyond CUT_MAX. A function of
    its own, as every loop run under a C lock here: on Python 3.13 an interrupt at such a
    loop's back edge, written inside the ``with``, skipped its exit and left the lock held
    for good -- every later wait of the process hung (review 43; test_back_edges)."""
    while cut and (len(cut) >= CUT_MAX or next(iter(cut.values()))[0] < now):
        cut.popitem(last=False)


def _next_inside(handoffs: Iterable[Handoff], leaving: Handoff) -> Handoff | None:
    """The first waiter other than ``leaving`` inside its wait and not yet granted (a
    function of its own: see :func:`_forget_old`)."""
    for other in handoffs:
        if other is not leaving and other.inside and other.at is None:
            return other
    return None


def unconfirmed(since: float) -> bool:
    """Has a subscription made at ``since`` gone unconfirmed too long to be alive?

    A live server confirms a SUBSCRIBE within a round trip. One that never does sits on a
    connection nothing can be read from -- a client's pool can hand out one that an interrupt
    left half-connected (see ``_pools``): without this, every later wait of the process took
    its whole subscribe time and then polled, and a wait under 2 s failed with the lock free
    (review 32, 01, on clients this library did not build). Dropped, it is made again on a
    new connection; a server that is merely slow (paused, overloaded) costs a reconnect a
    second."""
    return time.monotonic() - since > UNCONFIRMED


def _closed(pubsub: Any) -> None:
    if pubsub is not None:
        with contextlib.suppress(Exception):  # a dead connection must not stop the subscriber
            pubsub.close()
        own = getattr(pubsub, "own_pool", None)
        if own is not None:
            own.disconnect()


# -- asyncio -----------------------------------------------------------------------------


class AsyncHandoff:
    """One task's registration: woken when a release hands it the lease."""

    __slots__ = ("_event", "_owner", "at", "token")

    def __init__(self, owner: AsyncWaiting, token: str) -> None:
        self._owner = owner
        self._event = asyncio.Event()
        self.token = token
        self.at = 0.0

    def granted(self, at: float) -> None:
        self.at = at
        self._event.set()

    async def wait(self, timeout: float) -> float | None:
        self._owner.revive()
        if not await set_within(self._event, timeout) or self._owner._target.closed:
            return None  # (stopped: woken, with no grant -- see AsyncWaiting.stop)
        self._event.clear()
        return self.at

    def wake(self) -> None:
        self._event.set()

    def close(self, cut_short: bool = False) -> None:
        self._owner._board.forget(self.token, self, cut_short)


class AsyncWaiting:
    """The subscriber of one asyncio target (one event loop), and the tasks waiting on it."""

    def __init__(self, target: Any, counted: bool) -> None:
        self.client = target.client
        self._target = target  # runs the release step that gives a grant back
        self._board = Board(counted, location(target.client))
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pubsub: Any = None  # the reader task's subscription, while it runs
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        with contextlib.suppress(RuntimeError):  # (made outside a loop: nothing to watch)
            self._loop = weakref.ref(asyncio.get_running_loop())
        _subscribers.add(self)

    @property
    def listening(self) -> bool:
        return self._ready.is_set()

    def loop_closed(self) -> bool:
        loop = self._loop() if self._loop is not None else None
        return loop is not None and loop.is_closed()

    def forget_inherited(self) -> None:
        """In a forked child: the parent's subscription is not ours (see ``_forked``). Its
        loop, and the task reading it, run only in the parent."""
        pubsub, self._pubsub = self._pubsub, None
        self._ready.clear()
        _close_copy(getattr(pubsub, "connection", None))

    def _abandoned(self) -> None:
        """Its loop was closed by hand with the subscriber pending (no asyncio.run, no
        aclose(); see worker.background). Its waiters will never take a grant, but a
        hand-off still granted one the lock for its own ttl: the server counted the open
        subscription as listening, and the process's other subscribers did not know the
        token -- the name blocked for up to two ttls (review 37). So each waiter is cut
        short (a grant for it that another subscriber of the process hears is given back at
        once), and the subscription's socket is closed."""
        for token, waiter in list(self._board.waiting.items()):
            self._board.forget(token, waiter, cut_short=True)
        self.forget_inherited()

    async def listen(self, token: str, timeout: float = START_TIMEOUT) -> AsyncHandoff | None:
        if timeout <= 0 and not self.listening:
            # The wait ran out (a replicated attempt's WAIT can take all of it): no subscriber
            # for a waiter that can take no grant. Started, it outlived the call on the
            # application's client, and a cluster client the application closed next was
            # opened again under it by its resubscribe: a node connection left open past
            # the loop (CI's test_cluster_replicas_are_counted_on_the_keys_node_connection).
            return None
        handoff = AsyncHandoff(self, token)
        self._board.add(token, handoff)
        self._start()
        try:
            if not await set_within(self._ready, max(0.0, min(timeout, START_TIMEOUT))):
                handoff.close()
                return None
        except BaseException:
            # Cancelled before the caller got the registration, so nobody else can close it:
            # it stayed registered for good, and the loop's subscriber never idled (review 3).
            handoff.close()
            raise
        return handoff

    def _start(self) -> None:
        """Start the subscriber task unless it runs."""
        if self._task is None or self._task.done():
            # (Done: cancelled before its first step -- "cancel every other task" at the turn
            # it was created -- its finally never ran to clear it, and no subscriber was ever
            # started again in this loop: review 31, 02.)
            self._task = background(self._run(), "redlock-deco-waiting", self._abandoned)
            # It idles for IDLE seconds after its last waiter, to spare the next wait a
            # SUBSCRIBE, and holds nothing: a loop closed by hand without aclose() destroys it
            # pending, which is harmless, so asyncio is told not to report it (review 13: a
            # "Task was destroyed but it is pending!" after each contended hand-run loop).
            # asyncio's own shield() and run_until_complete() do the same for their futures.
            self._task._log_destroy_pending = False  # type: ignore[attr-defined]

    def revive(self) -> None:
        """Start the subscriber again as a registered task waits (again: each recheck), if it
        ended meanwhile -- cancelled from outside, by a helper cancelling "every other task"
        (review 83b, F1): nobody of the process listened, every release took the loop's
        waiters for dead and skipped them, and they queued again at the back at each
        recheck, starved under steady hand-offs until their ``wait`` ran out."""
        if self._board.waiting and not self.loop_closed():
            self._start()

    def _start_give_back(self, claim: Claim) -> None:
        async def give_back() -> None:
            try:
                await self._target.execute(claim.release_step())
            except Exception as exc:  # the grant then lapses after its ttl
                log.warning("redlock-deco: could not give back a grant: %r", exc)

        def ended(task: asyncio.Future[None]) -> None:
            # Cancelled -- also before its first step, where no handler inside could run.
            if task.cancelled():
                give_back_later(claim, self._target, True)

        background(give_back(), "redlock-deco-give-back").add_done_callback(ended)

    def stop(self) -> None:
        """The loop is closing: end the subscriber (its connection is closed on the way), and
        wake its waiters, with no grant: their target sends nothing more (a wait included:
        see AsyncTarget.execute), so each is refused at once rather than at its next
        recheck, up to a second later."""
        if self._task is not None:
            self._task.cancel()
        for waiter in list(self._board.waiting.values()):
            waiter.wake()

    async def _run(self) -> None:
        pubsub: Any = None
        idle_since = time.monotonic()
        try:
            while True:
                # (No check for a subscription never confirmed, as the sync reader has:
                # redis.asyncio's checkout reconnects a connection whose reader is gone.)
                try:
                    if pubsub is None:
                        pubsub = self._pubsub = self.client.pubsub()
                        await pubsub.subscribe(channel())
                    message = await pubsub.get_message(timeout=READ_TIMEOUT)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.debug("redlock-deco: grant subscription failed (%r); again", exc)
                    self._ready.clear()
                    await _aclosed(pubsub)
                    pubsub = self._pubsub = None
                    await asyncio.sleep(RETRY_DELAY)
                    message = None
                now = time.monotonic()
                if message is not None:
                    kind = _text(message.get("type"))
                    if kind == "subscribe":
                        self._ready.set()
                    elif kind == "message":
                        waiter, give_back = self._board.deliver(_text(message["data"]))
                        if waiter is not None:
                            waiter.granted(now)
                        elif give_back is not None:
                            self._start_give_back(give_back)
                if self._board.waiting:
                    idle_since = now
                if now - idle_since < IDLE:  # (shaped for Python 3.13: see test_back_edges)
                    continue
                # Idle: closed here, still the loop's subscriber, and subscribed again if a
                # waiter came meanwhile. Closed as the task ended, a waiter coming then started
                # a second subscriber beside it (review 94b's note): a second connection where
                # the pool's budget spares one.
                self._ready.clear()
                closing, pubsub = pubsub, None
                self._pubsub = None
                await _aclosed(closing)
                if self._board.waiting:  # (shaped for Python 3.13: see test_back_edges)
                    continue
                break
        except GeneratorExit:
            # Closed, not awaited (its task dropped with a loop closed by hand): nothing may
            # be awaited here. redis-py 8.2's aclose() always suspends (a shielded teardown
            # task): "coroutine ignored GeneratorExit", and its teardown never ran.
            _dropped(pubsub)
            pubsub = None
            raise
        finally:
            self._ready.clear()
            self._pubsub = None
            try:
                await _aclosed(pubsub)
            finally:
                # Last: until then, a waiter coming finds this task the loop's subscriber, not
                # done (see _start), and starts no second one. (One that came as it was
                # cancelled starts it again at its recheck: revive.)
                self._task = None


async def _aclosed(pubsub: Any) -> None:
    if pubsub is not None:
        with contextlib.suppress(Exception):
            await (getattr(pubsub, "aclose", None) or pubsub.close)()


def _dropped(pubsub: Any) -> None:
    """Close an asyncio subscription's socket without awaiting (see AsyncWaiting._run)."""
    connection: Any = getattr(pubsub, "connection", None)
    writer = getattr(connection, "_writer", None)
    if writer is not None:
        connection._writer = connection._reader = None
        with contextlib.suppress(Exception):  # (a closed loop: the socket goes with it)
            writer.close()

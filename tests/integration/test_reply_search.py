"""A search for mistakes in the count of replies a connection owes (see _pools), instead of
one more scenario: three reviews in a row found one there (a reply read by the next command
-- a second holder -- and a reconnect on every command).

Each run is a random sequence, drawn from a seed, of the application's own commands on the
client the library also sends through -- single commands, error replies, pipelines
(transactions or not, errors raised or returned), WATCH transactions, subscriptions drawn
from the same pool, blocking pops whose reply comes long after a cut -- and another client's
writes of a key the application reads through redis-py's client-side cache (an invalidation
push for the connection), mixed with the library's lock calls. Some of the steps, the library's
included, are cut short by a KeyboardInterrupt at a random line of redis-py's (or of
_pools') on their way: in the checkout, the connect, the write, between the write and the
read, in the read, in the release. (The library's own lines are the interrupt-at-every-line
tests'.)

After every step the replies must be the step's own: a GET returns what the model says the
key may hold (after a cut SET, its old value or its new one), a pipeline's replies are its
commands', a lock is entered when its name is free and refused when it is held (a reply
read by the wrong command is a second holder there); a lock call cut short leaves nothing
held past its ttl and never releases the lock held elsewhere. And no idle connection that counts no
reply owed has one waiting, on its socket or in redis-py's buffer: a count short of the
truth is found as it happens, not only when a later command on that connection reads it.
Over the run, the server must have received no more connections than the cuts (and failed
health checks) explain: a connection owing nothing is never closed for owing (review 45: an
uncounted error reply reconnected on every command).

A failure prints the seed and the steps so far; ``REDLOCK_DECO_SEED`` replays one seed and
``REDLOCK_DECO_REPLY_RUNS`` sets how many seeds a run tries.
"""

from __future__ import annotations

import inspect
import random
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import pytest
import redis
import redis.connection
from redis._parsers.socket import SocketBuffer
from redis.backoff import NoBackoff
from redis.retry import Retry
from support.caching import caching_allowed
from support.clients import wrap_execute_command
from support.interrupts import signal_cannot_land
from support.replies import (
    BUSY,
    BUSY_MS,
    NOT_A_NUMBER,
    Lines,
    interruptible,
    queue,
    searching,
    seeds,
)

import redlock_deco
from redlock_deco import Lock, LockNotAcquired, _pools
from redlock_deco import _providers as providers
from redlock_deco.testing import RedisServer

T = TypeVar("T")

STEPS = 150  # per run
LOCK_TTL = 1  # the library's locks' (a lock call cut short may leave its key until then)
KEYS = [f"k{i}" for i in range(4)]
OTHERS = "others"  # a key only another client writes (the application reads it)
BLOCKED = 0.1  # s: how long a blocking pop to be cut waits (its reply comes after)
CUT = 0.35  # the share of the application's steps cut short


class Cut(Lines):
    """Runs a step under a tracer that counts its interruptible lines, and raises a
    KeyboardInterrupt at the ``nth`` (0: never). What it saw guides later cuts: how many
    lines a step of its kind runs, and which of them lie between a write and its read."""

    def __init__(self, nth: int, busy_at: int = 0, busy: Callable[[], None] = print) -> None:
        self.nth = nth
        self.busy_at = busy_at  # the line at which the server is made busy (0: never)
        self.busy = busy
        self.fired = False
        self.where = ""  # the line cut, for the log
        super().__init__()

    def local(self, frame: FrameType, event: str, arg: object) -> Any:
        if event != "line" or self.fired:
            return self.local
        if signal_cannot_land(frame.f_code, frame.f_lineno, frame.f_lasti):
            return self.local
        if self.saw(frame) == self.busy_at:
            self.busy()  # (a trace function is not traced)
        if self.lines == self.nth:
            self.fired = True
            self.where = f"{frame.f_code.co_name} ({frame.f_globals['__name__']}:{frame.f_lineno})"
            sys.settrace(None)
            raise KeyboardInterrupt
        return self.local

    def run(self, step: Callable[[], None]) -> bool:
        """``step()``; True if it was cut short."""
        sys.settrace(lambda frame, event, arg: self.local if interruptible(frame) else None)
        try:
            step()
        except KeyboardInterrupt:
            if not self.fired:
                raise
        finally:
            sys.settrace(None)
        return self.fired


def single_lock_given_back(client: Any) -> None:
    """After a cut step: a single-connection client's lock (redis-py's, around each command)
    given back if the cut left it with this thread. Only a trace function's cut can do that:
    in a ``finally`` body before its release (redis-py's ``_execute_command``), where no real
    signal lands -- the last check point before it is a call inside the ``try``, or the
    release's own return (support.interrupts excludes the body's first line; a later one
    before the release it cannot tell). Kept, it hung every other thread sharing the client
    (the threaded search); in one thread, it re-entered unseen. (A real signal as its
    ``acquire()`` returns, before the ``try``, does leave it held: redis-py's, upstream.)"""
    lock = getattr(client, "single_connection_lock", None)
    owned = getattr(lock, "_is_owned", None)
    while owned is not None and owned():
        lock.release()  # type: ignore[union-attr]


def untraced(call: Callable[[], T]) -> T:
    """``call()`` outside the tracer: the probe is never cut short (its pool is not guarded,
    and its replies are the truth)."""
    tracer = sys.gettrace()
    sys.settrace(None)
    try:
        return call()
    finally:
        sys.settrace(tracer)


def waiting_bytes(connection: Any) -> bytes:
    """What waits to be read on ``connection``, read by neither: redis-py's buffer of what it
    took from the socket and did not parse yet, then the socket's own (peeked)."""
    buffered = b""
    buffer = getattr(connection._parser, "_buffer", None)
    if isinstance(buffer, SocketBuffer):  # (redis-py's own parsers: hiredis keeps its own)
        buffered = buffer._buffer.getvalue()[buffer._buffer.tell() :]
    sock = connection._sock
    timeout = sock.gettimeout()
    sock.settimeout(0)  # (a socket with a timeout waits for something to read first)
    try:
        return buffered + sock.recv(1 << 16, socket.MSG_PEEK)
    except BlockingIOError:
        return buffered
    finally:
        sock.settimeout(timeout)


AGGREGATES = {b"*": 1, b">": 1, b"~": 1, b"%": 2, b"|": 2}  # RESP: elements per count


def replies_in(data: bytes) -> list[bytes]:
    """The first line of each reply in ``data`` (RESP2 or RESP3), push messages left out:
    on RESP3 the server sends the client-side cache's invalidations unasked."""
    found: list[bytes] = []
    at = 0

    def skip(at: int) -> int:
        end = data.index(b"\r\n", at)  # (ValueError: cut short -- not expected here)
        kind, size = data[at : at + 1], data[at + 1 : end]
        at = end + 2
        if kind in (b"$", b"=", b"!"):
            return at if int(size) < 0 else at + int(size) + 2
        if kind in AGGREGATES:
            for _ in range(AGGREGATES[kind] * max(int(size), 0)):
                at = skip(at)
        return at

    while at < len(data):
        if data[at : at + 1] != b">":
            found.append(data[at : data.index(b"\r\n", at)])
        at = skip(at)
    return found


def next_message(pubsub: Any) -> Any:
    """The subscription's next message, within 2 s. (``get_message`` returns None early
    when what it read was the answer to its own health check.)"""
    give_up = time.monotonic() + 2
    while time.monotonic() < give_up:
        message = pubsub.get_message(timeout=give_up - time.monotonic())
        if message is not None:
            return message
    return None


class Run:
    """One seed's sequence, and the model of what each key may hold."""

    def __init__(
        self, seed: int, client: redis.Redis, probe: redis.Redis, kind: str, prefix: str = ""
    ) -> None:
        # The "cached" kind reads with GETEX, which redis-py never caches: an entry of its
        # cache a cut left "in progress" makes every later read of the key wait for a reply
        # that is never coming (redis-py's), and its PubSub cannot read through the cache's
        # proxy at all (redis-py 8.1): the application's subscriptions are left out there.
        self.cached = kind.startswith("cached")
        self.rng = random.Random(seed)
        self.client = client
        self.probe = probe  # the truth: a client of its own, never cut short
        # Names of this run's own (prefixed: runs in threads of one client each have theirs).
        self.prefix = prefix
        self.keys = [prefix + key for key in KEYS]
        self.others_key = prefix + OTHERS
        self.free = prefix + "free"  # a lock only this run takes
        self.check_idle = True  # after every step (see nothing_waits_unowed)
        self.may_hold: dict[str, set[bytes | None]] = {
            key: {None} for key in [*self.keys, self.others_key]
        }
        self.made = 0  # values written, each unique
        self.cuts = 0
        self.pubsubs: list[Any] = []  # (see subscription)
        self.cutting = False  # is the step under way to be cut short?
        self.lists = 0  # the blocking pops' lists, one each
        self.log: list[str] = []
        # Runs seen whole, by kind of step and whether a PING was to fail in them (such a
        # run's lines are not the others': a reconnect comes first).
        self.seen_runs: dict[tuple[str, bool], list[tuple[int, list[tuple[int, int]]]]] = {}
        # A connection of its own keeps the server busy in a script while a step is cut short
        # (see BUSY).
        self.busy = probe.connection_pool.make_connection()

    def value(self) -> bytes:
        self.made += 1
        return f"v{self.made}".encode()

    # -- the application's steps: each returns what a cut may have written -------------------

    def single(self, written: dict[str, set[bytes]]) -> None:
        key = self.rng.choice(self.keys)
        what = self.rng.choice(["set", "get", "error", "noscript", "others"])
        if what == "others":
            key = self.others_key
            what = "get" if self.cutting or not self.cached else "cached get"
        self.log[-1] += f" {what} {key}"
        if what == "cached get":
            # Read through redis-py's cache (never cut: see __init__), so that the server
            # tracks the key for this connection and sends it an invalidation when another
            # client writes it (others()).
            self.seen(key, self.client.get(key))
        elif what == "set":
            value = self.value()
            written.setdefault(key, set()).add(value)
            assert self.client.set(key, value) is True
            self.may_hold[key] = {value}
        elif what == "get":
            self.seen(key, self.read(self.client, key))
        elif what == "error":
            with pytest.raises(redis.ResponseError, match="not an integer"):
                self.client.incr(NOT_A_NUMBER)
        else:
            with pytest.raises(redis.exceptions.NoScriptError):
                self.client.evalsha("0" * 40, 0)

    def pipeline(self, written: dict[str, set[bytes]]) -> None:
        transaction = self.rng.random() < 0.5
        raising = self.rng.random() < 0.5
        pairs = [
            (self.rng.choice(["set", "get", "error"]), self.rng.choice(self.keys))
            for _ in range(self.rng.randint(1, 5))
        ]
        self.log[-1] += f" pipeline tx={transaction} raise={raising} {pairs}"
        after = {key: set(values) for key, values in self.may_hold.items()}
        with self.client.pipeline(transaction=transaction) as pipe:
            expected = queue(pipe, pairs, self.value, written, after, self.read)
            try:
                if raising and redis.ResponseError in expected:
                    with pytest.raises(redis.ResponseError, match="not an integer"):
                        pipe.execute(raise_on_error=True)
                    replies = None
                else:
                    replies = pipe.execute(raise_on_error=raising)
            except redis.WatchError:
                # A transaction on a connection an earlier cut left watching (redis-py's: see
                # watched()): nothing ran.
                assert transaction and self.cuts, "a WatchError with no cut before"
                return
        if replies is not None:
            assert len(replies) == len(expected), (replies, expected)
            for reply, want in zip(replies, expected, strict=True):
                if want is redis.ResponseError:
                    assert isinstance(reply, redis.ResponseError), replies
                elif isinstance(want, set):
                    assert reply in want, (replies, expected)
                else:
                    assert reply == want, (replies, expected)
        self.may_hold = after

    def watched(self, written: dict[str, set[bytes]]) -> None:
        key = self.rng.choice(self.keys)
        value = self.value()
        self.log[-1] += f" watch {key}"
        written.setdefault(key, set()).add(value)
        with self.client.pipeline() as pipe:
            pipe.watch(key)
            self.seen(key, self.read(pipe, key))
            pipe.multi()
            pipe.set(key, value)
            try:
                assert pipe.execute() == [True]
            except redis.WatchError:
                # redis-py's: a cut between a WATCH's reply and its pipeline noting that it
                # watches gives the connection back to the pool still watching, and the next
                # transaction on it fails (redis-py's parse_response). Not a reply misread:
                # nothing ran.
                assert self.cuts, "a WatchError with no cut before"
                return
        self.may_hold[key] = {value}

    def subscription(self, written: dict[str, set[bytes]]) -> None:
        self.log[-1] += " subscribe"
        message = self.value()
        pubsub = self.client.pubsub()
        # Kept until the run ends (then see let_pubsubs_go): cut inside redis-py's own
        # PubSub.reset, after its release of the connection and before it forgets it, the
        # object still names a connection back in the pool, and its finaliser -- reset
        # again -- closed and released that connection once another thread had checked it
        # out: that thread's connect read from a closed buffer (AttributeError, CI's 3.12
        # leg, threaded resp3), and the pool had it twice. redis-py's, library or not.
        self.pubsubs.append(pubsub)
        try:
            pubsub.subscribe(self.prefix + "news")
            first = next_message(pubsub)
            assert first is not None and first["type"] == "subscribe", first
            untraced(lambda: self.probe.publish(self.prefix + "news", message))
            got = next_message(pubsub)
            assert got is not None and got["data"] == message, got
        finally:
            pubsub.close()

    def blocking(self, written: dict[str, set[bytes]]) -> None:
        """A blocking pop, on a list of its own. One to be cut waits for an element that
        never comes, so that its reply (nil) reaches the connection well after the cut,
        with the next steps' commands (and, on RESP3, pushes) before it; another finds an
        element there and returns at once (a timeout takes the server's next cron tick)."""
        self.lists += 1
        name = f"{self.prefix}list{self.lists}"
        self.log[-1] += f" blpop {name}"
        if self.cutting:
            assert self.client.blpop([name], timeout=BLOCKED) is None
        else:
            untraced(lambda: self.probe.rpush(name, b"job"))
            popped = self.client.blpop([name], timeout=BLOCKED)
            assert popped is not None and list(popped) == [name.encode(), b"job"], popped

    def others(self, written: dict[str, set[bytes]]) -> None:
        """Another client writes the key the application reads through redis-py's cache: the
        server sends an invalidation push to the connection that read it (review 55: one
        read by the cache's drain before a command was counted as the reply a cut command
        owed, and the next command read that reply). Never cut: it is not the client's."""
        value = self.value()
        self.log[-1] += f" others set {self.others_key}"

        def write() -> None:
            assert self.probe.set(self.others_key, value) is True
            # The push is written in the same turn of the server's loop as the reply, and
            # two round trips more see it sent.
            self.probe.ping()
            self.probe.ping()

        untraced(write)
        self.may_hold[self.others_key] = {value}

    # -- the library's steps, never cut short here (the interrupt-at-every-line tests do) ----

    def lock(self, written: dict[str, set[bytes]]) -> None:
        name = self.rng.choice(["free", "held"])
        self.log[-1] += f" lock {name}"
        if name == "held":
            with pytest.raises(LockNotAcquired), Lock("held", ttl=LOCK_TTL, wait=0):
                pass  # (not inside: another holder has it)
            return
        with Lock(self.free, ttl=LOCK_TTL, wait=0):
            lease = redlock_deco.current_lease()
            assert lease is not None
            token = lease.token.encode()
            assert untraced(lambda: self.probe.get(f"lock:{self.free}")) == token
        assert untraced(lambda: self.probe.exists(f"lock:{self.free}")) == 0

    def let_go(self) -> None:
        """After a lock step cut short: nothing of it stays held past its ttl (no renewal
        left running), and the lock held elsewhere is still the other holder's."""
        give_up = time.monotonic() + LOCK_TTL + 1
        while self.probe.exists(f"lock:{self.free}"):
            assert time.monotonic() < give_up, "a lock cut short stays held past its ttl"
            time.sleep(0.01)

    def read(self, client: Any, key: str) -> Any:
        return client.execute_command("GETEX", key) if self.cached else client.get(key)

    def seen(self, key: str, value: bytes | None) -> None:
        assert value in self.may_hold[key], (key, value, self.may_hold[key])
        self.may_hold[key] = {value}

    def step(self) -> None:
        self.log.append(f"{len(self.log)}:")
        if self.rng.random() < 0.1:
            ping_fails[:] = [True, self.rng.random() < 0.5]  # (only the "health" kind's check)
            self.log[-1] += " ping fails" + (" after its write" if ping_fails[1] else "")
        # The library's lock calls are cut too, at the same lines of redis-py's (and of
        # _pools'): those of its own are the interrupt-at-every-line tests'.
        kind = self.rng.choices(
            [
                *(self.lock, self.single, self.pipeline, self.watched, self.subscription),
                *(self.blocking, self.others),
            ],
            [4, 6, 3, 1, 0 if self.cached else 1, 2, 2 if self.cached else 0],
        )[0]
        written: dict[str, set[bytes]] = {}
        seen = self.seen_runs.setdefault((kind.__name__, ping_fails[0]), [])
        nth = 0
        if seen and kind != self.others and self.rng.random() < CUT:
            # Anywhere in a run like one seen before, or (half the time) between a write and
            # its read there: the window the count of replies owed is for.
            lines, windows = self.rng.choice(seen)
            if windows and self.rng.random() < 0.5:
                first, last = self.rng.choice(windows)
                nth = self.rng.randint(first, last)
            else:
                nth = self.rng.randint(1, lines)
            self.log[-1] += f" cut at line {nth}:"
        # The model before the step, widened by whatever it may have written.
        before = {key: set(values) for key, values in self.may_hold.items()}
        # Half the cuts with the server made busy at a line before theirs: from before the
        # step, or from its middle (after a health check's PING, say, whose answer a busy
        # server from the start would have delayed past it).
        busy_at = self.rng.randint(1, nth) if nth and self.rng.random() < 0.5 else 0
        if busy_at:
            self.log[-1] += f" busy at line {busy_at}"
        cut = Cut(nth, busy_at, lambda: self.busy.send_command("EVAL", BUSY, 0, BUSY_MS))
        self.cutting = nth > 0
        try:
            if cut.run(lambda: kind(written)):
                self.cuts += 1
                self.log[-1] += f" (cut in {cut.where})"
                single_lock_given_back(self.client)
                self.may_hold = before
                for key, values in written.items():
                    self.may_hold[key] |= values
            else:
                seen.append((cut.lines, cut.windows))
                del seen[:-20]
                self.log[-1] += " (ran whole)" if nth else ""
        finally:
            if busy_at and cut.lines >= busy_at:
                assert self.busy.read_response() == 1
        if cut.fired:
            # A cut command written may still run, after the step: on a busy server, after
            # commands of the next steps on other connections. Two round trips of the
            # probe's see it run first: the second is read in a later loop of the server's
            # than any bytes written before the first.
            self.probe.ping()
            self.probe.ping()
            if kind == self.lock:
                self.let_go()
        assert self.probe.get("lock:held") == b"someone-else"  # (never released for another)
        if self.check_idle:
            self.nothing_waits_unowed()

    def end(self) -> None:
        """After the run: its own connection closed, and the subscriptions it kept let go
        with no connection -- a cut one may name one another has checked out since (see
        subscription); the client's close closes them all."""
        self.busy.disconnect()
        for pubsub in self.pubsubs:
            pubsub.connection = None
        self.pubsubs.clear()

    def nothing_waits_unowed(self) -> None:
        """Every idle connection, the application's and the library's, that is not marked as
        owing a reply has none waiting, on its socket or in redis-py's buffer. Checked after
        every step, so that a count short of the truth is found when it happens, not only
        when a later command on that connection happens to be one whose reply is checked
        (a pipeline written after a failed health-check PING was counted as one command: cut
        after its first reply, the rest waited unowed, and a search of 60 seeds a kind
        missed it -- CI found it once)."""
        target = providers.sync_target("default")
        idle = list(self.client.connection_pool._available_connections)  # type: ignore[attr-defined]
        library = target.client.connection_pool
        if library is not self.client.connection_pool:
            idle += library._available_connections
        if target.spares is not None:
            idle += target.spares.connections()
        for connection in idle:
            counted = _pools.counting(connection)
            if counted is None or counted._stale or counted._owed:
                continue
            if counted._sock is None:  # type: ignore[attr-defined]
                continue
            waiting = replies_in(waiting_bytes(counted))
            assert not waiting, f"replies wait on a connection owing none: {waiting}"


def connections(server: RedisServer) -> int:
    with server.client() as probe:
        return int(probe.info("stats")["total_connections_received"])


def client_for(server: RedisServer, kind: str, seed: int) -> redis.Redis:
    """``plain``: the library writes its own commands directly on the client's pool (the
    application's go through redis-py); the others go through redis-py's
    ``execute_command`` for both, as under OpenTelemetry, on RESP2 (``traced``), RESP3
    (``resp3``: push messages among the replies), on RESP3 with a health check before every command
    whose PING sometimes fails (``health``: the failure disconnects, and the retry connects
    again before the command is written), and with redis-py's client-side cache on RESP3
    (``cached``: every connection of the application's inside redis-py's caching proxy, the
    library's commands on an uncached pool of their own; ``cached-traced``: wrapped on the
    instance, so that the library's commands go through the caching proxies too), and a
    traced single-connection client (``single``: the single commands of both on its one
    connection, pipelines and subscriptions on its pool's; redis-py 5.1 and later), also with
    the client-side cache (``cached-single``: the cache's invalidations among the replies of
    the one connection the library sends through too)."""
    # (RESP3: redis-py 8 then skips its checkout's "anything to read?" test, which on RESP2
    # finds a reply left on a connection once it has arrived, and hides a miscount.)
    resp3 = kind in ("resp3", "health") or kind.startswith("cached")
    options: dict[str, Any] = {"protocol": 3 if resp3 else 2}
    if kind == "health":
        # (Every command's health check or every few: a command that PINGs first reads any
        # reply left on its connection as the PING's, and closes it.)
        interval = 1e-6 if seed % 2 else 0.003
        options.update(health_check_interval=interval, retry=Retry(NoBackoff(), 3))
        # No CLIENT SETINFO in the handshake: redis-py 8.2 writes the handshake's last
        # commands (CLIENT MAINT_NOTIFICATIONS on RESP3, the two SETINFOs) before it reads
        # their replies, each with a health check first, and a PING due after the first read
        # that one's reply as its PONG -- a ResponseError out of the connect (redis-py's: it
        # fails so with no library and no PING made to fail). One command left, it cannot.
        if "driver_info" in inspect.signature(redis.Redis).parameters:
            options["driver_info"] = None
        else:
            options.update(lib_name=None, lib_version=None)
    if kind.startswith("cached"):
        from redis.cache import CacheConfig

        options.update(cache_config=CacheConfig())
    if kind.endswith("single"):
        options["single_connection_client"] = True
    client = redis.Redis.from_url(server.url, **options)
    if kind not in ("plain", "cached"):
        wrap_execute_command(client)
    return client


# The health check's next PING fails (the "health" kind): a server that closed an idle
# connection, or a blip.
ping_fails = [False]
pings_failed = [0]  # in this run: each costs a connection (its failure disconnects)


def fail_once(plain: Callable[[Any], None]) -> Callable[[Any], None]:
    """``_send_ping`` failing when ``ping_fails`` says so: before the PING is written, or
    after (its reply then left unread, as when it times out)."""

    def _send_ping(connection: Any) -> None:
        if ping_fails[0]:
            ping_fails[0] = False
            pings_failed[0] += 1
            if len(ping_fails) > 1 and ping_fails[1]:
                connection.send_command("PING", check_health=False)
            raise redis.ConnectionError("the health check's PING failed (injected)")
        plain(connection)

    return _send_ping


def cut_before_the_first_call(client: redis.Redis, run: Run) -> None:
    """An application command cut between its write and its read before the library's
    first call on the client: its reply is left on a connection nobody counted, which the
    library's first call must close before its own commands (or the application's next)
    go on it (review 54, F1: a single-connection client's one connection was not, and the
    first acquire read the ``OK`` as its own). Nothing else runs in between: a command of
    the application's there would read that reply -- redis-py's, before the library has
    seen the client."""
    run.log.append("cut before the library's first call: SET")

    def cut_short(*args: Any, **options: Any) -> Any:
        del client.parse_response  # (redis-py's own again)
        raise KeyboardInterrupt

    client.parse_response = cut_short  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        client.set("cut-before-the-first-call", "yes")


def search(server: RedisServer, kind: str, seed: int) -> None:
    """One seed's run, on a client of its own (so that a seed replays alone)."""
    client = client_for(server, kind, seed)
    pings_failed[0] = 0
    probe = server.client()
    run = Run(seed, client, probe, kind)
    try:
        probe.flushall()
        probe.set(NOT_A_NUMBER, "x")
        probe.set("lock:held", "someone-else")
        if seed % 2:
            # The application's connections first, made before the library sees the client
            # (review 47: a caching proxy made then was made whole, not its connection).
            assert client.get(KEYS[0]) is None
            assert client.pipeline().get(KEYS[1]).execute() == [None]
        if seed % 3 == 0:
            cut_before_the_first_call(client, run)
        redlock_deco.register_provider("default", client)
        with pytest.raises(LockNotAcquired), Lock("held", ttl=5, wait=0.2):
            pass  # (the library's first call: it guards the pool; never inside on the OK)
        with Lock("warm", ttl=5):
            pass
        before = connections(server)
        for _ in range(STEPS):
            run.step()
        made = connections(server) - before
        # A cut may close the connection it cut (once), or leave it out of the pool for good
        # (a cut inside the checkout or the release): a new one each; so does a failed
        # health-check PING. The rest: the probes' own and a subscription's first connect.
        assert made <= 2 * run.cuts + pings_failed[0] + 4, (
            f"{made} connections for {run.cuts} cuts and {pings_failed[0]} failed PINGs"
        )
    except BaseException:
        print(f"seed {seed} ({kind}), REDLOCK_DECO_SEED={seed} replays it:")
        print("\n".join(run.log[-25:]))
        raise
    finally:
        ping_fails[:] = [False]
        redlock_deco.register_provider("default", server.url)
        run.end()
        probe.close()
        client.close()


KINDS = ["plain", "traced", "resp3", "health", "cached", "cached-traced", "single", "cached-single"]


@searching(KINDS)
def test_every_reply_is_read_by_its_own_command_and_no_healthy_connection_is_closed(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch, kind: str, runs: int
) -> None:
    """See the module; the kinds of client: :func:`client_for`."""
    if kind.startswith("cached"):
        caching_allowed(server, monkeypatch)
    if kind.endswith("single") and not hasattr(redis.Redis(), "single_connection_lock"):
        pytest.skip("redis-py < 5.1: the library refuses such a client (it has no lock)")
    if kind == "health":
        plain = redis.connection.AbstractConnection._send_ping
        monkeypatch.setattr(redis.connection.AbstractConnection, "_send_ping", fail_once(plain))
    for seed in seeds(runs):
        search(server, kind, seed)

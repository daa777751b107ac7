"""Drivers for a quorum of independent masters (Redlock): one protocol step sent to every
master at once, every reply (or failure) collected within one node timeout.

A sync round is pipelined on the caller's thread: the command is written to every master
first, then the replies are read against one shared deadline, so a round costs about one
round trip however many masters there are. (A thread per master cost several thread
hand-offs per round: 3 masters ran at a third of one master's rate, 5 at a sixth.)

Order on a master that answers late. Giving up on a command does not cancel it: a stalled
server still has it in its socket buffer and runs it when it resumes. Closing the connection
would let it run *after* a command sent later on another connection -- the release that
``Quorum.acquire`` sends to every master right after a failed round, say -- and leave a lease
under a token nobody holds on that master until its ttl ends. So a connection that still
owes replies stays with the thread that gave up on it, and that thread's next command to the
master is written behind the unanswered ones (whose replies are then read and dropped).
Redis runs one connection's commands in order, so a late acquire is followed, never
overtaken, by the release its thread sends after it, however long the master stalls: the
order the former serial worker per master kept. Past MAX_OWED unanswered commands the
connection is closed instead; at worst one lease is then left to expire on that one master.
The scripts compare tokens, so mutual exclusion never depends on this order, only that
master's availability for the name does.

Connections are *made* only on a master's connector thread: redis-py connects inside
``get_connection`` under the client's own timeouts and retries (seconds, or no limit at all
for a client without a socket timeout), and a dead or paused master must cost a round at
most the node timeout. Between rounds the connections stay with the target, ready; a round
holds one per master inside the node's connection lane, so the lanes bound them too.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from redis.exceptions import ConnectionError, NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._drivers import AsyncTarget, SyncTarget, checkout, command, fallback, lane_of
from ._protocol import Algorithms, Eval, Fanout, Sleep, Step
from ._quorum import Quorum
from ._worker import SerialWorker

# How long a quorum round waits for each master: short against any sensible ttl, so a dead
# or paused master costs a round this much, not a socket timeout.
NODE_TIMEOUT = 0.25
# Unanswered commands a connection may carry before it is closed: a master stalled for good
# must not fill the socket buffers (a full one would block the next write).
MAX_OWED = 32
# A connection owing replies for longer than this is closed, not waited on any more: replies
# can go missing without the connection closing (a proxy that drops them), and a thread
# would otherwise read every later reply one command late, for good.
MAX_BEHIND = 8 * NODE_TIMEOUT
# While connections are being made, the replies already sent for are looked at this often.
POLL = 0.002

_NO_REPLY = object()
_MADE: Future[None] = Future()
_MADE.set_result(None)


class _Backlog:
    """A connection still owing replies to commands its thread stopped waiting for."""

    __slots__ = ("conn", "owed", "owner", "since")

    def __init__(self, conn: Any, owed: int, owner: threading.Thread, since: float) -> None:
        self.conn = conn
        self.owed = owed
        self.owner = owner
        self.since = since  # when it first fell behind


class _Master:
    """One master's connections for sync rounds: the ready ones (connected, nothing pending),
    each thread's connection still owing replies, and the thread that makes new ones."""

    def __init__(self, node: SyncTarget) -> None:
        self.node = node
        self.client = node.client
        # None: a cluster client, which routes by key over pools of its own; its rounds run
        # node.execute on the worker thread instead (see QuorumSyncTarget._delegate).
        self.pool: Any = getattr(node.client, "connection_pool", None)
        self.lanes = node.lanes
        self.ready: list[Any] = []  # list.pop/append are atomic: the hot path takes no lock
        self.behind: dict[int, _Backlog] = {}  # thread ident -> its unanswered connection
        self.lock = threading.Lock()
        self.worker = SerialWorker("redlock-deco-quorum")  # makes connections
        self.connecting: Future[None] | None = None  # at most one connect under way
        self.retired = False

    def backlog(self) -> _Backlog | None:
        """This thread's connection still owing replies, taken for use (None: it has none)."""
        if not self.behind:
            return None
        with self.lock:
            backlog = self.behind.pop(threading.get_ident(), None)
        if backlog is not None and not _connected(backlog.conn):  # the pool was disconnected
            self.pool.release(backlog.conn)
            return None
        if backlog is not None and time.monotonic() - backlog.since > MAX_BEHIND:
            self.drop(backlog.conn)  # behind for too long: start afresh, in step again
            return None
        return backlog

    def pop(self) -> Any:
        """A ready connection, or None. One the pool disconnected under us is handed back:
        writing to it would connect on the caller's thread."""
        while True:
            try:
                conn = self.ready.pop()
            except IndexError:
                return None
            if _connected(conn):
                return conn
            self.pool.release(conn)

    def connect_soon(self) -> Future[None]:
        """Have a connection made and put among the ready ones, unless one is under way or
        ready already (the future is done then)."""
        with self.lock:
            if self.connecting is None:
                if self.ready:
                    return _MADE
                self.connecting = self.worker.submit(self._connect)
            return self.connecting

    def _connect(self) -> None:
        try:
            conn = checkout(self.pool)
            self.give(conn)
        finally:
            with self.lock:
                self.connecting = None

    def give(self, conn: Any) -> None:
        """Keep ``conn``, with nothing pending on it, for the next round."""
        self.ready.append(conn)
        if self.retired:
            self._hand_back()

    def owe(self, conn: Any, owed: int, since: float | None) -> None:
        """Keep ``conn``, still owing ``owed`` replies (since ``since``, None: from now), for
        this thread's next command."""
        if owed > MAX_OWED or self.retired:
            self.drop(conn)
            return
        current = threading.current_thread()
        with self.lock:
            gone = [ident for ident, b in self.behind.items() if not b.owner.is_alive()]
            ended = [self.behind.pop(ident).conn for ident in gone]
            self.behind[threading.get_ident()] = _Backlog(
                conn, owed, current, time.monotonic() if since is None else since
            )
        for dead in ended:  # their threads will send nothing more after them
            self.drop(dead)

    def drop(self, conn: Any) -> None:
        """Close ``conn`` (whatever it still owes is never read) and hand it back."""
        conn.disconnect()
        self.pool.release(conn)

    def lost(self) -> None:
        """The master closed a connection: the ready ones are likely dead too."""
        while (conn := self.pop()) is not None:
            self.drop(conn)

    def retire(self) -> None:
        self.retired = True
        self.worker.retire()
        with self.lock:
            behind = [b.conn for b in self.behind.values()]
            self.behind.clear()
        for conn in behind:
            self.drop(conn)
        self._hand_back()

    def _hand_back(self) -> None:
        while (conn := self.pop()) is not None:
            self.pool.release(conn)


def _connected(conn: Any) -> bool:
    """redis-py 5.0 has no ``is_connected``; its ``_sock`` is what the property reads."""
    connected = getattr(conn, "is_connected", None)
    return connected if isinstance(connected, bool) else conn._sock is not None


class _Call:
    """One master's part of one round."""

    __slots__ = (
        "behind_since", "broken", "conn", "lane", "master", "name", "owed", "reply", "resend",
        "sent",
    )  # fmt: skip

    def __init__(self, master: _Master, name: str, resend: _Packer | None) -> None:
        self.master = master
        self.name = name  # the command whose reply is awaited (EVAL after a NOSCRIPT)
        self.resend = resend  # the EVAL to send on NOSCRIPT
        self.conn: Any = None
        self.lane: Any = None  # the semaphore held while ``conn`` is in use
        self.owed = 0  # replies still to come on ``conn``; this call's own is the last
        self.behind_since: float | None = None  # ``conn`` has owed replies since then
        self.sent = False
        self.broken = False  # ``conn`` failed: close it
        self.reply: Any = _NO_REPLY

    @property
    def awaiting(self) -> bool:
        return self.sent and not self.broken and self.reply is _NO_REPLY

    def open(self, lane: int) -> None:
        """Take this thread's connection still owing replies, else a place in the lane and a
        ready connection (none ready: ``conn`` stays None, to be made once the others are
        sent). A lane's places are held by other rounds, each over within the node timeout,
        or by one command (drivers.SyncTarget): the wait for one ends with theirs."""
        master = self.master
        backlog = master.backlog()
        if backlog is not None:
            self.conn, self.owed, self.behind_since = backlog.conn, backlog.owed, backlog.since
            return
        if master.lanes is not None:
            self.lane = master.lanes[lane]
            self.lane.acquire()
        self.conn = master.pop()

    def send(self, packed: Any) -> None:
        try:
            # No health check: its PING would be answered after replies still owed.
            self.conn.send_packed_command(packed, check_health=False)
        except Exception as exc:  # redis-py closed the connection
            self.reply, self.broken = exc, True
            return
        self.sent, self.owed = True, self.owed + 1

    def read(self, deadline: float) -> None:
        """Read up to this call's own reply (earlier ones were given up on) by ``deadline``
        (past: only what has arrived); on NOSCRIPT, send the script itself and read on."""
        conn, client = self.conn, self.master.client
        try:
            while self.awaiting and conn.can_read(max(0.0, deadline - time.monotonic())):
                self.owed -= 1
                if self.owed:
                    with contextlib.suppress(ResponseError):
                        conn.read_response()  # a reply nobody waits for any more
                    continue
                try:
                    self.reply = client.parse_response(conn, self.name)
                except NoScriptError as exc:
                    if self.resend is None or self.name == "EVAL":
                        self.reply = exc
                    else:  # the server forgot the script (restarted, flushed)
                        self.name = "EVAL"
                        self.send(self.resend(conn))
                except ResponseError as exc:  # an answer all the same
                    self.reply = exc
        except Exception as exc:  # closed, reset, or a reply cut short
            self.reply, self.broken = exc, True

    def settle(self) -> None:
        """Hand the connection on (clean: ready; owing replies: to this thread's next command
        to the master; failed: closed) and release the lane."""
        master, conn = self.master, self.conn
        if conn is not None:
            if self.broken:
                master.drop(conn)
                if isinstance(self.reply, ConnectionError):
                    master.lost()
            elif self.owed:
                master.owe(conn, self.owed, self.behind_since)
            else:
                master.give(conn)
        if self.lane is not None:
            self.lane.release()

    def result(self, timeout: float) -> Any:
        if self.reply is _NO_REPLY:
            return RedisTimeoutError(f"no reply from this master within {timeout} s")
        return self.reply


def _connect(calls: list[_Call], others: list[_Call], deadline: float, pack: _Packer) -> None:
    """Have connections made for ``calls`` (on the masters' worker threads, all at once) and
    send on each as it comes, reading the ``others``' replies meanwhile, until ``deadline``.
    A connection made too late stays ready for the next round."""
    while True:
        for call in calls:
            call.conn = call.master.pop()  # made, unless another round took it
            if call.conn is not None:
                call.send(pack(call.conn))
        calls = [call for call in calls if call.conn is None]
        for call in others:
            call.read(0.0)  # what has arrived: a NOSCRIPT must not wait for a slow connect
        remaining = deadline - time.monotonic()
        if not calls or remaining <= 0:
            return
        making = {call.master.connect_soon(): call for call in calls}
        if any(call.awaiting for call in others):
            remaining = min(remaining, POLL)
        done, _ = wait(making, remaining, return_when=FIRST_COMPLETED)
        for future in done:
            error = future.exception()
            if error is not None:  # refused, unreachable, a full pool...
                making[future].reply = error
                calls.remove(making[future])


class _Packer:
    """A command packed once per round for every connection that encodes alike."""

    __slots__ = ("args", "packed")

    def __init__(self, args: tuple[str | int, ...]) -> None:
        self.args = args
        self.packed: dict[object, Any] = {}

    def __call__(self, conn: Any) -> Any:
        encoder = getattr(conn, "encoder", None)
        key = (encoder.encoding, encoder.encoding_errors) if encoder is not None else id(conn)
        packed = self.packed.get(key)
        if packed is None:
            packed = self.packed[key] = conn.pack_command(*self.args)
        return packed


class QuorumSyncTarget:
    """Independent masters, each a SyncTarget, driven together for the quorum algorithms."""

    listening = False  # a quorum waits with backoff, never for a hand-off

    def __init__(self, nodes: list[SyncTarget], node_timeout: float = NODE_TIMEOUT) -> None:
        self.nodes = nodes
        self.node_timeout = node_timeout
        self.algorithms: Algorithms = Quorum(len(nodes))
        self.renewal_worker: SerialWorker | None = None
        self.checked = False
        self._masters = [_Master(node) for node in nodes]

    def retire(self) -> None:
        """This target was replaced (its provider registered again): let its threads and
        connections go."""
        for master in self._masters:
            master.retire()
        if self.renewal_worker is not None:
            self.renewal_worker.retire()

    def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        assert isinstance(step, Fanout), step
        return self._round(step.step)

    def _round(self, step: Eval) -> list[object]:
        """Send ``step`` to every master, then read every reply, all by one deadline."""
        deadline = time.monotonic() + self.node_timeout
        args = command(step)
        name, pack = str(args[0]), _Packer(args)
        resend = _Packer(fallback(step)) if name == "EVALSHA" else None
        calls = [_Call(master, name, resend) for master in self._masters]
        delegated = self._delegate(calls, step)
        piped = [call for call in calls if call.master.pool is not None]
        try:
            lane = lane_of(step)
            for call in piped:  # each sent as soon as it can be: a wait for a lane delays
                call.open(lane)  # only its own master
                if call.conn is not None:
                    call.send(pack(call.conn))
            unready = [call for call in piped if call.conn is None]
            if unready:
                _connect(unready, piped, deadline, pack)
            for call in piped:
                call.read(deadline)
            for call, future in delegated:
                wait([future], max(0.0, deadline - time.monotonic()))
                if future.done():
                    error = future.exception()
                    call.reply = future.result() if error is None else error
        finally:
            for call in calls:
                call.settle()
        return [call.result(self.node_timeout) for call in calls]

    def _delegate(self, calls: list[_Call], step: Eval) -> list[tuple[_Call, Future[Any]]]:
        """Masters without a pool of their own (cluster clients) run the step through their
        node, on their worker thread: one at a time, so in order, as before pipelining."""
        return [
            (call, call.master.worker.submit(call.master.node.execute, step))
            for call in calls
            if call.master.pool is None
        ]


class QuorumAsyncTarget:
    """Independent masters, each an AsyncTarget, driven together for the quorum algorithms."""

    listening = False

    def __init__(self, nodes: list[AsyncTarget], node_timeout: float = NODE_TIMEOUT) -> None:
        self.nodes = nodes
        self.node_timeout = node_timeout
        self.algorithms: Algorithms = Quorum(len(nodes))
        self.checked = False

    async def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        assert isinstance(step, Fanout), step
        return await asyncio.gather(
            *(asyncio.wait_for(node.execute(step.step), self.node_timeout) for node in self.nodes),
            return_exceptions=True,
        )

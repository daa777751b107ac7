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
order the former serial worker per master kept. A connection its thread must stop using
while it owes replies (past MAX_OWED or MAX_BEHIND, or its thread ended) is not closed: a
closed connection's commands run only until the server first fails to write a reply to it,
then the rest are dropped, so a release written behind an acquire could be lost while the
acquire runs -- and one sent on another connection could run before it. Either leaves an
orphan lease (review finding b04: a master paused for more than MAX_BEHIND kept leases of
finished calls for their whole ttl). Instead the release of every acquire attempt among what
it owes is written behind them, and a drainer thread reads the replies until the master has
answered everything (or the connection fails, or DRAIN_MAX passes), then hands it back. The
scripts compare tokens, so mutual exclusion never depends on this order, only that master's
availability for the name does.

The asyncio fan-out keeps the same order another way: a command whose master did not answer
in time is not cancelled (a cancelled redis-py command closes its connection, and the
server still runs what it had received); it runs on in the background, and the next
command for that master is sent only once it has ended (:class:`_AsyncMaster`).

Connections are *made* only on a master's connector thread: redis-py connects inside
``get_connection`` under the client's own timeouts and retries (seconds, or no limit at all
for a client without a socket timeout), and a dead or paused master must cost a round at
most the node timeout. Between rounds the connections stay with the target, ready; a round
holds one per master inside the node's connection lane, so the lanes bound them too.

Why one module: the sync and asyncio quorum targets keep one promise (a late command is never
overtaken by a later release) in two ways, and are read side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from redis.exceptions import ConnectionError, NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._drivers import (
    AsyncTarget,
    SyncTarget,
    _takes_command_name,
    checkout,
    command,
    fallback,
    lane_of,
)
from ._errors import ProviderError
from ._protocol import Algorithms, Eval, Fanout, Sleep, Step, undo_step
from ._quorum import Quorum
from ._worker import Lanes, Outcome, SerialWorker, done_outcome, first_done, start

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
# A connection set aside with replies owed is read until they came, for at most this long;
# then it is closed (a master stalled that long: what it had not run yet may be lost).
DRAIN_MAX = 600.0

_NO_REPLY = object()

# A round's lane places are given back all at once, in one C call that runs every call's
# ``give_place`` (see QuorumSyncTarget._round): no signal lands between two of them.
_NO_PLACE: Callable[[], object] = tuple  # (a C callable that does nothing)
_GIVE_PLACES = operator.methodcaller("__call__")
_PLACE_OF = operator.attrgetter("give_place")
_MADE: Outcome[None] = done_outcome(None)


class _Backlog:
    """A connection still owing replies to commands its thread stopped waiting for."""

    __slots__ = ("conn", "owed", "owner", "since", "undo")

    def __init__(
        self, conn: Any, owed: int, owner: threading.Thread, since: float, undo: list[Eval]
    ) -> None:
        self.conn = conn
        self.owed = owed
        self.owner = owner
        self.since = since  # when it first fell behind
        self.undo = undo  # releases of the acquire attempts among what it owes


def _ended(behind: dict[int, _Backlog]) -> list[_Backlog]:
    """Take out of ``behind`` the backlogs of threads that have ended. A function of its
    own, as every loop run under a C lock: on Python 3.13 an interrupt at such a loop's back
    edge, written inside the ``with``, skipped its exit and left the lock held for good
    (test_back_edges)."""
    gone = [ident for ident, backlog in behind.items() if not backlog.owner.is_alive()]
    return [behind.pop(ident) for ident in gone]


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
        self.connecting: Outcome[None] | None = None  # at most one connect under way
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
            self.set_aside(backlog.conn, backlog.owed, backlog.undo)  # start afresh
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

    def connect_soon(self) -> Outcome[None]:
        """Have a connection made and put among the ready ones, unless one is under way or
        ready already (the outcome is done then)."""
        with self.lock:
            if self.connecting is None:
                if self.ready:
                    return _MADE
                self.connecting = self.worker.submit(self._connect)
            return self.connecting

    def _connect(self) -> None:
        try:
            # (on the master's own worker thread; for the round waiting for it, even on a
            # retired master: handed back at once, as give() does there, no round ever got
            # one -- every lease held through a quorum provider registered again was
            # reported lost, its keys left until their ttl (review 63, F1). It goes back as
            # that round gives it back.)
            self.ready.append(checkout(self.pool, []))
        finally:
            with self.lock:
                self.connecting = None

    def give(self, conn: Any) -> None:
        """Keep ``conn``, with nothing pending on it, for the next round."""
        self.ready.append(conn)
        if self.retired:
            self._hand_back()

    def owe(self, conn: Any, owed: int, since: float | None, undo: list[Eval]) -> None:
        """Keep ``conn``, still owing ``owed`` replies (since ``since``, None: from now), for
        this thread's next command; ``undo``: releases of the acquire attempts it owes."""
        if owed > MAX_OWED or self.retired:
            self.set_aside(conn, owed, undo)
            return
        current = threading.current_thread()
        with self.lock:
            ended = _ended(self.behind)  # (a loop under a C lock: see _ended)
            self.behind[threading.get_ident()] = _Backlog(
                conn, owed, current, time.monotonic() if since is None else since, undo
            )
        for dead in ended:  # their threads will send nothing more after them
            self.set_aside(dead.conn, dead.owed, dead.undo)

    def set_aside(self, conn: Any, owed: int, undo: list[Eval]) -> None:
        """Stop using ``conn``, which owes ``owed`` replies: write ``undo`` behind them, so an
        acquire attempt the master has yet to run is released right after it runs (EVAL,
        not EVALSHA: the master may have forgotten the script by then), and have a drainer
        read every reply before the connection goes back (see the module's docstring)."""
        if undo:
            try:
                packed = [part for step in undo for part in conn.pack_command(*fallback(step))]
                conn.send_packed_command(packed, check_health=False)
            except Exception:  # the connection failed: what it carried ends with it
                self.drop(conn)
                return
        drainer = threading.Thread(
            target=self._drain, args=(conn, owed + len(undo)), name="redlock-deco-drain",
            daemon=True,
        )  # fmt: skip
        if not start(drainer):
            self.drop(conn)

    def _drain(self, conn: Any, owed: int) -> None:
        deadline = time.monotonic() + DRAIN_MAX
        try:
            while True:  # (shaped for Python 3.13: see test_back_edges)
                remaining = deadline - time.monotonic()
                if not owed or remaining <= 0:
                    break
                if not conn.can_read(min(1.0, remaining)):
                    continue
                with contextlib.suppress(ResponseError):
                    conn.read_response()
                owed -= 1
        except Exception:  # closed or reset: nothing more of it runs
            owed = -1
        if owed:
            self.drop(conn)
        else:
            self.give(conn)

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
            behind = list(self.behind.values())
            self.behind.clear()
        for backlog in behind:
            self.set_aside(backlog.conn, backlog.owed, backlog.undo)
        self._hand_back()

    def _hand_back(self) -> None:
        """Retired: every connection goes back to its pool -- closed, if the pool is the
        library's (SyncTarget.retire closed its idle ones already: one drained or made after
        that went back open and stayed so until the collector came, the 3.12 CI leg)."""
        while (conn := self.pop()) is not None:
            if self.node.owned:
                conn.disconnect()
            self.pool.release(conn)


def _connected(conn: Any) -> bool:
    """redis-py 5.0 has no ``is_connected``; its ``_sock`` is what the property reads."""
    connected = getattr(conn, "is_connected", None)
    return connected if isinstance(connected, bool) else conn._sock is not None


class _Call:
    """One master's part of one round."""

    __slots__ = (
        "behind_since", "broken", "conn", "give_place", "master", "name", "owed", "reply",
        "resend",
        "sent", "undo", "undoes",
    )  # fmt: skip

    def __init__(
        self, master: _Master, name: str, resend: _Packer | None, undoes: Eval | None
    ) -> None:
        self.master = master
        self.name = name  # the command whose reply is awaited (EVAL after a NOSCRIPT)
        self.resend = resend  # the EVAL to send on NOSCRIPT
        self.undoes = undoes  # the release undoing this call's command (an acquire attempt)
        self.undo: list[Eval] = []  # releases of the acquire attempts ``conn`` owes replies to
        self.conn: Any = None
        # Gives back the lane place held while ``conn`` is in use (a C callable: see _round)
        self.give_place: Callable[[], object] = _NO_PLACE
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
            self.undo = backlog.undo
            return
        if master.lanes is not None:
            places = master.lanes[lane]
            self.give_place = places.release  # (before: see drivers.Places)
            places.acquire()
        self.conn = master.pop()

    def send(self, packed: Any) -> None:
        try:
            # No health check: its PING would be answered after replies still owed.
            self.conn.send_packed_command(packed, check_health=False)
        except Exception as exc:  # redis-py closed the connection
            self.reply, self.broken = exc, True
            return
        self.sent, self.owed = True, self.owed + 1
        if self.undoes is not None:
            self.undo.append(self.undoes)

    def read(self, deadline: float) -> None:
        """Read up to this call's own reply (earlier ones were given up on) by ``deadline``
        (past: only what has arrived); on NOSCRIPT, send the script itself and read on."""
        conn, client = self.conn, self.master.client
        try:
            while True:  # (shaped for Python 3.13: see test_back_edges)
                if not (self.awaiting and conn.can_read(max(0.0, deadline - time.monotonic()))):
                    break
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
        to the master; failed: closed). Its lane place is the round's to give back."""
        master, conn = self.master, self.conn
        if conn is not None:
            if self.broken:
                master.drop(conn)
                if isinstance(self.reply, ConnectionError):
                    master.lost()
            elif self.owed:
                master.owe(conn, self.owed, self.behind_since, self.undo)
            else:
                master.give(conn)

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
        for outcome in first_done(making, remaining):
            error = outcome.exception()
            if error is not None:  # refused, unreachable, a full pool...
                making[outcome].reply = error
                calls.remove(making[outcome])


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
        self.renewal_worker: Lanes | None = None
        self.checked = False
        self._masters = [_Master(node) for node in nodes]

    def retire(self) -> None:
        """This target was replaced (its provider registered again): let its threads and
        connections go."""
        for master in self._masters:
            master.retire()
        for node in self.nodes:  # the eviction check's commands went through their spares,
            node.retire()  # whose kept connections were never given back (CI: unclosed socket)
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
        undoes = undo_step(step)
        calls = [_Call(master, name, resend, undoes) for master in self._masters]
        delegated = self._delegate(calls, step)
        piped = [call for call in calls if call.master.pool is not None]
        counted = False
        # Every lane place is given back by this one C call (see the finally), made before
        # anything is taken: the give_place each call holds then is read as it runs.
        give_places: Callable[[], object] = partial(list, map(_GIVE_PLACES, map(_PLACE_OF, calls)))
        try:
            lane = lane_of(step)
            for call in piped:  # each sent as soon as it can be: a wait for a lane delays
                call.open(lane)  # only its own master
                if call.conn is None:  # (not `if conn is not None: send`: test_back_edges)
                    continue
                call.send(pack(call.conn))
            unready = list(call for call in piped if call.conn is None)  # (see above)
            if unready:
                _connect(unready, piped, deadline, pack)
            for call in piped:
                call.read(deadline)
            for call, future in delegated:
                if not future.wait(max(0.0, deadline - time.monotonic())):
                    continue  # (shaped for Python 3.13: see test_back_edges)
                error = future.exception()
                call.reply = future.result() if error is None else error
            counted = True
        finally:
            # Every lane place first, all in one C call and the first call here: a signal
            # lands as a Python function starts, as a loop jumps back and as any call
            # returns, and one landing between two masters' settle() (review 97, F1), or as
            # the map() building such a give-back here returned (review 98, F1), left places
            # taken for good -- every renewal and release of the process, the interrupt's own
            # clean-up first, then waited PLACE_WAIT. An interrupt in the loop below loses
            # connections at most, as GUARANTEES says of an interrupted round.
            give_places()
            for call in calls:
                if not counted:
                    # Interrupted (a KeyboardInterrupt, a signal handler's exception): what
                    # each connection still owes can no longer be counted -- one cut between
                    # a read and its count left a connection a reply off, and a later round
                    # read an earlier command's reply as its acquire's (review 42:
                    # ScriptReplyError, and once two holders with no LockLost). Closed: what
                    # it carried expires by its ttl, as GUARANTEES says of an interrupted round.
                    call.broken = True
                call.settle()
        return [call.result(self.node_timeout) for call in calls]

    def _delegate(self, calls: list[_Call], step: Eval) -> list[tuple[_Call, Outcome[Any]]]:
        """Masters without a pool of their own (cluster clients) run the step through their
        node, on their worker thread: one at a time, so in order, as before pipelining."""
        return [
            (call, call.master.worker.submit(call.master.node.execute, step))
            for call in calls
            if call.master.pool is None
        ]


class _AsyncMaster:
    """One master of an asyncio quorum. Its commands for one key run one after another, in
    the order the rounds sent them, each to its end even when its round stopped waiting for
    it: each is written and read on a connection of its own, with no read timeout (a
    redis-py timeout or cancellation closes the connection, and the master then runs only
    part of what it had received), and the next one for that key is sent once it ended."""

    __slots__ = ("node", "running", "tails")

    def __init__(self, node: AsyncTarget) -> None:
        self.node = node
        self.tails: dict[str, asyncio.Task[Any]] = {}  # key -> its last command
        self.running: set[asyncio.Task[Any]] = set()  # referenced until done (asyncio won't)

    async def call(self, step: Eval, timeout: float) -> Any:
        """``step``'s reply, or the error it failed with; a TimeoutError past ``timeout``
        (the command then still runs, and the next one for its key waits for it)."""
        if len(self.running) >= MAX_OWED and undo_step(step) is not None:
            # A master stalled for good: no new acquire attempts pile up. Releases and
            # extensions still queue behind what is owed (refused, a release would leave the
            # acquire before it an orphan lease when the master comes back; found in review).
            return RedisTimeoutError(f"{len(self.running)} commands still owed by this master")
        try:
            # Here, not as it is sent: a command queued before the loop began to close still
            # goes out after (a release behind an acquire a stalled master still owes; dropped,
            # it left that acquire an orphan lease once the master came back: review 41, F3).
            self.node.check_open(step)
        except ProviderError as exc:
            return exc
        key = step.keys[0]
        before = self.tails.get(key)

        async def run() -> Any:
            if before is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(before)
            try:
                # (Queued behind one a stalled master still owed as the loop's shutdown
                # sealed the client: closing it ended that one, and this one reconnected it,
                # left unclosed and pending as the loop closed -- review 103b, F2.)
                self.node.check_open(step)
                return await self._send(step)
            except Exception as exc:  # the round's answer from this master, never an error
                return exc  # left unretrieved (asyncio.run reports those at shutdown)

        task = asyncio.get_running_loop().create_task(run(), name="redlock-deco-quorum")
        self.tails[key] = task
        self.running.add(task)
        task.add_done_callback(lambda done: self._done(key, done))
        finished, _ = await asyncio.wait({task}, timeout=timeout)
        if not finished:
            return RedisTimeoutError(f"no reply from this master within {timeout} s")
        return asyncio.CancelledError() if task.cancelled() else task.result()

    async def _send(self, step: Eval) -> Any:
        pool = getattr(self.node.client, "connection_pool", None)
        if pool is None:  # a cluster client routes by key over pools of its own
            return await self.node.execute(step)
        self.node.sending += 1  # the loop's shutdown lets it end before closing the client
        try:
            return await self._send_on(pool, step)
        finally:
            self.node.sending -= 1

    async def _send_on(self, pool: Any, step: Eval) -> Any:
        named = _takes_command_name(pool)
        conn = await (pool.get_connection("EVALSHA") if named else pool.get_connection())
        clean = False
        try:
            try:
                reply = await _roundtrip(conn, command(step))
            except NoScriptError:
                reply = await _roundtrip(conn, fallback(step))
            clean = True
            return reply
        except ResponseError:
            clean = True  # an answer: the connection is in a clean state
            raise
        finally:
            if not clean:
                await conn.disconnect()
            await pool.release(conn)

    def _done(self, key: str, task: asyncio.Task[Any]) -> None:
        self.running.discard(task)
        if self.tails.get(key) is task:
            del self.tails[key]


async def _roundtrip(conn: Any, args: tuple[str | int, ...]) -> Any:
    await conn.send_packed_command(conn.pack_command(*args), check_health=False)
    return await conn.read_response(timeout=DRAIN_MAX)


class QuorumAsyncTarget:
    """Independent masters, each an AsyncTarget, driven together for the quorum algorithms."""

    listening = False

    def __init__(self, nodes: list[AsyncTarget], node_timeout: float = NODE_TIMEOUT) -> None:
        self.nodes = nodes
        self.node_timeout = node_timeout
        self.algorithms: Algorithms = Quorum(len(nodes))
        self.checked = False
        self.busy = 0  # algorithms running on it now (see drivers.run_async)
        self._masters = [_AsyncMaster(node) for node in nodes]

    def stop(self) -> None:
        """Its loop is closing: take nothing more on its masters (see AsyncTarget.stop)."""
        for node in self.nodes:
            node.stop()

    def seal(self) -> None:
        """Its masters' clients are being closed: send nothing more on them."""
        for node in self.nodes:
            node.seal()

    @property
    def sending(self) -> int:
        """Commands in flight or queued behind one a master still owes."""
        return sum(node.sending for node in self.nodes) + self.owed

    @property
    def owed(self) -> int:
        """Commands not yet answered by their master (a loop's shutdown waits for these up
        to its SHUTDOWN_TIMEOUT: each release among them ends a lease that would otherwise
        outlive its call on a master that was stalled)."""
        return sum(len(master.running) for master in self._masters)

    async def execute(self, step: Step) -> Any:
        # As AsyncTarget.execute: stopped by its loop's shutdown, a round takes nothing more,
        # a waiter's sleep included; polled on, a quorum waiter in a generator's clean-up
        # kept asyncio.run from ending until its wait ran out -- for good with wait=None
        # (review 103b, F1). Releases still go out (see _AsyncMaster.call).
        for node in self.nodes:
            node.check_open(step.step if isinstance(step, Fanout) else step)
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        assert isinstance(step, Fanout), step
        return list(
            await asyncio.gather(
                *(master.call(step.step, self.node_timeout) for master in self._masters)
            )
        )

"""The simulated world: processes, actors, the network, the server and the scheduler.

Everything runs in one thread, on a virtual clock (integer microseconds), from a plan drawn
from a seed (:mod:`.plan`). Actors run the **production** decision code: they build claims with
``_guard._claim``, take the lean first attempt with ``fast_try``/``fast_granted``, run the
``SingleNode.acquire``/``release`` generators, build ``Lease`` objects and renew them with
``_renewal.due``/``plan``/``conclude``, and read grants through ``_waiting``'s ``Board`` (and
``Registry`` where it exists). What the simulator supplies is what production gets from I/O:
it executes each step as ``_drivers.SyncTarget.execute``/``_send`` does (EVALSHA, NOSCRIPT ->
EVAL, the client's Retry on ConnectionError), delivers PUBLISHed grants to the process's one
subscription, and runs the store's Lua.

An actor program is a generator that yields *system calls* to the world (``("net", args)``,
``("listen", token, ttl)``, ``("wait", registration, timeout)``, ``("sleep", s)``,
``("park", until)``); the world resumes it with the reply or throws the exception the client
would raise (redis-py's ConnectionError, TimeoutError, ResponseError, NoScriptError).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import heapq
import math
import random
import threading
from collections import Counter, deque
from collections.abc import Callable, Generator
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from redlock_deco import _guard as guard
from redlock_deco import _lifecycle as lifecycle
from redlock_deco import _protocol as protocol
from redlock_deco import _providers as providers
from redlock_deco import _renewal as renewal
from redlock_deco import _scripts as scripts
from redlock_deco import _waiting as waiting

from . import plan as plans
from .invariants import Invariants, Violation
from .store import NON_LOCAL, Error, Store

US = 1_000_000
SERVER_EPOCH_US = 1_700_000_000 * US  # the server's clock starts here
SOCKET_TIMEOUT = providers.SOCKET_TIMEOUT
#: Does this version's waiting layer give back grants nobody waits for (issue 22 A.2)?
REGISTRY = hasattr(waiting, "Registry")
MAX_EVENTS = 60_000
MAX_SECONDS = 900.0


def script_names() -> dict[str, str]:
    """sha -> script name, for every script the package defines (coverage, traces)."""
    return {s.sha: s.name for s in vars(scripts).values() if isinstance(s, scripts.Script)}


_SCRIPT_NAMES = script_names()  # the scripts are the package's constants
# source text -> name: an EVAL's script without hashing its text at every command
_SCRIPT_SOURCES = {
    s.source: s.name for s in vars(scripts).values() if isinstance(s, scripts.Script)
}

# The scripts that have a cluster text (scripts.Script.on_cluster), by their own text.
_ON_CLUSTER = {
    s.source: s.on_cluster.source
    for s in vars(scripts).values()
    if isinstance(s, scripts.Script) and s.on_cluster is not None
}


def _on_cluster(transform: Callable[[str], str] | None) -> Callable[[str], str]:
    """A store's script rewrite that runs each script's cluster text (the clients send the
    single-server one: PUBLISH counts keep their meaning), then ``transform`` (a mutant's)
    on it."""

    def rewrite(source: str) -> str:
        text = _ON_CLUSTER.get(source, source)
        return transform(text) if transform is not None else text

    return rewrite


class VirtualTime:
    """Stands in for the ``time`` module inside the production modules while a world runs:
    ``monotonic()`` is the world's clock in the simulating thread, the real one elsewhere."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.clock: Callable[[], float] | None = None
        self.thread: int | None = None

    def monotonic(self) -> float:
        if self.clock is not None and threading.get_ident() == self.thread:
            return self.clock()
        return float(self._real.monotonic())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


_PATCHED = (lifecycle, renewal, waiting, guard)
_virtual = VirtualTime(guard.time)


class Installed:
    """The virtual clock (and, where it exists, a process's grant registry) installed in the
    production modules for the duration of a run."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock

    def __enter__(self) -> Installed:
        self.saved_registry = getattr(waiting, "registry", None)
        for module in _PATCHED:
            module.time = _virtual  # type: ignore[attr-defined]
        _virtual.clock, _virtual.thread = self.clock, threading.get_ident()
        return self

    def __exit__(self, *exc: object) -> None:
        _virtual.clock = None
        for module in _PATCHED:
            module.time = _virtual._real  # type: ignore[attr-defined]
        if REGISTRY:
            waiting.registry = self.saved_registry  # type: ignore[attr-defined]


class Task:
    """One thread of control (an actor, a process's renewer, a give-back)."""

    __slots__ = (
        "blocked", "commands", "done", "gen", "last_step", "name", "proc", "rng", "wake_id",
    )  # fmt: skip

    def __init__(self, name: str, proc: Proc, seed: int) -> None:
        self.name = name
        self.proc = proc
        self.gen: Generator[Any, Any, Any] = iter(())  # type: ignore[assignment]
        self.rng = random.Random(f"{seed}:task:{name}")
        self.wake_id: int | None = None
        self.blocked = "start"  # what it waits for: net | wait | sleep | listen | park
        self.commands = 0
        self.done = False
        self.last_step: Any = None  # the protocol step it ran last


class SimTarget:
    """What ``Lease.target`` and ``renewal.plan`` read: the algorithms, ``counted``."""

    def __init__(self, proc: Proc) -> None:
        self.proc = proc
        self.algorithms = protocol.SINGLE
        self.counted = True
        self.waiting = proc.waiting

    @property
    def listening(self) -> bool:
        return self.proc.waiting.flag


class Handoff:
    """A registration, as ``_waiting.Handoff``: ``granted``/``take``/``close``."""

    __slots__ = ("_owner", "at", "owner", "token", "ttl")

    def __init__(self, owner: Waiting, token: str, ttl: float) -> None:
        self.owner = self._owner = owner
        self.token = token
        self.ttl = ttl
        self.at: float | None = None

    def granted(self, at: float) -> None:
        self.at = at
        self.owner.granted(self)

    def take(self) -> float | None:
        at, self.at = self.at, None
        return at

    def close(self, *args: Any) -> None:
        """Production's ``Handoff.close`` (what the protocol passes, and its default, are
        production's: whether it took the lease, or was cut short)."""
        waiting.Handoff.close(self, *args)  # type: ignore[arg-type]


class Waiting:
    """One process's grant subscription and the production ``Board`` behind it.

    The server-side subscription (what PUBLISH and PUBSUB NUMSUB count) and the client's
    belief that it is subscribed (``flag``, production's ``listening``) are separate: a
    dropped connection is noticed only by whoever reads it -- a waiting thread in the sync
    flavour, the reader task at once in the asyncio one.
    """

    def __init__(self, world: World, proc: Proc) -> None:
        self.world = world
        self.proc = proc
        if REGISTRY:
            self.registry = waiting.Registry()
            self.board = waiting.Board(True)
        else:
            self.board = waiting.Board()
        self.flag = False  # production's "subscribed"
        self.server = False  # subscribed at the server now
        self.noticed = True  # a drop since the flag was set has been noticed
        self.subscribing = False
        self.inbox: deque[str] = deque()
        self._lock = contextlib.nullcontext()  # what SyncWaiting.forget holds
        self._retired = False  # (what SyncWaiting.forget reads: a simulated one never is)
        self._board = self.board
        self.blocked: dict[Handoff, tuple[Task, int]] = {}
        self.listeners: list[tuple[Task, int, Handoff]] = []

    def _registry(self) -> None:
        if REGISTRY:
            waiting.registry = self.registry  # type: ignore[attr-defined]

    # -- what the steps do ---------------------------------------------------------------

    def listen(self, task: Task, token: str, ttl: float, timeout: float) -> tuple[bool, Any]:
        handoff = Handoff(self, token, ttl)
        self._registry()
        if REGISTRY:
            self.board.add(token, handoff)
        else:
            early = self.board.add(token, handoff)
            if early is not None:
                handoff.at = early
        if self.flag:
            return True, handoff
        limit = min(timeout, waiting.START_TIMEOUT)
        if limit <= 0:
            handoff.close()
            self.world.coverage["listen: no time left to subscribe, polling"] += 1
            return True, None
        wid = self.world.block(task, "listen")
        self.listeners.append((task, wid, handoff))
        self.world.after(limit, lambda: self._listen_timeout(task, wid, handoff), self.proc)
        self.subscribe()
        return False, None

    def _listen_timeout(self, task: Task, wid: int, handoff: Handoff) -> None:
        if task.wake_id == wid:
            self.listeners = [entry for entry in self.listeners if entry[1] != wid]
            handoff.close()
            self.world.coverage["listen: subscription timed out, polling"] += 1
            self.world.wake(task, wid, None)

    def wait(self, task: Task, handoff: Handoff, timeout: float) -> tuple[bool, Any]:
        at = handoff.take()
        if at is not None:
            return True, at
        wid = self.world.block(task, "wait")
        self.blocked[handoff] = (task, wid)
        self.world.after(timeout, lambda: self._wait_timeout(task, wid, handoff), self.proc)
        self.reading()
        return False, None

    def _wait_timeout(self, task: Task, wid: int, handoff: Handoff) -> None:
        if task.wake_id == wid:
            self.blocked.pop(handoff, None)
            self.world.wake(task, wid, None)

    def forget(self, handoff: Handoff, *args: Any) -> None:
        """Production's ``SyncWaiting.forget``, run on this process's board."""
        self.blocked.pop(handoff, None)
        self._registry()
        waiting.SyncWaiting.forget(self, handoff, *args)  # type: ignore[arg-type]

    def granted(self, handoff: Handoff) -> None:
        entry = self.blocked.pop(handoff, None)
        if entry is not None:
            task, wid = entry
            self.world.wake(task, wid, handoff.take())

    # -- the subscription ---------------------------------------------------------------

    @property
    def is_reading(self) -> bool:
        """Is anyone reading the subscription now?"""
        if self.proc.plan.flavour == "async":
            return True
        return bool(self.blocked) or bool(self.listeners)

    def reading(self) -> None:
        """Someone reads: notice a dropped connection, hand out what arrived."""
        if not self.is_reading:
            return
        if self.flag and not self.server and not self.noticed:
            self.noticed = True
            self.flag = False
            self.world.note(lambda: f"P{self.proc.index} notices its subscription dropped")
            self.world.after(waiting.RETRY_DELAY, self.subscribe, self.proc)
        while self.inbox:
            self.deliver(self.inbox.popleft())

    def subscribe(self) -> None:
        if self.subscribing or self.flag or self.proc.dead:
            return
        if not self.is_reading:
            return  # nobody needs it now; the next waiter subscribes
        self.subscribing = True
        world = self.world
        rng = self.proc.rng
        failed = rng.random() < world.plan.rates.subscribe_fails
        label = f"sub:P{self.proc.index}:{self.proc.subscriptions}"
        self.proc.subscriptions += 1
        if failed and world.fault(label):
            world.note(lambda: f"P{self.proc.index} fails to subscribe [{label}]")
            self.subscribing = False
            world.after(waiting.RETRY_DELAY, self.subscribe, self.proc)
            return
        epoch = world.epoch

        def arrived() -> None:
            if world.epoch != epoch or self.proc.dead:
                self.subscribing = False
                world.after(waiting.RETRY_DELAY, self.subscribe, self.proc)
                return
            self.server = True
            world.after_reply(confirmed, self.proc, rng)

        def confirmed() -> None:
            self.subscribing = False
            if not self.server:  # dropped again on the way
                world.after(waiting.RETRY_DELAY, self.subscribe, self.proc)
                return
            self.flag = True
            self.noticed = False
            world.note(lambda: f"P{self.proc.index} subscribed")
            listeners, self.listeners = self.listeners, []
            for task, wid, handoff in listeners:
                world.wake(task, wid, handoff)
            self.reading()

        world.after_send(arrived, rng)

    def dropped(self) -> None:
        """The server closed the subscription (a fault, a restart)."""
        self.server = False
        if self.proc.plan.flavour == "async" or self.blocked:
            self.reading()

    def arrive(self, message: str) -> None:
        """A grant message reached this process's socket."""
        self.inbox.append(message)
        if self.is_reading:
            while self.inbox:
                self.deliver(self.inbox.popleft())

    def deliver(self, message: str) -> None:
        world = self.world
        self._registry()
        if REGISTRY:
            waiter, give_back = self.board.deliver(message)
        else:
            waiter, give_back = self.board.deliver(message, world.seconds()), None
        token = message.partition(" ")[0]
        if waiter is not None:
            world.coverage["grant: read by its waiter"] += 1
            world.note(lambda: f"grant for {world.label(token)} read by P{self.proc.index}")
            waiter.granted(world.seconds())
        if waiter is None:
            world.invariants.grant_unclaimed(token)
        if give_back is not None:
            world.coverage["grant: nobody waits, given back"] += 1
            world.note(lambda: f"grant for {world.label(token)}: nobody waits, giving it back")
            world.spawn(
                self.proc,
                f"giveback{world.next_id()}",
                lambda task: world.give_back(task, give_back),
            )
        elif waiter is None:
            world.coverage["grant: not for a waiter (kept or ignored)"] += 1
            world.note(
                lambda: f"grant for {world.label(token)} finds no waiter in P{self.proc.index}"
            )


class Renewer:
    """A process's renewer: production's job table, ``due``/``plan``/``conclude``, rounds run
    one after another (production runs them on one serial worker per target)."""

    def __init__(self, world: World, proc: Proc) -> None:
        self.world = world
        self.proc = proc
        self.table = renewal._Jobs()
        self.parked: tuple[Task, int, float | None] | None = None

    def add(self, job: Any) -> None:
        if not self.table.add(job):
            return
        if self.parked is not None:
            task, wid, until = self.parked
            if until is None or job.next_renew < until:
                self.parked = None
                self.world.after(0.0, lambda: self.world.wake(task, wid, None), self.proc)

    def remove(self, job: Any) -> None:
        self.table.remove(job)

    def program(self, task: Task) -> Generator[Any, Any, None]:
        world = self.world
        while True:
            now = world.seconds()
            ready, upcoming = renewal.due(list(self.table.jobs.values()), now)
            if not ready:
                yield ("park", None if upcoming == float("inf") else upcoming)
                continue
            for job in ready:
                job.renewing = True
            for job in ready:
                try:
                    yield from self.round(task, job)
                finally:
                    job.renewing = False

    def round(self, task: Task, job: Any) -> Generator[Any, Any, None]:
        world = self.world
        started = world.seconds()
        planned = renewal.plan(job, started)
        outcome: Any = None
        ttl_ms = 0
        if planned is not None:
            steps, ttl_ms = planned
            try:
                outcome = yield from world.drive(task, steps)
            except RedisError:
                outcome = renewal.FAILED
        if planned is None or renewal.conclude(job, started, ttl_ms, outcome):
            self.remove(job)
        if type(job) is lifecycle.Lease:
            if planned is not None:
                world.invariants.renewal_outcome(job, outcome, started)
            kind = "failed" if outcome is renewal.FAILED else "extended" if outcome else "lost"
            if planned is None:
                kind = "dropped"
            world.coverage[f"renewal: {kind}"] += 1
            world.note(lambda: f"renewal of {world.label(job.token)}: {kind}")
        else:
            world.coverage["clean-up attempted"] += 1


class Proc:
    def __init__(self, world: World, plan: plans.ProcPlan) -> None:
        self.world = world
        self.plan = plan
        self.index = plan.index
        self.rng = random.Random(f"{world.plan.seed}:proc:{plan.index}")
        hexed = hashlib.sha1(f"{world.plan.seed}:{plan.index}".encode()).hexdigest()[:8]
        self.prefix = f"sim{plan.index}:{1000 + plan.index}:{hexed}:"
        self.channel = waiting.CHANNEL_PREFIX + self.prefix.rstrip(":")
        self.dead = False
        self.paused_until = 0
        self.subscriptions = 0
        self.messages = 0
        self.waiting = Waiting(world, self)
        self.target = SimTarget(self)
        self.renewer = Renewer(world, self)


class ServerOwner:
    """The owner of server-side events: stalls defer them, nothing kills them."""

    dead = False
    paused_until = 0


@dataclasses.dataclass
class Options:
    transform: Callable[[str], str] | None = None  # script text rewrite (mutants)
    skip: frozenset[str] = frozenset()  # invariant checks not to run
    known: frozenset[str] = frozenset()  # checks whose failure ends a schedule, uncounted
    trace: bool = False


class World:
    def __init__(self, plan: plans.Plan, options: Options | None = None) -> None:
        self.plan = plan
        self.options = options or Options()
        self.now = 0  # microseconds
        self.server_offset = SERVER_EPOCH_US
        self.epoch = 0
        self.heap: list[tuple[int, int, Any, Callable[[], None]]] = []
        self.seq = 0
        self.ids = 0
        self.events = 0
        self.idle = False  # the event being run did nothing (a stale timer)
        self.quiet = True  # no fault has happened yet
        self.coverage: Counter[str] = Counter()
        self.trace: list[tuple[int, str]] = []
        self.tracing = self.options.trace
        self.server = ServerOwner()
        transform = self.options.transform
        if plan.migrating:  # a cluster's slot being moved: the scripts' cluster text runs
            transform = _on_cluster(transform)
        self.store = Store(self.server_clock, self._publish, self._numsub, transform)
        self.store.migrating = plan.migrating
        self.scripts = _SCRIPT_NAMES
        self.procs = [Proc(self, p) for p in plan.procs]
        self.channels = {p.channel: p for p in self.procs}
        self.labels: dict[str, str] = {}
        self.invariants = Invariants(self)
        self.actors: list[Actor] = []
        self.running = len(plan.actors)  # actors that have not finished (nor died)
        for a in plan.actors:
            self.actors.append(Actor(self, a, self.procs[a.proc]))

    # -- time ---------------------------------------------------------------------------

    def seconds(self) -> float:
        return self.now / US

    def server_clock(self) -> int:
        return self.now + self.server_offset

    # -- events -------------------------------------------------------------------------

    def next_id(self) -> int:
        self.ids += 1
        return self.ids

    def at(self, when: int, fn: Callable[[], None], owner: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, owner, fn))

    def after(self, seconds: float, fn: Callable[[], None], owner: Any) -> None:
        self.at(self.now + max(0, round(seconds * US)), fn, owner)

    def latency(self, rng: random.Random) -> int:
        """One way on loopback: 50-400 us, sometimes a few ms."""
        draw = rng.random()
        if draw < 0.05:
            return 1_000 + int(draw * 140_000)  # 1-8 ms
        return 50 + int(draw * 368)  # 50-400 us

    def after_send(self, fn: Callable[[], None], rng: random.Random) -> None:
        self.at(self.now + self.latency(rng), fn, self.server)

    def after_reply(self, fn: Callable[[], None], proc: Proc, rng: random.Random) -> None:
        self.at(self.now + self.latency(rng), fn, proc)

    def fault(self, label: str) -> bool:
        """A rate-drawn fault fires unless shrinking silenced it."""
        if label in self.plan.silenced:
            return False
        self.quiet = False
        self.coverage[f"fault: {label.split(':')[0]}"] += 1
        return True

    def note(self, text: str | Callable[[], str]) -> None:
        """Trace a line (given as a function: formatted only when tracing)."""
        if self.tracing:
            self.trace.append((self.now, text() if callable(text) else text))

    def label(self, token: str) -> str:
        return self.labels.get(token, token[-6:])

    # -- tasks --------------------------------------------------------------------------

    def spawn(
        self, proc: Proc, name: str, make: Callable[[Task], Generator[Any, Any, Any]]
    ) -> Task:
        """Start a task running ``make(task)``."""
        task = Task(name, proc, self.plan.seed)
        task.gen = make(task)
        wid = self.block(task, "start")
        self.at(self.now, lambda: self.wake(task, wid, None), proc)
        return task

    def block(self, task: Task, what: str) -> int:
        wid = self.next_id()
        task.wake_id = wid
        task.blocked = what
        return wid

    def wake(
        self, task: Task, wid: int, value: Any = None, exc: BaseException | None = None
    ) -> None:
        if task.wake_id != wid or task.done or task.proc.dead:
            self.idle = True  # a timer that lost its race: nothing happened
            return
        task.wake_id = None
        task.blocked = "running"
        self._advance(task, value, exc)

    def _advance(self, task: Task, value: Any, exc: BaseException | None) -> None:
        while True:
            try:
                call = task.gen.throw(exc) if exc is not None else task.gen.send(value)
            except StopIteration:
                task.done = True
                task.blocked = "done"
                return
            exc = None
            done, value = self.syscall(task, call)
            if not done:
                return

    def syscall(self, task: Task, call: tuple[Any, ...]) -> tuple[bool, Any]:
        """Carry out ``call``: (True, reply) if it completes now, else (False, None) and the
        task is woken later."""
        kind = call[0]
        if kind == "net":
            self.send(task, call[1])
            return False, None
        if kind == "sleep":
            wid = self.block(task, "sleep")
            self.after(call[1], lambda: self.wake(task, wid, None), task.proc)
            return False, None
        if kind == "listen":
            return task.proc.waiting.listen(task, call[1], call[2], call[3])
        if kind == "wait":
            return task.proc.waiting.wait(task, call[1], call[2])
        if kind == "park":
            wid = self.block(task, "park")
            until = call[1]
            task.proc.renewer.parked = (task, wid, until)
            if until is not None:
                self.at(max(self.now, math.ceil(until * US) + 1),
                        lambda: self._unpark(task, wid), task.proc)  # fmt: skip
            return False, None
        raise AssertionError(f"unknown system call {call!r}")

    def _unpark(self, task: Task, wid: int) -> None:
        renewer = task.proc.renewer
        if renewer.parked is not None and renewer.parked[1] == wid:
            renewer.parked = None
        self.wake(task, wid, None)

    # -- the network and the server -----------------------------------------------------

    def send(self, task: Task, args: tuple[Any, ...]) -> None:
        """One command on its own connection: it reaches the server, runs, and its reply comes
        back -- unless a fault intervenes. A socket timeout bounds the wait for the reply."""
        proc = task.proc
        wid = self.block(task, "net")
        rng = task.rng
        label = f"cmd:{task.name}:{task.commands}"
        task.commands += 1
        rates = self.plan.rates
        draw = rng.random()
        notice = rng.random() * 1.0  # when a lost reply's reset is noticed (half: at once)
        fault = None
        if draw < rates.never_ran:
            fault = "never_ran"
        elif draw < rates.never_ran + rates.reply_lost:
            fault = "reply_lost"
        elif draw < rates.never_ran + rates.reply_lost + rates.timeout:
            fault = "timeout"
        if fault is not None:
            label = f"{label}:{fault}"
            if not self.fault(label):
                fault = None

        self.after(SOCKET_TIMEOUT, lambda: self.wake(task, wid, exc=RedisTimeoutError(
            "Timeout reading from socket")), proc)  # fmt: skip
        if fault == "never_ran":
            self.note(
                lambda: f"{task.name}: {self.describe(args)} never reaches the server [{label}]"
            )
            self.after_reply(lambda: self.wake(task, wid, exc=RedisConnectionError(
                "Connection reset by peer (before sending)")), proc, rng)  # fmt: skip
            return

        def arrive() -> None:
            epoch = self.epoch
            reply = self.execute(task, args)
            if fault == "reply_lost":
                # The reset is noticed at once, or later (the connection hangs a while
                # before it breaks): the client's retry then meets a world that moved on.
                late = notice if notice < 0.5 else 0.0
                self.note(lambda: f"  its reply is lost [{label}]"
                          + (f", noticed {late:.3f}s later" if late else ""))  # fmt: skip
                self.after(late, lambda: self.after_reply(lambda: self.wake(
                    task, wid, exc=RedisConnectionError("Connection reset by peer")),
                    proc, rng), self.server)  # fmt: skip
            elif fault == "timeout":
                self.note(lambda: f"  its reply never comes [{label}]")
            else:
                self.after_reply(lambda: self.reply(task, wid, reply, epoch, args), proc, rng)

        self.after_send(arrive, rng)

    def reply(self, task: Task, wid: int, reply: Any, epoch: int, args: tuple[Any, ...]) -> None:
        if epoch != self.epoch:
            self.wake(task, wid, exc=RedisConnectionError("Connection closed by server"))
        elif isinstance(reply, Error):
            error = NoScriptError if reply.code == "NOSCRIPT" else ResponseError
            self.wake(task, wid, exc=error(reply.message))
        else:
            self.wake(task, wid, reply)

    def execute(self, task: Task | None, args: tuple[Any, ...]) -> Any:
        """Run one command at the server, checking the transition it makes."""
        before = self.invariants.before_command(args)
        self.store.admissions = []
        reply = self.store.execute(args)
        script = self.script_of(args)
        if script is not None:
            code = reply[0] if isinstance(reply, list) and reply else reply
            if isinstance(code, Error):
                if NON_LOCAL in code.message:
                    self.invariants.fail(
                        "whole",
                        f"{script} stopped half-way on a migrating slot, its earlier writes "
                        f"kept: {code.message}",
                    )
                code = code.code
            self.coverage[f"script {script} -> {code}"] += 1
            if self.store.refused_reads:
                self.coverage[f"migrating: {script} read a key it emptied"] += 1
            if self.store.refused_writes:
                self.coverage[f"migrating: {script} refused a grant's write"] += 1
        elif args[0] == "SET":
            self.coverage[f"plain SET NX -> {'OK' if reply else 'busy'}"] += 1
        if self.tracing:
            who = task.name if task is not None else "?"
            self.note(lambda: f"{who}: {self.describe(args)} -> {self.show(reply)}")
        self.invariants.after_command(args, script, before, reply, task)
        return reply

    def script_of(self, args: tuple[Any, ...]) -> str | None:
        if args[0] == "EVALSHA":
            return self.scripts.get(str(args[1]), "?")
        if args[0] == "EVAL":
            name = _SCRIPT_SOURCES.get(args[1])
            if name is not None:
                return name
            return self.scripts.get(hashlib.sha1(str(args[1]).encode()).hexdigest(), "?")
        return None

    def _publish(self, channel: str, message: str) -> int:
        proc = self.channels.get(channel)
        if proc is None or not proc.waiting.server or proc.dead:
            self.coverage["publish: nobody heard (waiter skipped)"] += 1
            self.note(lambda: f"  PUBLISH {self.label(message.partition(' ')[0])}: nobody listens")
            return 0
        self.coverage["publish: heard"] += 1
        rng = proc.rng
        label = f"msg:P{proc.index}:{proc.messages}"
        proc.messages += 1
        rates = self.plan.rates
        draw = rng.random()
        delay = rng.random() * 1.5
        if draw < rates.grant_lost and self.fault(f"{label}:lost"):
            self.note(
                lambda: f"  grant for {self.label(message.partition(' ')[0])} lost [{label}:lost]"
            )
            return 1
        copies = [self.latency(rng)]
        if rates.grant_lost <= draw < rates.grant_lost + rates.grant_delayed:
            if self.fault(f"{label}:delayed"):
                copies = [round(delay * US)]
                self.note(lambda: f"  grant delayed {delay:.3f}s [{label}:delayed]")
        elif (
            rates.grant_lost + rates.grant_delayed
            <= draw
            < rates.grant_lost + rates.grant_delayed + rates.grant_duplicated
        ) and self.fault(f"{label}:duplicated"):
            copies.append(round(delay * US))
            self.note(lambda: f"  grant duplicated, copy after {delay:.3f}s [{label}:duplicated]")
        epoch = self.epoch
        for lag in copies:
            self.at(self.now + lag, lambda: self._message(proc, message, epoch), proc)
        return 1

    def _message(self, proc: Proc, message: str, epoch: int) -> None:
        if not proc.waiting.server:
            token = message.partition(" ")[0]
            self.note(lambda: f"grant for {self.label(token)} lost with the subscription")
            return
        proc.waiting.arrive(message)

    def _numsub(self, channel: str) -> int:
        proc = self.channels.get(channel)
        return 1 if proc is not None and proc.waiting.server and not proc.dead else 0

    # -- what a step does on the wire (drivers.SyncTarget.execute / _send) --------------

    def command(self, task: Task, args: tuple[Any, ...]) -> Generator[Any, Any, Any]:
        """One command with the client's retry policy (redis-py's ``Retry``, NoBackoff):
        a ConnectionError (and a TimeoutError where the client retries those) re-sends it."""
        proc_plan = task.proc.plan
        failures = 0
        while True:
            try:
                return (yield ("net", args))
            except RedisConnectionError:
                if failures >= proc_plan.retries:
                    raise
            except RedisTimeoutError:
                if not proc_plan.retry_timeouts or failures >= proc_plan.retries:
                    raise
            failures += 1
            self.coverage["client retry re-sends a command"] += 1
            self.note(lambda: f"{task.name}: retry re-sends {self.describe(args)}")

    def execute_step(self, task: Task, step: Any) -> Generator[Any, Any, Any]:
        kind = type(step)
        if kind is protocol.Eval:
            keys, args = step.keys, step.args
            try:
                return (yield from self.command(
                    task, ("EVALSHA", step.script.sha, len(keys), *keys, *args)))  # fmt: skip
            except NoScriptError:
                self.coverage["NOSCRIPT -> EVAL"] += 1
                return (yield from self.command(
                    task, ("EVAL", step.script.source, len(keys), *keys, *args)))  # fmt: skip
        if kind is protocol.Call:
            return (yield from self.command(task, step.args))
        if kind is protocol.Listen:
            timeout = getattr(step, "timeout", waiting.START_TIMEOUT)
            return (yield ("listen", step.token, getattr(step, "ttl", 0.0), timeout))
        if kind is protocol.Wait:
            return (yield ("wait", step.registration, step.timeout))
        if kind is protocol.Sleep:
            yield ("sleep", step.seconds)
            return None
        raise AssertionError(f"unknown step {step!r}")

    def drive(self, task: Task, steps: Any) -> Generator[Any, Any, Any]:
        """``drivers.run``: feed each step's reply back; an exception ends the algorithm."""
        try:
            step = next(steps)
            while True:
                task.last_step = step
                reply = yield from self.execute_step(task, step)
                step = steps.send(reply)
        except StopIteration as done:
            return done.value
        finally:
            steps.close()

    def give_back(self, task: Task, claim: Any) -> Generator[Any, Any, None]:
        try:
            yield from self.execute_step(task, claim.release_step())
        except RedisError:
            self.invariants.give_back_failed.add(claim.token)

    # -- faults at fixed times ----------------------------------------------------------

    def timed(self, position: int, fault: plans.Timed) -> None:
        if self.finished:
            return
        label = f"timed:{position}"
        proc = self.procs[fault.proc] if fault.proc < len(self.procs) else None
        if fault.kind == "pause" and proc is not None and not proc.dead:
            proc.paused_until = max(proc.paused_until, self.now + round(fault.seconds * US))
            self.note(lambda: f"FAULT P{proc.index} paused for {fault.seconds:.3f}s [{label}]")
        elif fault.kind == "holder":
            holders = [a for a in self.actors if a.phase == "holding" and not a.proc.dead]
            if not holders:
                return
            actor = holders[int(fault.seconds * 1000) % len(holders)]
            assert actor.session is not None
            seconds = fault.seconds * actor.session.ttl
            actor.proc.paused_until = max(actor.proc.paused_until, self.now + round(seconds * US))
            self.note(lambda: f"FAULT P{actor.proc.index} (holding, {actor.name}) paused for "
                      f"{seconds:.3f}s [{label}]")  # fmt: skip
        elif fault.kind == "interrupt":
            waiting = [a for a in self.actors if a.phase == "acquiring" and not a.proc.dead]
            waiting = [a for a in waiting if a.task is not None and a.task.wake_id is not None]
            if not waiting:
                return
            actor = waiting[int(fault.seconds * 1000) % len(waiting)]
            assert actor.task is not None
            self.note(lambda: f"FAULT {actor.name} interrupted (KeyboardInterrupt) while it "
                      f"waits in '{actor.task.blocked}' [{label}]")  # fmt: skip
            actor.task.wake_id = None
            actor.task.blocked = "running"
            self._advance(actor.task, None, KeyboardInterrupt())
        elif fault.kind == "kill" and proc is not None and not proc.dead:
            proc.dead = True
            proc.waiting.server = False
            self.note(lambda: f"FAULT P{proc.index} killed [{label}]")
            for actor in self.actors:
                if actor.proc is proc:
                    actor.killed()
        elif fault.kind == "drop" and proc is not None and not proc.dead:
            self.note(lambda: f"FAULT P{proc.index}'s subscription dropped by the server [{label}]")
            proc.waiting.dropped()
        elif fault.kind == "restart":
            self.store.flush()
            self.epoch += 1
            self.note(lambda: f"FAULT server restarted empty [{label}]")
            self.invariants.disturbed("restart")
            for p in self.procs:
                if not p.dead:
                    p.waiting.dropped()
        elif fault.kind == "stall":
            self.server.paused_until = max(self.server.paused_until,
                                           self.now + round(fault.seconds * US))  # fmt: skip
            self.note(lambda: f"FAULT server stalls for {fault.seconds:.3f}s [{label}]")
        elif fault.kind == "jump":
            self.server_offset += round(fault.seconds * US)
            self.note(lambda: f"FAULT server clock jumps {fault.seconds}s forward [{label}]")
            self.invariants.disturbed("clock jump")
        else:
            return
        self.quiet = False
        self.coverage[f"timed: {fault.kind}"] += 1

    # -- running ------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self.running == 0

    def actor_finished(self) -> None:
        self.running -= 1

    def run(self) -> None:
        """Run to the end; raises :class:`Violation` at the first broken invariant."""
        with Installed(self.seconds):
            for actor in self.actors:
                actor.start()
            for proc in self.procs:
                self.spawn(proc, f"renewer{proc.index}", proc.renewer.program)
            for i, fault in enumerate(self.plan.timed):
                self.at(round(fault.at * US), lambda i=i, f=fault: self.timed(i, f), None)
            self._loop()
            self.invariants.at_end()

    def _loop(self) -> None:
        end: int | None = None
        while self.heap:
            when, _, owner, fn = heapq.heappop(self.heap)
            if owner is not None:
                if owner.dead:
                    continue
                if owner.paused_until > when:
                    self.seq += 1
                    heapq.heappush(self.heap, (owner.paused_until, self.seq, owner, fn))
                    continue
            if end is not None and when > end:
                break
            self.now = max(self.now, when)
            self.idle = False
            fn()
            if self.idle:
                continue
            self.events += 1
            self.invariants.after_event()
            if end is None and self.finished:
                end = self.now + round((self.plan.max_ttl + 4.0) * US)
            if self.events > MAX_EVENTS or self.now > MAX_SECONDS * US:
                raise Violation("runaway", f"no end after {self.events} events "
                                f"({self.now / US:.1f}s): someone waits forever?")  # fmt: skip
        if end is not None:
            self.now = max(self.now, end)

    # -- traces -------------------------------------------------------------------------

    def describe(self, args: tuple[Any, ...]) -> str:
        script = self.script_of(args)
        if script is not None:
            nkeys = int(args[2])
            keys = [str(k) for k in args[3 : 3 + nkeys]]
            rest = [self.short(str(a)) for a in args[3 + nkeys :]]
            return f"{args[0]} {script} {keys[0]} {' '.join(rest)}"
        return " ".join(self.short(str(a)) for a in args)

    def short(self, text: str) -> str:
        for token, label in self.labels.items():
            if token in text:
                text = text.replace(token, label)
        return text

    def show(self, reply: Any) -> str:
        if isinstance(reply, bytes):
            return self.short(reply.decode())
        if isinstance(reply, list):
            return "[" + ", ".join(self.show(r) for r in reply) + "]"
        return repr(reply)


from .actors import Actor  # noqa: E402  (actors import World's helpers)

"""A virtual client: one thread that takes a lock, a shared lock or a semaphore slot, holds it
for a while, and gives it back -- the way ``_guard.enter``/``leave`` do, step for step, with
the production pieces (``_guard._claim``, ``fast_try``/``fast_granted``, ``SingleNode.acquire``
and ``release``, ``_guard._new_lease``/``_released``, ``Lease`` transitions, ``Cleanup``).
Renewal is the process's :class:`~.world.Renewer`, which runs ``_renewal``'s functions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from redlock_deco import _guard as guard
from redlock_deco import _lifecycle as lifecycle
from redlock_deco import _options as options_module
from redlock_deco import _protocol as protocol
from redlock_deco import _renewal as renewal

from . import plan as plans

if TYPE_CHECKING:
    from .world import Proc, Task, World


def kind_of(session: plans.Session) -> protocol.Kind:
    if session.kind == plans.SEMAPHORE:
        return protocol.SEMAPHORE
    if session.kind == plans.READER:
        return protocol.SHARED
    return protocol.LOCK


def key_of(name: str) -> str:
    return f"sim:{name}"


def _left(wait: float | None, started: float, now: float) -> float | None:
    """What is left of ``wait`` since ``started``: production's ``_protocol.remaining`` (before
    it, ``_guard._left``, which read the clock itself -- the virtual one here)."""
    remaining = getattr(protocol, "remaining", None)
    if remaining is not None:
        return remaining(wait, started, now)  # type: ignore[no-any-return]
    return guard._left(wait, started)  # type: ignore[no-any-return]


class Actor:
    def __init__(self, world: World, plan: plans.ActorPlan, proc: Proc) -> None:
        self.world = world
        self.plan = plan
        self.proc = proc
        self.index = plan.index
        self.name = f"A{plan.index}"
        self.task: Task | None = None
        self.phase = "idle"  # idle | acquiring | holding | releasing | done | dead
        self.session: plans.Session | None = None
        self.claim: protocol.Claim | None = None
        self.lease: lifecycle.Lease | None = None
        self.dead = False
        self.free_idle: int | None = None  # progress: since when it idles on a free name
        self.outcomes: list[str] = []
        self.secrets = 0

    def start(self) -> None:
        self.task = self.world.spawn(self.proc, self.name, self.program)

    def alive(self) -> bool:
        """What ``Lease.alive`` asks: is the owning thread still running?"""
        return not self.dead and self.task is not None and not self.task.done

    def killed(self) -> None:
        if self.phase != "done":
            self.world.actor_finished()
        self.dead = True
        self.phase = "dead"
        self.world.invariants.forget(self)

    def new_token(self, kind: protocol.Kind) -> str:
        """``Kind.new_token``'s shape, ``host:pid:process id:secret`` (+ ``/r`` for a reader),
        with a secret drawn from the seed."""
        self.secrets += 1
        secret = f"{self.index:02x}{self.secrets:06x}".ljust(32, "0")
        return self.proc.prefix + secret + (protocol.READER_SUFFIX if kind.shared else "")

    def program(self, task: Task) -> Generator[Any, Any, None]:
        yield ("sleep", self.plan.start)
        for number, session in enumerate(self.plan.sessions):
            if session.think:
                yield ("sleep", session.think)
            yield from self.run_session(task, number, session)
        self.phase = "done"
        self.world.actor_finished()

    def outcome(self, text: str) -> None:
        self.outcomes.append(text)
        self.world.coverage[f"session: {text}"] += 1
        self.world.note(lambda: f"{self.name}: {text}")

    def run_session(
        self, task: Task, number: int, session: plans.Session
    ) -> Generator[Any, Any, None]:
        world = self.world
        kind = kind_of(session)
        options = options_module.LeaseOptions(
            ttl=session.ttl,
            wait=session.wait,
            auto_renew=session.auto_renew,
            provider="default",
            prefix="",
            limit=session.limit,
            fencing=session.fencing,
        )
        key = key_of(session.name)
        target = self.proc.target
        claim = guard._claim(kind, options, key, target)
        claim = dataclasses.replace(claim, token=self.new_token(kind))
        label = f"{self.name}#{number}" + ("r" if kind.shared else "")
        world.labels[claim.token] = label
        world.invariants.register(self, claim, session)
        self.session, self.claim, self.phase = session, claim, "acquiring"
        limit = f" limit={session.limit}" if session.limit > 1 else ""
        world.note(lambda: f"{self.name}: acquire {session.kind} {key} as {label} "
                   f"ttl={session.ttl} wait={session.wait}{limit}")  # fmt: skip

        # -- guard.enter -------------------------------------------------------------------
        algorithms = target.algorithms
        first = algorithms.fast_try(claim, session.wait, target.listening)
        started = world.seconds()
        task.last_step = None
        try:
            result: protocol.Acquired | None = None
            if first is not None:
                reply = yield from world.execute_step(task, first)
                result = protocol.fast_granted(reply, started)
                world.coverage["fast path: " + ("taken" if result else "busy")] += 1
            if result is None:
                left = _left(session.wait, started, world.seconds())
                steps = algorithms.acquire(
                    claim,
                    left,
                    target.listening,
                    clock=world.seconds,
                    rand=task.rng.random,
                    tried=first is not None,
                )
                result = yield from world.drive(task, steps)
        except (RedisError, KeyboardInterrupt) as exc:
            self.phase = "idle"
            world.invariants.cut_short(claim.token)
            yield from self.cut_short(task, claim, exc)
            self.outcome(f"acquire failed ({type(exc).__name__})")
            return
        if type(result) is protocol.NotGranted:
            self.phase = "idle"
            self.outcome("not granted (wait ran out)")
            world.invariants.not_granted(self, claim)
            return
        assert type(result) is protocol.Granted
        lease = guard._new_lease(claim, label, options, target, started, result, None,
                                 self.alive, None)  # fmt: skip
        self.lease = lease
        self.phase = "holding"
        handed = type(task.last_step) is protocol.Wait
        world.invariants.acquired(self, lease, handed)
        world.coverage["acquired" + (" by a hand-off" if handed else "")] += 1
        world.note(lambda: f"{self.name}: holds {label}, believes until {lease.expires_at:.4f}s")
        if options.auto_renew:
            self.proc.renewer.add(lease)
        if session.hold:
            yield ("sleep", session.hold)

        # -- guard.leave (one section per lease here: re-entry is the ownership layer's) ------
        self.proc.renewer.remove(lease)
        was_lost = lease.lost
        lease._releasing()
        self.phase = "releasing"
        try:
            answer = yield from world.drive(task, algorithms.release(claim))
        except RedisError as exc:
            lease._release()
            if isinstance(exc, renewal.UNREACHABLE):
                self.proc.renewer.add(lifecycle.Cleanup(claim, target, world.seconds()))
            self.phase = "idle"
            world.invariants.release_failed(self, lease)
            self.outcome("release failed" + (" (LockLost)" if lease.lost else ""))
            return
        kept = guard._released(lease, answer, was_lost)
        self.phase = "idle"
        world.invariants.released(self, lease, answer, kept)
        self.outcome("released" if kept else "LockLost")

    def cut_short(
        self, task: Task, claim: protocol.Claim, exc: BaseException
    ) -> Generator[Any, Any, None]:
        """``_guard._cut_short``: leave nothing of an acquire that failed mid-flight."""
        target = self.proc.target
        if isinstance(exc, renewal.UNREACHABLE):
            self.proc.renewer.add(lifecycle.Cleanup(claim, target, self.world.seconds()))
            return
        try:
            yield from self.world.drive(task, target.algorithms.abandon(claim))
        except renewal.UNREACHABLE:
            if not isinstance(exc, RedisError):
                self.proc.renewer.add(lifecycle.Cleanup(claim, target, self.world.seconds()))
        except RedisError:
            pass  # the server answered with an error again: nothing more to do

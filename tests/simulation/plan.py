"""What one schedule is made of, drawn from its seed: the names, the processes, the actors and
their sessions, and the faults (rates for per-command and per-message faults, a list of timed
ones). A plan is plain data, so shrinking can cut it down (drop an actor, a session, a timed
fault, or silence one rate-drawn fault by its label) and re-run it exactly.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

#: Kinds of session: an exclusive lock, a reader or a writer of a shared lock, a semaphore slot.
LOCK, READER, WRITER, SEMAPHORE = "lock", "reader", "writer", "semaphore"


@dataclass(frozen=True)
class Session:
    name: str
    kind: str
    ttl: float  # seconds
    wait: float | None
    hold: float  # seconds inside
    limit: int = 1
    auto_renew: bool = True
    fencing: bool = False
    think: float = 0.0  # pause before this session


@dataclass(frozen=True)
class ActorPlan:
    index: int
    proc: int
    start: float
    sessions: tuple[Session, ...]


@dataclass(frozen=True)
class ProcPlan:
    index: int
    flavour: str  # "sync": a waiting thread reads grants; "async": a reader task always does
    retries: int  # the client's Retry count on ConnectionError (URL clients: 1)
    retry_timeouts: bool  # whether TimeoutError is retried too (redis-py's own default)


@dataclass(frozen=True)
class Timed:
    """A fault at a fixed virtual time: pause/kill/drop a process's subscription, restart the
    server empty, stall it, jump its clock."""

    at: float
    # pause | holder (pause whoever holds, for `seconds` times its ttl) | kill | drop |
    # restart | stall | jump | interrupt (a KeyboardInterrupt in a waiting actor)
    kind: str
    proc: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class Rates:
    """Per-command and per-message fault probabilities."""

    reply_lost: float = 0.0  # ran; the reply is lost to a reset (client retries)
    never_ran: float = 0.0  # connection refused/reset before sending (client retries)
    timeout: float = 0.0  # ran; the reply never comes (socket timeout)
    grant_lost: float = 0.0
    grant_delayed: float = 0.0
    grant_duplicated: float = 0.0
    subscribe_fails: float = 0.0


@dataclass(frozen=True)
class Plan:
    seed: int
    names: tuple[tuple[str, str], ...]  # (name, "lock" | "semaphore")
    procs: tuple[ProcPlan, ...]
    actors: tuple[ActorPlan, ...]
    rates: Rates
    timed: tuple[Timed, ...]
    # Labels of rate-drawn faults that are silenced (shrinking).
    silenced: frozenset[str] = field(default_factory=frozenset)
    # The names' slot is being migrated on a Redis Cluster throughout (store.Store.migrating).
    migrating: bool = False

    def without_actor(self, index: int) -> Plan:
        return dataclasses.replace(self, actors=tuple(a for a in self.actors if a.index != index))

    def with_sessions(self, index: int, sessions: tuple[Session, ...]) -> Plan:
        actors = tuple(
            dataclasses.replace(a, sessions=sessions) if a.index == index else a
            for a in self.actors
        )
        return dataclasses.replace(self, actors=actors)

    def without_timed(self, position: int) -> Plan:
        return dataclasses.replace(
            self, timed=tuple(t for i, t in enumerate(self.timed) if i != position)
        )

    def silencing(self, label: str) -> Plan:
        return dataclasses.replace(self, silenced=self.silenced | {label})

    @property
    def max_ttl(self) -> float:
        return max((s.ttl for a in self.actors for s in a.sessions), default=0.0)

    def describe(self) -> str:
        lines = [f"seed {self.seed}: names " + ", ".join(f"{n} ({k})" for n, k in self.names)]
        for p in self.procs:
            lines.append(
                f"  process P{p.index}: {p.flavour}, retries={p.retries}"
                + (" (timeouts too)" if p.retry_timeouts else "")
            )
        for a in self.actors:
            lines.append(f"  actor A{a.index} in P{a.proc}, starts at {a.start:.3f}s:")
            for i, s in enumerate(a.sessions):
                extra = f" limit={s.limit}" if s.kind == SEMAPHORE else ""
                extra += "" if s.auto_renew else " auto_renew=False"
                extra += " fencing" if s.fencing else ""
                lines.append(
                    f"    #{i}: {s.kind} {s.name} ttl={s.ttl}s wait={s.wait} hold={s.hold:.3f}s"
                    f" think={s.think:.3f}s{extra}"
                )
        rates = {k: round(v, 4) for k, v in dataclasses.asdict(self.rates).items() if v}
        if rates:
            lines.append("  fault rates: " + ", ".join(f"{k}={v}" for k, v in rates.items()))
        for t in self.timed:
            what = f"{t.kind} P{t.proc}" if t.kind in ("pause", "kill", "drop") else t.kind
            amount = f" {t.seconds:.3f}" + ("x its ttl" if t.kind == "holder" else "s")
            amount = "" if t.kind == "interrupt" else amount
            lines.append(f"  at {t.at:.3f}s: {what}" + (amount if t.seconds else ""))
        if self.migrating:
            lines.append("  the slot is being migrated (a cluster reshard) throughout")
        if self.silenced:
            lines.append("  silenced: " + ", ".join(sorted(self.silenced)))
        return "\n".join(lines)


TTLS = (0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 5.0)
WAITS: tuple[float | None, ...] = (0.0, 0.05, 0.3, 1.0, 2.0, 4.0, None)


def generate(seed: int) -> Plan:
    """A small world from ``seed``: 2-4 actors in 1-3 processes, 1-2 names."""
    rng = random.Random(f"plan:{seed}")
    names: list[tuple[str, str]] = []
    for i in range(rng.choice((1, 1, 2))):
        names.append((f"n{i}", rng.choice(("lock", "lock", "semaphore"))))
    procs = tuple(
        ProcPlan(
            i,
            rng.choice(("sync", "sync", "async")),
            rng.choice((0, 1, 1, 1, 3)),
            rng.random() < 0.3,
        )
        for i in range(rng.choice((1, 2, 2, 3)))
    )
    n_actors = rng.choice((2, 2, 3, 3, 4))
    # One lock name in three is used shared (readers and writers).
    shared = {n for n, k in names if k == "lock" and rng.random() < 0.35}
    actors = []
    for a in range(n_actors):
        sessions = []
        for _ in range(rng.choice((1, 2, 2, 3))):
            name, family = rng.choice(names)
            if family == "semaphore":
                kind = SEMAPHORE
            elif name in shared:
                kind = rng.choice((READER, READER, WRITER))
            else:
                kind = LOCK
            ttl = rng.choice(TTLS)
            hold = rng.choice((0.0, rng.uniform(0, ttl), rng.uniform(0, 2.5 * ttl)))
            if ttl >= 1.0 and rng.random() < 0.15:
                hold = rng.uniform(ttl + 4.0, ttl + 8.0)  # long, renewed many times
            sessions.append(
                Session(
                    name=name,
                    kind=kind,
                    ttl=ttl,
                    wait=rng.choice(WAITS),
                    hold=hold,
                    limit=rng.choice((1, 2, 3)) if kind == SEMAPHORE else 1,
                    auto_renew=rng.random() < 0.9,
                    fencing=kind == LOCK and rng.random() < 0.1,
                    think=rng.choice((0.0, rng.uniform(0, 0.3))),
                )
            )
        actors.append(
            ActorPlan(a, rng.randrange(len(procs)), rng.uniform(0, 0.05), tuple(sessions))
        )
    profile = rng.random()
    if profile < 0.2:
        rates = Rates()
    else:
        command = rng.choice((0.0, 0.02, 0.05, 0.1))
        grants = rng.choice((0.0, 0.05, 0.2))
        rates = Rates(
            reply_lost=command,
            never_ran=command * rng.choice((0.0, 0.5)),
            timeout=command * rng.choice((0.0, 0.2)),
            grant_lost=grants * rng.choice((0.0, 1.0)),
            grant_delayed=grants * rng.choice((0.0, 1.0)),
            grant_duplicated=grants * rng.choice((0.0, 1.0)),
            subscribe_fails=rng.choice((0.0, 0.0, 0.2)),
        )
    timed = []
    horizon = 0.5 + sum(s.hold + s.think for a in actors for s in a.sessions) / max(1, n_actors)
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
        kind = rng.choice(("pause", "pause", "holder", "holder", "kill", "drop", "drop",
                           "restart", "stall", "jump", "interrupt", "interrupt"))  # fmt: skip
        at = rng.uniform(0, horizon)
        proc = rng.randrange(len(procs))
        seconds = 0.0
        if kind == "pause":
            seconds = rng.choice((rng.uniform(0, 0.3), rng.uniform(0, 3 * max(TTLS[:4]))))
        elif kind == "holder":
            seconds = rng.uniform(1.0, 3.0)  # times the holder's ttl
        elif kind == "interrupt":
            seconds = rng.random()  # which of the waiters
        elif kind == "stall":
            seconds = rng.uniform(0, 2.5)
        elif kind == "jump":
            seconds = rng.choice((0.05, 0.5, 2.0, 10.0))
        timed.append(Timed(at, kind, proc, seconds))
    timed.sort(key=lambda t: t.at)
    # Drawn apart, so that adding it left every other seed's plan as it was.
    migrating = random.Random(f"migrating:{seed}").random() < 0.3
    return Plan(seed, tuple(names), procs, tuple(actors), rates, tuple(timed),
                migrating=migrating)  # fmt: skip

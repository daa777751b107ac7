"""The invariants, checked after every event and at every server command.

They are written against two things only: what each actor *believes* (its ``Lease``: held,
and until when by its own clock) and what the *store* holds (a lock key's token, a shared
lock's readers, a semaphore's members, with their server-side lease ends). Queue entries are
read through :func:`entry_token` alone, so a change of their format touches one line.

Checks (names as ``--skip`` takes them):

- ``exclusion``: an actor that believes its lease valid (its clock is before the end it
  recorded, less 1 ms for the scripts' millisecond server clock) holds it on the server --
  so two actors never both believe they hold a name exclusively, a writer never alongside a
  reader -- unless a server restart or clock jump since its last confirmed request took it
  away (it then learns at its next renewal or exit, which ``loud-loss`` checks).
- ``limit``: a semaphore admits a caller only while fewer than that caller's own limit hold.
- ``loud-loss``: once a holder's lease ended on the server it never comes back to it (a stale
  queue entry handing the key back), its renewal never succeeds, and its exit reports the loss.
- ``terms``: a holder's server-side lease is never longer than its own ttl, and a new holder
  (an acquire, a hand-off) gets exactly its own ttl.
- ``queue-once``: a queue holds a token at most once.
- ``expiry``: every key has an expiry, none longer than the longest lease or queue window,
  and a key holding leases lives at least as long as each of them.
- ``progress``: an acquire attempt that finds its name free leaves it held by someone; an
  actor waiting (not sending) while its name is free is served or asks again within RECHECK;
  every actor finishes.
- ``leak``: at the end (after the longest ttl), no key is left but fencing counters, and no
  lease is still renewed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redlock_deco import _lifecycle as lifecycle
from redlock_deco import _protocol as protocol

from . import plan as plans

if TYPE_CHECKING:
    from .actors import Actor
    from .world import Task, World

CHECKS = ("exclusion", "limit", "loud-loss", "terms", "queue-once", "expiry", "progress", "leak")
US = 1_000_000
# The scripts read the server clock in whole milliseconds: a lease can begin up to 1 ms
# before the command reached the server, so a belief is held to be valid only until 1 ms
# before its end.
BELIEF_SLACK_US = 1000
# A waiter asks the server again after at most RECHECK (or a backoff sleep, shorter).
PROGRESS_SLACK = 0.05


class Violation(Exception):
    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"{check}: {message}")
        self.check = check
        self.message = message


def entry_token(entry: str) -> str:
    """The token of a queue entry (the entry itself, or ``token|ttl|limit``)."""
    return entry.split("|", 1)[0]


@dataclass
class Claimed:
    actor: Actor
    claim: protocol.Claim
    session: plans.Session


@dataclass
class Hold:
    actor: Actor
    lease: lifecycle.Lease
    name: str
    pending_loss: int | None = None  # when its lease was seen gone from the server


@dataclass(frozen=True)
class Name:
    name: str
    family: str  # lock | semaphore
    key: str
    queue: str
    readers: str | None


class Invariants:
    def __init__(self, world: World) -> None:
        self.world = world
        self.store = world.store
        self.skip = world.options.skip
        self.claims: dict[str, Claimed] = {}
        self.holds: dict[Actor, Hold] = {}
        self.names: dict[str, Name] = {}
        self.by_key: dict[str, Name] = {}
        for name, family in world.plan.names:
            key = f"sim:{name}"
            kind = protocol.SEMAPHORE if family == "semaphore" else protocol.LOCK
            keys = protocol.Keys.for_key(key, kind)
            entry = Name(name, family, key, keys.queue, keys.readers)
            self.names[name] = entry
            self.by_key[key] = entry
        ttls = [s.ttl for a in world.plan.actors for s in a.sessions] or [0.0]
        self.key_bound_ms = max(
            round(max(ttls) * 1000), protocol.QUEUE_WINDOW_MS, protocol.HANDOFF_MS
        )
        self.last_disturbance: int | None = None
        self._cache: dict[str, tuple[int, int, dict[str, int]]] = {}
        self.watchdogs: set[int] = set()

    def fail(self, check: str, message: str) -> None:
        if check not in self.skip:
            raise Violation(check, message)

    def label(self, token: str) -> str:
        return self.world.label(token)

    # -- what the server holds ----------------------------------------------------------

    def holders(self, name: Name) -> dict[str, int]:
        """token -> ms left of its lease on the server, for every live holder of ``name``."""
        store = self.store
        now = store.now_ms()
        cached = self._cache.get(name.name)
        if cached is not None and cached[0] == store.version and cached[1] == now:
            return cached[2]
        result = self._holders(name, now)
        self._cache[name.name] = (store.version, now, result)
        return result

    def _holders(self, name: Name, now: int) -> dict[str, int]:
        store = self.store
        store._now_ms = now
        if name.family == "semaphore":
            members = self._zset(name.key)
            return {m: int(s) - now for m, s in members.items() if s > now}
        value = self._string(name.key)
        if value is None:
            return {}
        if value == protocol.SHARED_VALUE:
            assert name.readers is not None
            members = self._zset(name.readers)
            return {m: int(s) - now for m, s in members.items() if s > now}
        when = store.expires.get(name.key)
        return {value: (when - now) if when is not None else 10**15}

    def _string(self, key: str) -> str | None:
        if not self.store._alive(key):
            return None
        if self.store.types[key] != "string":
            self.fail("expiry", f"{key} is a {self.store.types[key]}, not a string")
            return None
        value: str = self.store.data[key]
        return value

    def _zset(self, key: str) -> dict[str, float]:
        if not self.store._alive(key):
            return {}
        if self.store.types[key] != "zset":
            self.fail("expiry", f"{key} is a {self.store.types[key]}, not a sorted set")
            return {}
        members: dict[str, float] = self.store.data[key]
        return members

    # -- bookkeeping from the actors ----------------------------------------------------

    def register(self, actor: Actor, claim: protocol.Claim, session: plans.Session) -> None:
        self.claims[claim.token] = Claimed(actor, claim, session)

    def acquired(self, actor: Actor, lease: lifecycle.Lease) -> None:
        assert actor.session is not None
        self.holds[actor] = Hold(actor, lease, actor.session.name)
        self.check_hold(self.holds[actor])

    def forget(self, actor: Actor) -> None:
        self.holds.pop(actor, None)

    def disturbed(self, reason: str) -> None:
        """A restart or a server clock jump: leases may end without anyone's fault."""
        self.last_disturbance = self.world.now

    def renewal_outcome(self, lease: lifecycle.Lease, outcome: Any, started: float) -> None:
        hold = self._hold_of(lease)
        # Sent after its lease was seen gone (a reply to an earlier request may still say
        # it extended: the server jumped or restarted after running it).
        if (
            hold is not None
            and outcome is True
            and hold.pending_loss is not None
            and hold.pending_loss < round(started * US)
        ):
            self.fail(
                "loud-loss",
                f"{self.label(lease.token)}'s renewal succeeded, but its lease had ended on "
                f"the server at {hold.pending_loss / US:.4f}s: it will never hear it was lost",
            )

    def released(self, actor: Actor, lease: lifecycle.Lease, answer: Any, kept: bool) -> None:
        hold = self.holds.pop(actor, None)
        if hold is not None and hold.lease is lease and kept and hold.pending_loss is not None:
            self.fail(
                "loud-loss",
                f"{self.label(lease.token)} left its section told it held the lease throughout, "
                f"but the lease had ended on the server at {hold.pending_loss / US:.4f}s",
            )

    def release_failed(self, actor: Actor, lease: lifecycle.Lease) -> None:
        self.holds.pop(actor, None)

    def _hold_of(self, lease: lifecycle.Lease) -> Hold | None:
        for hold in self.holds.values():
            if hold.lease is lease:
                return hold
        return None

    # -- per command --------------------------------------------------------------------

    def name_of(self, args: tuple[Any, ...]) -> Name | None:
        command = str(args[0]).upper()
        if command in ("EVAL", "EVALSHA"):
            key = str(args[3]) if int(args[2]) > 0 else ""
        elif len(args) > 1:
            key = str(args[1])
        else:
            return None
        return self.by_key.get(key)

    def before_command(self, args: tuple[Any, ...]) -> tuple[Name, dict[str, int]] | None:
        name = self.name_of(args)
        if name is None:
            return None
        return name, self.holders(name)

    def after_command(
        self,
        args: tuple[Any, ...],
        script: str | None,
        before: tuple[Name, dict[str, int]] | None,
        reply: Any,
        task: Task | None,
    ) -> None:
        if before is None:
            return
        name, was = before
        now = self.holders(name)
        for token, left in now.items():
            claimed = self.claims.get(token)
            if claimed is None:
                self.fail("terms", f"{name.key} is held by an unknown token {token!r}")
                continue
            ttl = claimed.claim.ttl_ms
            if token not in was:
                if left != ttl:
                    self.fail(
                        "terms",
                        f"{self.label(token)} is given a lease of {left} ms on {name.key} "
                        f"({script or args[0]}), not its own ttl of {ttl} ms",
                    )
            elif left > ttl:
                self.fail(
                    "terms",
                    f"{self.label(token)}'s lease on {name.key} is {left} ms, longer than its "
                    f"ttl of {ttl} ms ({script or args[0]})",
                )
        if name.family == "semaphore":
            for key, member, count in self.store.admissions or ():
                claimed = self.claims.get(member)
                if key == name.key and claimed is not None and count > claimed.claim.limit:
                    self.fail(
                        "limit",
                        f"{self.label(member)} (limit {claimed.claim.limit}) is admitted to "
                        f"{name.key} ({script or args[0]}) as holder number {count}: "
                        + ", ".join(self.label(t) for t in now),
                    )
        acquiring = (script is not None and script.endswith("_acquire")) or (
            str(args[0]).upper() == "SET" and "NX" in args
        )
        if acquiring and not was and not now and not _is_error(reply):
            self.fail(
                "progress",
                f"an attempt ({script or args[0]}) found {name.key} free and left it free",
            )
        self.check_queue(name)
        self.check_keys()

    def check_queue(self, name: Name) -> None:
        if "queue-once" in self.skip or not self.store._alive(name.queue):
            return
        entries = self.store.data[name.queue]
        tokens = [entry_token(e) for e in entries]
        if len(set(tokens)) != len(tokens):
            shown = [self.label(t) for t in tokens]
            self.fail("queue-once", f"a token is queued twice in {name.queue}: {shown}")

    def check_keys(self) -> None:
        if "expiry" in self.skip:
            return
        store = self.store
        now = store.now_ms()
        store._now_ms = now
        for key in list(store.types):
            if not store._alive(key):
                continue
            when = store.expires.get(key)
            if when is None:
                self.fail("expiry", f"{key} has no expiry")
                continue
            left = when - now
            bound = protocol.FENCE_KEEP_MS if key.endswith(":fence") else self.key_bound_ms
            if left > bound:
                self.fail("expiry", f"{key} lives {left} ms more, longer than any lease")
            if store.types[key] == "zset":
                longest = max((s for s in store.data[key].values()), default=0) - now
                if longest > left:
                    self.fail(
                        "expiry", f"{key} expires in {left} ms, before a lease it holds "
                        f"({int(longest)} ms)"
                    )  # fmt: skip
        for name in self.names.values():
            if name.readers is None or self._string(name.key) != protocol.SHARED_VALUE:
                continue
            left = store.expires.get(name.key, 0) - now
            longest = max(self._zset(name.readers).values(), default=0) - now
            if longest > left:
                self.fail("expiry", f"{name.key} (shared) expires in {left} ms, before a "
                          f"reader's lease ({int(longest)} ms)")  # fmt: skip

    # -- per event ----------------------------------------------------------------------

    def after_event(self) -> None:
        for hold in list(self.holds.values()):
            self.check_hold(hold)
        self.check_progress()

    def check_hold(self, hold: Hold) -> None:
        lease = hold.lease
        if lease.state is not lifecycle.State.HELD or hold.actor.dead:
            return
        name = self.names[hold.name]
        token = lease.token
        held = token in self.holders(name)
        now = self.world.now
        if held:
            if hold.pending_loss is not None:
                self.fail(
                    "loud-loss",
                    f"{self.label(token)}'s lease ended on the server at "
                    f"{hold.pending_loss / US:.4f}s, and now {name.key} is handed back to it "
                    f"(a stale grant): it never learns it lost the lease",
                )
            return
        if hold.pending_loss is None:
            hold.pending_loss = now
            self.world.note(f"{self.label(token)}'s lease is gone from the server "
                            f"(its holder has not heard yet)")  # fmt: skip
        valid = now + BELIEF_SLACK_US < round(lease.expires_at * US)
        disturbed = self.last_disturbance is not None and self.last_disturbance >= round(
            lease.recorded_at * US
        )
        if valid and not disturbed:
            others = ", ".join(self.label(t) for t in self.holders(name)) or "nobody"
            self.fail(
                "exclusion",
                f"{self.label(token)} believes it holds {name.key} until "
                f"{lease.expires_at:.4f}s, but the server no longer has its lease "
                f"(held by {others})",
            )

    def check_progress(self) -> None:
        if "progress" in self.skip:
            return
        world = self.world
        now = world.now
        bound = round((protocol.RECHECK + PROGRESS_SLACK) * US)
        for actor in world.actors:
            task = actor.task
            idle = (
                actor.phase == "acquiring"
                and not actor.dead
                and task is not None
                and task.blocked in ("wait", "sleep")
                and actor.proc.paused_until <= now
                and actor.session is not None
                and not self.holders(self.names[actor.session.name])
            )
            if not idle:
                actor.free_idle = None
                continue
            if actor.free_idle is None:
                actor.free_idle = now
                world.at(now + bound + 1, self.check_progress, None)
            elif now - actor.free_idle > bound:
                assert actor.session is not None
                self.fail(
                    "progress",
                    f"{actor.name} has waited {(now - actor.free_idle) / US:.3f}s without asking "
                    f"while {actor.session.name} was free",
                )

    def at_end(self) -> None:
        world = self.world
        for actor in world.actors:
            if not actor.dead and actor.task is not None and not actor.task.done:
                self.fail("progress", f"{actor.name} never finished ({actor.phase})")
        left = [k for k in self.store.live_keys() if not k.endswith(":fence")]
        if left:
            shown = {k: self.store.pttl(k) for k in left}
            self.fail("leak", f"keys left at the end: {shown}")
        for proc in world.procs:
            if proc.dead:
                continue
            for job in proc.renewer.table.jobs.values():
                if type(job) is lifecycle.Lease and job.held:
                    self.fail("leak", f"{self.label(job.token)} is still renewed at the end")


def _is_error(reply: Any) -> bool:
    from .store import Error

    return isinstance(reply, Error)

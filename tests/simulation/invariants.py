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
- ``fresh``: no section begins on a grant older than its lease (by the holder's own clock:
  the lease may have passed on meanwhile).
- ``limit``: a semaphore admits a caller only while fewer than that caller's own limit hold.
- ``loud-loss``: once a holder's lease ended on the server it never comes back to it (a stale
  queue entry handing the key back), its renewal never succeeds, and its exit reports the loss.
- ``terms``: a holder's server-side lease is never longer than its own ttl, and a new holder
  (an acquire, a hand-off) gets exactly its own ttl.
- ``queue-once``: a queue holds a token at most once.
- ``expiry``: every key has an expiry, none longer than the longest lease or queue window,
  and a key holding leases lives at least as long as each of them.
- ``progress``: an acquire attempt that could be served (nobody holds; for a reader: no
  writer holds or waits, listening) is, or someone else is; an attempt is never told busy
  by a name it holds; a release that frees a name hands it on if a listening waiter is
  queued; an actor waiting (not sending) while it could be served asks again within
  RECHECK; every actor finishes.
- ``keep`` (runs without faults): an auto-renewed lease is never lost.
- ``ghost``: nobody is handed a name after it stopped waiting for it (unless one of its
  commands met a fault), and a grant that reaches a process where nobody waits for it is
  given back at once.
- ``order``: a reader never comes in past a writer queued before it whose process listens;
  nobody takes a semaphore slot past a waiter queued before it whose process listens.
- ``leftover``: an acquire that returned without the lease (its wait ran out) holds nothing.
- ``leak``: at the end (after the longest ttl), no key is left but fencing counters, and no
  lease is still renewed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redlock_deco import _lifecycle as lifecycle
from redlock_deco import _protocol as protocol
from redlock_deco import _renewal as renewal

from . import plan as plans
from .store import Error

if TYPE_CHECKING:
    from .actors import Actor
    from .world import Task, World

CHECKS = (
    "exclusion", "limit", "loud-loss", "terms", "queue-once", "expiry", "progress", "leak",
    "keep", "ghost", "leftover", "order", "fresh", "whole",
)  # fmt: skip
US = 1_000_000
# The scripts read the server clock in whole milliseconds: a lease can begin up to 1 ms
# before the command reached the server, so a belief is held to be valid only until 1 ms
# before its end.
BELIEF_SLACK_US = 1000
# A waiter asks the server again after at most this long without a grant (the protocol's
# RECHECK, the bound on what a lost grant costs: a promise, so written here, not imported);
# a backoff sleep is shorter.
RECHECK = 1.0
PROGRESS_SLACK = 0.05
# A grant read where nobody waits for it is given back at once: one round trip, and a
# retry or two.
GIVE_BACK_US = 250_000


class Violation(Exception):
    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"{check}: {message}")
        self.check = check
        self.message = message

    def __reduce__(self) -> tuple[type[Violation], tuple[str, str]]:
        # (Rebuilt from its two fields: a failing seed of a ``--jobs`` run came back from
        # its worker as one message, and the unpickling crashed the run's result thread.)
        return type(self), (self.check, self.message)


def entry_token(entry: str) -> str:
    """The token of a queue entry (the entry itself, or ``token|ttl|limit``)."""
    return entry.split("|", 1)[0]


class KnownFinding(Violation):
    """A check that fails on the code as it is, a finding already reported: the schedule
    ends there (what follows may be its consequences), and does not count as a failure."""


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
    # What the last check saw, and until when its verdict stands if nothing changes.
    seen: tuple[Any, ...] = ()
    until: int = 0


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
        self.known = world.options.known
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
        self.uncertain: set[str] = set()  # tokens of claims whose commands met a fault
        self.unclaimed: dict[str, int] = {}  # ghost grants read, since when
        self.give_back_failed: set[str] = set()  # tokens whose give-back met a fault
        self.watchdogs: set[int] = set()

    def fail(self, check: str, message: str) -> None:
        if check in self.known:
            raise KnownFinding(check, message)
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

    def server_end(self, name: Name, token: str) -> int:
        """When (world microseconds) ``token``'s lease on ``name`` ends on the server: a lock
        key lives through its last millisecond, a sorted-set lease ends as it begins."""
        left = self.holders(name)[token]
        now_ms = self.store.now_ms()
        string = name.family == "lock" and self._string(name.key) == token
        return (now_ms + left + (1 if string else 0)) * 1000 - self.world.server_offset

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

    def acquired(self, actor: Actor, lease: lifecycle.Lease, by_grant: bool) -> None:
        """``by_grant``: the acquire ended on a grant it read (not on a server's reply)."""
        assert actor.session is not None
        self.holds[actor] = Hold(actor, lease, actor.session.name)
        if by_grant and self.world.now + BELIEF_SLACK_US >= round(lease.expires_at * US):
            self.fail(
                "fresh",
                f"{self.label(lease.token)} enters its section on a grant older than its lease "
                f"(believed to end at {lease.expires_at:.4f}s): it may have passed on meanwhile",
            )
        self.check_hold(self.holds[actor])

    def forget(self, actor: Actor) -> None:
        self.holds.pop(actor, None)

    def disturbed(self, reason: str) -> None:
        """A restart or a server clock jump: leases may end without anyone's fault."""
        self.last_disturbance = self.world.now

    def renewal_outcome(self, lease: lifecycle.Lease, outcome: Any, started: float) -> None:
        """After ``conclude``: what the holder now knows must be what the server said."""
        hold = self._hold_of(lease)
        if hold is None:
            return
        label = self.label(lease.token)
        # Sent after its lease was seen gone (a reply to an earlier request may still say
        # it extended: the server jumped or restarted after running it).
        if (
            outcome is True
            and hold.pending_loss is not None
            and hold.pending_loss < round(started * US)
        ):
            self.fail(
                "loud-loss",
                f"{label}'s renewal succeeded, but its lease had ended on the server at "
                f"{hold.pending_loss / US:.4f}s: it will never hear it was lost",
            )
        if outcome is False and lease.state is lifecycle.State.HELD:
            self.fail("loud-loss", f"{label}'s renewal found its lease gone; it still holds")
        if (
            outcome is renewal.FAILED
            and started >= lease.expires_at
            and lease.state is lifecycle.State.HELD
        ):
            self.fail(
                "loud-loss",
                f"{label}'s renewal failed after its lease's end ({lease.expires_at:.4f}s); "
                "it still holds",
            )

    def released(self, actor: Actor, lease: lifecycle.Lease, answer: Any, kept: bool) -> None:
        hold = self.holds.pop(actor, None)
        if hold is not None and hold.lease is lease and kept and hold.pending_loss is not None:
            self.fail(
                "loud-loss",
                f"{self.label(lease.token)} left its section told it held the lease throughout, "
                f"but the lease had ended on the server at {hold.pending_loss / US:.4f}s",
            )

    def not_granted(self, actor: Actor, claim: protocol.Claim) -> None:
        """An acquire returned NotGranted: every command it sent has been answered, so
        nothing of it may hold the name (it would stay held, by nobody, for its ttl)."""
        assert actor.session is not None
        name = self.names[actor.session.name]
        if claim.token in self.holders(name):
            self.fail(
                "leftover",
                f"{self.label(claim.token)} gave up waiting ({actor.session.kind}, "
                f"wait={actor.session.wait}) but holds {name.key}: nobody will release it "
                "before its ttl ends",
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

    def before_command(
        self, args: tuple[Any, ...]
    ) -> tuple[Name, dict[str, int], list[str]] | None:
        name = self.name_of(args)
        if name is None:
            return None
        return name, self.holders(name), self.queued(name)

    def queued(self, name: Name) -> list[str]:
        """The tokens in ``name``'s queue, in order."""
        if not self.store._alive(name.queue) or self.store.types[name.queue] != "zset":
            return []
        places = self.store.data[name.queue]
        ordered = sorted(places, key=lambda e: (places[e], e.encode()))
        return [entry_token(e) for e in ordered]

    def ghost(self, token: str) -> bool:
        """Is ``token`` a claim its actor is done with (it gave up, failed, or released)?"""
        claimed = self.claims.get(token)
        return claimed is not None and (
            claimed.actor.claim is not claimed.claim
            or claimed.actor.phase not in ("acquiring", "holding", "releasing")
        )

    def token_of(self, args: tuple[Any, ...]) -> str | None:
        """The token a command is sent for (a script's ARGV[1], a SET's value)."""
        command = str(args[0]).upper()
        if command in ("EVAL", "EVALSHA") and len(args) > 3 + int(args[2]):
            return str(args[3 + int(args[2])])
        if command == "SET" and len(args) > 2:
            return str(args[2])
        return None

    def cut_short(self, token: str) -> None:
        """An acquire raised (its last command's fate unknown to its client, a clean-up
        pending): what is left of it on the server is not its client's to know. (A command
        whose reply was lost and that a retry re-sent is no such case: every script is
        idempotent per token, so the retry's answer is the whole truth.)"""
        self.uncertain.add(token)

    def grant_unclaimed(self, token: str) -> None:
        """A grant reached its process, where nobody waits for it: it must be given back."""
        if self.ghost(token):
            self.unclaimed.setdefault(token, self.world.now)

    def check_unclaimed(self) -> None:
        for token, since in list(self.unclaimed.items()):
            claimed = self.claims[token]
            name = self.names[claimed.session.name]
            proc = claimed.actor.proc
            if token not in self.holders(name) or token in self.give_back_failed or proc.dead:
                del self.unclaimed[token]
            elif proc.paused_until > self.world.now:
                self.unclaimed[token] = self.world.now
            elif self.world.now - since > GIVE_BACK_US:
                self.fail(
                    "ghost",
                    f"the grant of {name.key} to {self.label(token)} reached its process "
                    f"{(self.world.now - since) / US:.3f}s ago, where nobody waits for it; it "
                    "still holds (given back, it would pass on at once)",
                )

    def listening(self, token: str) -> bool:
        """Is the process of ``token``'s waiter subscribed at the server (what PUBLISH and
        PUBSUB NUMSUB count, so what the scripts take for "still there")?"""
        claimed = self.claims.get(token)
        return claimed is not None and claimed.actor.proc.waiting.server

    def available(self, name: Name, token: str, holders: dict[str, int], queue: list[str]) -> bool:
        """Could ``token``'s waiter be served now? A writer or a semaphore caller: nobody
        holds. A reader: no writer holds, and no writer whose process listens is queued
        (the scripts' rule that a queued writer stops new readers)."""
        if not token.endswith(protocol.READER_SUFFIX) or name.family == "semaphore":
            return not holders
        if any(not t.endswith(protocol.READER_SUFFIX) for t in holders):
            return False
        return not any(not t.endswith(protocol.READER_SUFFIX) and self.listening(t) for t in queue)

    def after_command(
        self,
        args: tuple[Any, ...],
        script: str | None,
        before: tuple[Name, dict[str, int], list[str]] | None,
        reply: Any,
        task: Task | None,
    ) -> None:
        if before is None:
            return
        name, was, before_queue = before
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
        self.check_progress_at(name, args, script, was, now, reply, before_queue)
        self.check_places(name, script or str(args[0]), before_queue)
        self.check_queue(name)
        self.check_keys()

    def check_places(self, name: Name, what: str, before: list[str]) -> None:
        """No command moves a queued waiter behind another that was queued after it: the
        waiters queued both before and after it keep their order (a join re-sent by a retry,
        or a waiter checking again, keeps its place; only a served or leaving one goes)."""
        if "order" in self.skip or len(before) < 2:
            return
        after = self.queued(name)
        stayed = set(before) & set(after)
        if [t for t in before if t in stayed] != [t for t in after if t in stayed]:
            self.fail(
                "order",
                f"the queue of {name.key} changed order ({what}): "
                f"{[self.label(t) for t in before]} -> {[self.label(t) for t in after]}",
            )

    def check_progress_at(
        self,
        name: Name,
        args: tuple[Any, ...],
        script: str | None,
        was: dict[str, int],
        now: dict[str, int],
        reply: Any,
        queue: list[str],
    ) -> None:
        """What one command must do for the waiters: an attempt that could be served is (or
        someone is), an attempt is never told busy by a name it holds, a release that frees a
        name hands it to a listening waiter if one is queued, and (in a run without faults)
        nobody is handed a name after it stopped waiting for it."""
        if _is_error(reply):
            return
        what = script or str(args[0])
        command = str(args[0]).upper()
        token = None
        if command in ("EVAL", "EVALSHA") and len(args) > 3 + int(args[2]):
            token = str(args[3 + int(args[2])])
        elif command == "SET":
            token = str(args[2])
        acquiring = (script is not None and script.endswith("_acquire")) or (
            command == "SET" and "NX" in args
        )
        if acquiring and token is not None:
            code = reply[0] if isinstance(reply, list) and reply else reply
            # (A plain SET NX re-sent by a retry after it landed says busy: by design the
            # caller's next attempt, a script, finds its own token -- see ``leftover``.)
            if code in (0, None) and token in now and command != "SET":
                self.fail(
                    "progress",
                    f"{self.label(token)} is told {name.key} is busy ({what}) while it holds it",
                )
            # A plain SET NX fails on any key, a lock key saying SHARED for the last
            # millisecond of its readers' leases too (the scripts see they all ended).
            plain_on_key = command == "SET" and name.key in self.store.types
            if (
                not self.store.refused_writes  # a migrating slot's: the waiter's recheck's
                and self.available(name, token, was, queue)
                and not plain_on_key
                and not set(now) - set(was)
                and token not in now
            ):
                self.fail(
                    "progress",
                    f"{self.label(token)}'s attempt ({what}) could be served on {name.key} "
                    f"(holders {[self.label(t) for t in was]}, queue "
                    f"{[self.label(t) for t in queue]}) and nobody was",
                )
        if was and not now and not self.store.refused_writes:
            waiting = [t for t in self.queued(name) if self.listening(t)]
            if waiting:
                self.fail(
                    "progress",
                    f"{what} freed {name.key} and handed it to nobody, though "
                    f"{self.label(waiting[0])} waits for it, listening",
                )
        for new in set(now) - set(was) - {token}:  # served by this command, not its sender
            if not self.listening(new):
                self.fail(  # a grant to a process that is gone
                    "progress",
                    f"{what} hands {name.key} to {self.label(new)}, whose process does not "
                    "listen: nobody can hear the grant",
                )
            if self.ghost(new) and new not in self.uncertain:
                self.fail(
                    "ghost",
                    f"{what} hands {name.key} to {self.label(new)}, which no longer waits for "
                    "it (its acquire was not cut short)",
                )
        if name.family == "lock":
            for new in set(now) - set(was):
                if not new.endswith(protocol.READER_SUFFIX):
                    continue
                before = queue[: queue.index(new)] if new in queue else queue
                ahead = [t for t in before if not t.endswith(protocol.READER_SUFFIX)]
                ahead = [t for t in ahead if self.listening(t) and t != token]  # not leaving
                if ahead:
                    self.fail(
                        "order",
                        f"reader {self.label(new)} comes in ({what}) past "
                        f"{self.label(ahead[0])}, a writer queued before it and listening",
                    )
        if name.family == "semaphore":
            for new in set(now) - set(was):
                before = queue[: queue.index(new)] if new in queue else queue
                # Passed over: queued before it, listening, not served with it, not leaving.
                ahead = [t for t in before if t not in now and t != token and self.listening(t)]
                if ahead:
                    self.fail(
                        "order",
                        f"{self.label(new)} takes a slot of {name.key} ({what}) past "
                        f"{self.label(ahead[0])}, queued before it and listening",
                    )

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
        if self.unclaimed and "ghost" not in self.skip:
            self.check_unclaimed()

    def check_hold(self, hold: Hold) -> None:
        lease = hold.lease
        if lease.state is not lifecycle.State.HELD or hold.actor.dead:
            return
        now = self.world.now
        seen = (self.store.version, lease.recorded_at, self.last_disturbance)
        if seen == hold.seen and now < hold.until:
            return  # nothing it depends on changed, and no deadline passed
        hold.seen = seen
        name = self.names[hold.name]
        token = lease.token
        held = token in self.holders(name)
        disturbed = self.last_disturbance is not None and self.last_disturbance >= round(
            lease.recorded_at * US
        )
        if held:
            if hold.pending_loss is not None:
                self.fail(
                    "loud-loss",
                    f"{self.label(token)}'s lease ended on the server at "
                    f"{hold.pending_loss / US:.4f}s, and now {name.key} is handed back to it "
                    f"(a stale grant): it never learns it lost the lease",
                )
            end = self.server_end(name, token)
            hold.until = end - 1
            if not disturbed and round(lease.expires_at * US) > end + BELIEF_SLACK_US:
                self.fail(
                    "exclusion",
                    f"{self.label(token)} believes its lease on {name.key} ends at "
                    f"{lease.expires_at:.4f}s, after the server's end ({end / US:.4f}s): it "
                    "would go on believing it holds after another could have taken it",
                )
            return
        if hold.pending_loss is None:
            hold.pending_loss = now
            self.world.note(lambda: f"{self.label(token)}'s lease is gone from the server "
                            f"(its holder has not heard yet)")  # fmt: skip
            session = hold.actor.session
            if self.world.quiet and session is not None and session.auto_renew:
                self.fail(
                    "keep",
                    f"{self.label(token)}'s lease ended although it is renewed and no fault "
                    "has happened",
                )
        valid = now + BELIEF_SLACK_US < round(lease.expires_at * US)
        hold.until = round(lease.expires_at * US) - BELIEF_SLACK_US if valid else 2**62
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
        bound = round((RECHECK + PROGRESS_SLACK) * US)
        for actor in world.actors:
            task = actor.task
            idle = (
                actor.phase == "acquiring"
                and not actor.dead
                and task is not None
                and task.blocked in ("wait", "sleep")
                and actor.proc.paused_until <= now
                and actor.session is not None
                and actor.claim is not None
            )
            if idle:
                assert actor.session is not None and actor.claim is not None
                name = self.names[actor.session.name]
                idle = self.available(name, actor.claim.token, self.holders(name),
                                      self.queued(name))  # fmt: skip
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
                    f"while it could have been served on {actor.session.name}",
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
    return isinstance(reply, Error)

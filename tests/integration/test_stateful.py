"""Stateful property tests: hypothesis state machines with a model of who holds what, run
against a real redis-server (no fakes, no mocks).

- ``SyncLocks``: two worker threads and a spawned process act on two lock names through
  ``Lock`` objects (short ttls, ``wait=0``): acquire, release, extend, owned(), time
  passing (renewed and unrenewed leases), keys deleted or taken over server-side, the
  server stalled (``CLIENT PAUSE WRITE``). What ``acquire()`` takes belongs to the object:
  any thread using the object may release, extend or check it, and nothing re-enters it
  (another acquire of the name, through any object, the same one included, is refused).
- ``AsyncLocks``: the same with ``redlock_deco.asyncio.Lock`` and owner *tasks* sharing the
  lock objects, acquiring directly or in helper tasks (``asyncio.gather`` / ``shield``):
  the lease is the object's either way.
- ``Semaphores``: limit 2, threads, slots expiring and removed server-side.
- ``Sections``: ``current_lease()`` through nested ``@locked``/``@limited`` calls, ``with``
  blocks, generators suspended inside ``with`` blocks and blocks entered through an
  ``ExitStack`` handed out with ``pop_all()`` (by the owner, or by a thread that then ends),
  closed here or by another thread: all ending out of order, with keys and slots removed
  while held (only the outermost exit raises LockLost).

Timing is modelled, not assumed: a lease that was never renewed is certainly on the server
until ``ttl`` after the request that set it was *sent*, certainly gone ``ttl`` after its
reply (plus EPS), and either in between. Renewed leases (ttl >= 1 s, renewed every third
of it) are assumed to survive the short stalls injected here, and a renewed lease removed
from outside must be reported lost within a third of its ttl (plus RENEWAL_SLACK). Never
allowed in any case: two holders of one name (more than ``limit`` for a semaphore) on the
server, or in what the holders themselves believe, unless a key was removed from outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import multiprocessing
import queue
import threading
import traceback
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from support import stateful_workers as workers
from support.lease_commands import NOT_COMMON, describe, release_everything_async, run_common_async
from support.stateful import (
    ALIVE,
    CALL_TIMEOUT,
    GONE,
    MAYBE,
    SHRINKING_TIMEOUT,
    LeaseModel,
    LoopOwners,
    OwnersMachine,
    QueueOwner,
    TaskOwner,
    machine_settings,
    no_error,
    now,
    ok,
    raised,
    stop_all,
    timed,
)

import redlock_deco.asyncio
from redlock_deco import (
    Lock,
    LockError,
    LockLost,
    LockNotOwned,
    Semaphore,
    current_lease,
    limited,
    locked,
)
from redlock_deco.testing import RedisServer

pytestmark = pytest.mark.slow

NAMES = ("a", "b")
# Owners: o0 and o1 are threads and o2 a spawned process (sync), or three tasks (asyncio).
OWNERS = ("o0", "o1", "o2")
VARIANTS = tuple(workers.VARIANTS)
MIN_RENEWED_TTL = 2.0  # renewed leases never get less: injected stalls are <= 80 ms, and a
# renewal (every third of it) may run late by up to 4/3 s on a loaded CI machine before the
# lease ends (at 0.6 s a 0.4 s stall of the renewer once ended a lease the model called live;
# at 1 s, beside a mutation run and a review's scripts, one more did)
spawn = multiprocessing.get_context("spawn")


# Rules choose among what is held by index: what is held depends on timing, and hypothesis
# needs the data it draws to be the same whatever the timing was.
PICK = st.integers(0, 255)
OBJECTS = [(owner, name, variant) for owner in OWNERS for name in NAMES for variant in VARIANTS]


def pick_from(options: list[Any], pick: int, otherwise: list[Any] | None = None) -> Any:
    """The ``pick``-th option (cyclically), else of ``otherwise``; None if both are empty."""
    options = options or otherwise or []
    return options[pick % len(options)] if options else None


def ttl_of(variant: str) -> float:
    return float(workers.VARIANTS[variant]["ttl"])


@dataclass(eq=False)
class Held(LeaseModel):
    """The model of one lease (lock) or slot (semaphore)."""

    name: str
    token: str
    ttl: float
    renewed: bool
    sent: float  # before the request that last set its expiry was sent
    replied: float  # after its reply arrived
    gone: bool = False  # certainly not on the server any more (tokens never come back)
    lost: bool | None = False  # what lease.lost must say: False, True, or None = either
    released: bool = False
    vanished_at: float = 0.0  # when a renewed lease was found (by us) to be gone
    evicted: bool = False  # removed from outside the library (its holder cannot know)


# -- owners ----------------------------------------------------------------------------


class ThreadOwner(QueueOwner):
    """A long-lived worker thread owning its locks; commands go through queues."""

    def __init__(self, name: str, shared: dict[Any, Any]) -> None:
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.outbox: queue.Queue[Any] = queue.Queue()
        self.thread = threading.Thread(
            target=workers.serve_thread,
            args=(self.inbox, self.outbox, shared),
            name=name,
            daemon=True,
        )
        self.thread.start()


class ProcessOwner:
    """A spawned process owning its own Lock objects, driven through a pipe."""

    def __init__(self, url: str) -> None:
        self.conn, child = spawn.Pipe()
        self.process = spawn.Process(
            target=workers.serve_process, args=(child, url), name="owner-process", daemon=True
        )
        self.process.start()
        child.close()
        self.ready = False

    def _recv(self, what: Any) -> tuple[Any, ...]:
        if not self.conn.poll(CALL_TIMEOUT):
            raise AssertionError(f"owner process stuck on {what!r}")
        reply: tuple[Any, ...] = self.conn.recv()
        return reply

    def call(self, cmd: tuple[Any, ...]) -> tuple[Any, ...]:
        if not self.ready:  # it boots while the first steps run
            ok(self._recv("start-up"), "owner process start-up")
            self.ready = True
        self.conn.send(cmd)
        return self._recv(cmd)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
            raise AssertionError("owner process did not stop")
        self.conn.close()


class AsyncOwners(LoopOwners):
    """Owner tasks of one loop sharing the lock objects (ownership is per task)."""

    def obj(self, kind: str, name: str, variant: str) -> Any:
        key = (kind, name, variant)
        if key not in self.objects:
            self.objects[key] = workers.make(kind, name, variant, is_async=True)
        return self.objects[key]

    async def _run(
        self, op: str, kind: str = "", name: str = "", variant: str = "", arg: Any = None
    ) -> Any:
        if op == "reset":
            return await release_everything_async(self.objects.values())
        obj = self.obj(kind, name, variant)
        if op == "acquire":
            if arg == "plain":
                granted = await obj.acquire()
            elif arg == "gather":
                (granted,) = await asyncio.gather(obj.acquire())
            else:
                granted = await asyncio.shield(obj.acquire())
            return granted, describe(obj.lease)  # the object's, whoever acquired
        if (value := await run_common_async(obj, op, arg)) is not NOT_COMMON:
            return value
        raise ValueError(op)


# -- locks -----------------------------------------------------------------------------


class LockMachine(OwnersMachine):
    """Owners acting on NAMES through Lock objects of two variants (see workers.VARIANTS).

    What ``acquire()`` takes belongs to the object: the model keeps, per object, the leases
    it holds (``held``, newest last; release/extend/owned() through the object act on the
    newest, whichever owner uses the object), and every lease with what is known of it on
    the server. Nothing re-enters: while a lease of a name is live, every acquire of the
    name is refused, through another object or the same one, by any owner.
    """

    is_async = False
    EMPTY_WITHIN = 1.0

    def __init__(self, server: RedisServer) -> None:
        self.held: dict[tuple[str, str, str], list[Held]] = defaultdict(list)
        self.foreign = itertools.count()
        super().__init__(server)
        self.leases: list[Held]

    def object_of(self, owner: str, name: str, variant: str) -> tuple[str, str, str]:
        """Which object ``owner`` uses for (name, variant): "shared" for one several use."""
        raise NotImplementedError

    def users(self, obj: tuple[str, str, str]) -> list[str]:
        """The owners that can reach object ``obj``."""
        return [owner for owner in OWNERS if self.object_of(owner, *obj[1:]) == obj]

    def rivals(self, name: str) -> list[Held]:
        return [held for held in self.leases if held.name == name and not held.gone]

    def holding(self, owner: str, name: str, variant: str) -> list[Held]:
        """The leases of the object ``owner`` uses for (name, variant), newest last."""
        return self.held[self.object_of(owner, name, variant)]

    def targets(self) -> list[tuple[str, str, str]]:
        """(owner, name, variant) reaching an object that holds something: every owner that
        uses that object."""
        found = []
        for obj, mine in self.held.items():
            if mine:
                found.extend((owner, obj[1], obj[2]) for owner in self.users(obj))
        return sorted(found)

    # -- rules --

    @rule(
        owner=st.sampled_from(OWNERS),
        name=st.sampled_from(NAMES),
        variant=st.sampled_from(VARIANTS),
        form=st.sampled_from(["plain", "plain", "gather", "shield"]),
    )
    def acquire(self, owner: str, name: str, variant: str, form: str) -> None:
        self.do_acquire(owner, name, variant, form)

    @rule(pick=PICK)
    def acquire_again(self, pick: int) -> None:
        """Acquire through an object that holds it: refused while its lease is live (a
        second acquire waits for a release, as a threading.Lock's does)."""
        self.do_acquire(*pick_from(self.targets(), pick, OBJECTS), "plain")

    @rule(pick=PICK, variant=st.sampled_from(VARIANTS), owner=st.sampled_from(OWNERS))
    def acquire_contended(self, pick: int, variant: str, owner: str) -> None:
        """Try a name somebody holds (or held, if its lease expired)."""
        name = pick_from([n for n in NAMES if self.rivals(n)], pick, list(NAMES))
        self.do_acquire(owner, name, variant, "plain")

    def do_acquire(self, owner: str, name: str, variant: str, form: str) -> None:
        if not self.is_async:
            form = "plain"  # helper tasks exist in asyncio only
        mine = self.holding(owner, name, variant)
        what = f"{owner} acquire {name} via {variant} ({form})"
        t0, reply, t1 = timed(lambda: self.call(owner, "acquire", "lock", name, variant, form))
        granted, lease = ok(reply, what)
        statuses = {rival.status(t0, t1) for rival in self.rivals(name)}
        if not granted:
            assert statuses - {GONE}, f"{what}: refused although nobody holds it"
            shown = mine[-1].token if mine else None
            assert (lease and lease[0]) == shown, f"{what}: the object shows {lease!r}"
            return
        assert lease is not None and lease[1] is False
        assert ALIVE not in statuses, f"{what}: granted while another lease is live"
        for rival in self.rivals(name):
            rival.vanish()  # it had expired
        fresh = Held(
            name, lease[0], ttl_of(variant), bool(workers.VARIANTS[variant]["auto_renew"]), t0, t1
        )
        assert all(fresh.token != other.token for other in self.leases)
        self.leases.append(fresh)
        mine.append(fresh)

    @rule(
        owner=st.sampled_from(OWNERS),
        name=st.sampled_from(NAMES),
        variant=st.sampled_from(VARIANTS),
    )
    def release(self, owner: str, name: str, variant: str) -> None:
        self.do_release(owner, name, variant)

    @rule(pick=PICK)
    def release_held(self, pick: int) -> None:
        self.do_release(*pick_from(self.targets(), pick, OBJECTS))

    def do_release(self, owner: str, name: str, variant: str) -> None:
        mine = self.holding(owner, name, variant)
        what = f"{owner} release {name} via {variant}"
        t0, reply, t1 = timed(lambda: self.call(owner, "release", "lock", name, variant))
        if not mine:
            raised(reply, "LockNotOwned", what)
            return
        mine.pop().judge_release(reply, what, t0, t1)

    @rule(
        owner=st.sampled_from(OWNERS),
        name=st.sampled_from(NAMES),
        variant=st.sampled_from(VARIANTS),
        ttl=st.sampled_from([None, 0.3, 0.6, 1.0]),
    )
    def extend(self, owner: str, name: str, variant: str, ttl: float | None) -> None:
        self.do_extend(owner, name, variant, ttl)

    @rule(pick=PICK, ttl=st.sampled_from([None, 0.3, 0.6, 1.0]))
    def extend_held(self, pick: int, ttl: float | None) -> None:
        self.do_extend(*pick_from(self.targets(), pick, OBJECTS), ttl)

    def do_extend(self, owner: str, name: str, variant: str, ttl: float | None) -> None:
        mine = self.holding(owner, name, variant)
        held = mine[-1] if mine else None
        seconds = ttl if ttl is not None else ttl_of(variant)
        if held is not None and held.renewed and seconds < MIN_RENEWED_TTL:
            ttl = seconds = MIN_RENEWED_TTL  # see MIN_RENEWED_TTL
        what = f"{owner} extend {name} via {variant} to {ttl}"
        t0, reply, t1 = timed(lambda: self.call(owner, "extend", "lock", name, variant, ttl))
        if held is None:
            raised(reply, "LockNotOwned", what)
            return
        held.judge_extend(reply, what, t0, t1, seconds)

    @rule(
        owner=st.sampled_from(OWNERS),
        name=st.sampled_from(NAMES),
        variant=st.sampled_from(VARIANTS),
    )
    def check_owned(self, owner: str, name: str, variant: str) -> None:
        self.do_check_owned(owner, name, variant)

    @rule(pick=PICK)
    def check_owned_held(self, pick: int) -> None:
        self.do_check_owned(*pick_from(self.targets(), pick, OBJECTS))

    def do_check_owned(self, owner: str, name: str, variant: str) -> None:
        mine = self.holding(owner, name, variant)
        what = f"{owner} owned() {name} via {variant}"
        t0, reply, t1 = timed(lambda: self.call(owner, "owned", "lock", name, variant))
        owned, lease = ok(reply, what)
        if not mine:
            assert owned is False and lease is None, f"{what}: {reply!r} but holds nothing"
            return
        held = mine[-1]
        held.judge_owned(owned, lease, what, t0, t1)

    @rule(
        name=st.sampled_from(NAMES),
        how=st.sampled_from(["delete", "take over", "stall 20 ms", "stall 80 ms"]),
    )
    def disturb(self, name: str, how: str) -> None:
        """From outside the library: the key deleted (eviction, an operator), overwritten by
        another client's token, or the server stalled (``CLIENT PAUSE WRITE``)."""
        if how.startswith("stall"):
            self.admin.client_pause(int(how.split()[1]), all=False)
            return
        token = f"foreign-{next(self.foreign)}"
        if how == "delete":
            self.admin.delete(f"lock:{name}")
        else:
            t0, _, t1 = timed(lambda: self.admin.set(f"lock:{name}", token, px=300))
        for held in self.rivals(name):
            held.vanish()
            held.evicted = True
        if how == "take over":
            self.leases.append(Held(name, token, 0.3, False, t0, t1, released=True))

    # -- invariants --

    @invariant()
    def server_agrees(self) -> None:
        for name in NAMES:
            rivals = self.rivals(name)
            assert len(rivals) <= 1, f"model holds {rivals} on {name}"
            t0, value, t1 = timed(lambda name=name: self.admin.get(f"lock:{name}"))
            if not rivals:
                assert value is None, f"lock:{name} holds {value!r}, but nobody holds it"
                continue
            held = rivals[0]
            status = held.status(t0, t1)
            if status == ALIVE:
                assert value == held.token, f"lock:{name} is {value!r}, not {held.token!r}"
            elif value != held.token:
                assert value is None, f"lock:{name} holds {value!r}, unknown to the model"
                held.vanish()
        stray = set(self.admin.keys("*")) - {f"lock:{name}" for name in NAMES}
        assert not stray, f"keys nobody should have written: {stray}"

    @invariant()
    def owners_agree(self) -> None:
        """Each object's view of its newest lease, through an owner using it, matches the
        model; and no two objects believe they hold one name (not lost, time left) unless
        its key was removed from outside."""
        believed: dict[str, set[str]] = defaultdict(set)
        for obj, mine in list(self.held.items()):
            if not mine:
                continue
            owner, name, variant = self.users(obj)[0], obj[1], obj[2]
            held = mine[-1]
            what = f"{owner} lease of {name} via {variant}"
            t0, reply, t1 = timed(
                lambda o=owner, n=name, v=variant: self.call(o, "probe", "lock", n, v)
            )
            lease = ok(reply, what)
            assert lease is not None and lease[0] == held.token, f"{what}: {lease!r}"
            held.check_lost(lease[1], what, t0)
            held.check_remaining(lease[2], t0, t1, what)
            if not lease[1] and lease[2] > 0 and not held.evicted:
                believed[name].add(held.token)
        for name, tokens in believed.items():
            assert len(tokens) <= 1, f"owners believe they hold {name} at once: {tokens}"

    def clean_up(self) -> None:
        for held in self.leases:  # what take_over wrote, if it is still there
            if held.token.startswith("foreign-"):
                with contextlib.suppress(redis.ResponseError):
                    self.admin.eval(
                        "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                        "return redis.call('DEL', KEYS[1]) end return 0",
                        1,
                        f"lock:{held.name}",
                        held.token,
                    )


class SyncLocks(LockMachine):
    """o0, o1: threads (their "manual" objects are their own, the "renewed" ones shared by
    both threads); o2: a spawned process with its own objects."""

    def object_of(self, owner: str, name: str, variant: str) -> tuple[str, str, str]:
        if owner in ("o0", "o1") and variant == "renewed":
            return ("shared", name, variant)
        return (owner, name, variant)

    def start_owners(self) -> None:
        shared = {
            ("lock", name, "renewed"): Lock(name, wait=0, **workers.VARIANTS["renewed"])
            for name in NAMES
        }
        self.owners = {"o2": ProcessOwner(self.server.url)}  # boots during the first steps
        self.owners["o0"] = ThreadOwner("owner-o0", shared)
        self.owners["o1"] = ThreadOwner("owner-o1", shared)

    def stop_owners(self) -> None:
        stop_all(self.owners)


class AsyncLocks(LockMachine):
    """o0, o1, o2: tasks of one loop, sharing every lock object."""

    is_async = True

    def object_of(self, owner: str, name: str, variant: str) -> tuple[str, str, str]:
        return ("shared", name, variant)

    def start_owners(self) -> None:
        self.loop_owners = AsyncOwners(len(OWNERS))
        self.owners = {owner: TaskOwner(self.loop_owners, i) for i, owner in enumerate(OWNERS)}

    def stop_owners(self) -> None:
        self.loop_owners.stop()


@SHRINKING_TIMEOUT
def test_sync_locks(server: RedisServer) -> None:
    run_state_machine_as_test(lambda: SyncLocks(server), settings=machine_settings(20, 25))


@SHRINKING_TIMEOUT
def test_async_locks(server: RedisServer) -> None:
    run_state_machine_as_test(lambda: AsyncLocks(server), settings=machine_settings(20, 25))


# -- semaphores ------------------------------------------------------------------------


class Semaphores(OwnersMachine):
    """Three worker threads take slots of two semaphores (limit 2) through ``Semaphore``
    objects ("manual" ones per thread, "renewed" ones shared by all three). Every acquire
    takes a slot, which belongs to the object: release/extend/owned through it act on its
    newest, whichever thread uses it."""

    def __init__(self, server: RedisServer) -> None:
        self.entries: dict[tuple[str, str, str], list[Held]] = defaultdict(list)
        super().__init__(server)
        self.leases: list[Held]  # the slots

    def start_owners(self) -> None:
        shared = {("sem", name, "renewed"): workers.make("sem", name, "renewed") for name in NAMES}
        self.owners = {owner: ThreadOwner(f"owner-{owner}", shared) for owner in OWNERS}

    def stop_owners(self) -> None:
        stop_all(self.owners)

    def live(self, name: str) -> list[Held]:
        return [slot for slot in self.leases if slot.name == name and not slot.gone]

    @staticmethod
    def object_of(owner: str, name: str, variant: str) -> tuple[str, str, str]:
        return ("shared", name, variant) if variant == "renewed" else (owner, name, variant)

    def mine(self, owner: str, name: str, variant: str) -> list[Held]:
        """The slots of the object ``owner`` uses for (name, variant), newest last."""
        return self.entries[self.object_of(owner, name, variant)]

    def targets(self) -> list[tuple[str, str, str]]:
        """(owner, name, variant) reaching an object that holds a slot."""
        found = []
        for (who, name, variant), mine in self.entries.items():
            if mine:
                users = OWNERS if who == "shared" else (who,)
                found.extend((owner, name, variant) for owner in users)
        return sorted(found)

    def counts(self, name: str, t0: float, t1: float) -> tuple[int, int]:
        """(slots certainly live, slots maybe live) of ``name`` during [t0, t1]."""
        statuses = [slot.status(t0, t1) for slot in self.live(name)]
        return statuses.count(ALIVE), statuses.count(MAYBE)

    @rule(
        owner=st.sampled_from(OWNERS),
        name=st.sampled_from(NAMES),
        variant=st.sampled_from(VARIANTS),
    )
    def acquire(self, owner: str, name: str, variant: str) -> None:
        self.do_acquire(owner, name, variant)

    @rule(pick=PICK, owner=st.sampled_from(OWNERS), variant=st.sampled_from(VARIANTS))
    def acquire_contended(self, pick: int, owner: str, variant: str) -> None:
        """Try a name somebody holds a slot of (or held, if it expired)."""
        name = pick_from([n for n in NAMES if self.live(n)], pick, list(NAMES))
        self.do_acquire(owner, name, variant)

    def do_acquire(self, owner: str, name: str, variant: str) -> None:
        what = f"{owner} acquire {name} via {variant}"
        t0, reply, t1 = timed(lambda: self.call(owner, "acquire", "sem", name, variant))
        granted, lease = ok(reply, what)
        alive, maybe = self.counts(name, t0, t1)
        if not granted:
            assert alive + maybe >= workers.LIMIT, f"{what}: refused with {alive} live slots"
            return
        assert alive < workers.LIMIT, f"{what}: granted with {alive} live slots"
        assert lease is not None and lease[1] is False
        slot = Held(
            name, lease[0], ttl_of(variant), bool(workers.VARIANTS[variant]["auto_renew"]), t0, t1
        )
        self.leases.append(slot)
        self.mine(owner, name, variant).append(slot)

    @rule(pick=PICK)
    def release(self, pick: int) -> None:
        """Release the newest slot of an object that holds one (else of any object)."""
        owner, name, variant = pick_from(self.targets(), pick, OBJECTS)
        mine = self.mine(owner, name, variant)
        what = f"{owner} release {name} via {variant}"
        t0, reply, t1 = timed(lambda: self.call(owner, "release", "sem", name, variant))
        if not mine:
            raised(reply, "LockNotOwned", f"{what}, holding none")
            return
        slot = mine.pop()
        status = slot.status(t0, t1)
        if reply[0] == "ok":
            assert status != GONE, f"{what}: released a slot that had ended"
        else:
            raised(reply, "LockNotOwned", what)
            assert status != ALIVE, f"{what}: refused although the slot is live"
        slot.released = True
        slot.vanish()

    @rule(pick=PICK, ttl=st.sampled_from([None, 0.3, 0.6, 1.0]))
    def extend(self, pick: int, ttl: float | None) -> None:
        owner, name, variant = pick_from(self.targets(), pick, OBJECTS)
        mine = self.mine(owner, name, variant)
        seconds = ttl if ttl is not None else ttl_of(variant)
        if mine and mine[-1].renewed and seconds < MIN_RENEWED_TTL:
            ttl = seconds = MIN_RENEWED_TTL
        what = f"{owner} extend {name} via {variant} to {ttl}"
        t0, reply, t1 = timed(lambda: self.call(owner, "extend", "sem", name, variant, ttl))
        if not mine:
            raised(reply, "LockNotOwned", f"{what}, holding none")
            return
        mine[-1].judge_extend(reply, what, t0, t1, seconds)

    @rule(pick=PICK)
    def check_owned(self, pick: int) -> None:
        owner, name, variant = pick_from(self.targets(), pick, OBJECTS)
        mine = self.mine(owner, name, variant)
        what = f"{owner} owned() {name} via {variant}"
        t0, reply, t1 = timed(lambda: self.call(owner, "owned", "sem", name, variant))
        owned, lease = ok(reply, what)
        if not mine:
            assert owned is False and lease is None, f"{what}: {reply!r} but holds nothing"
        else:
            mine[-1].judge_owned(owned, lease, what, t0, t1)
        t0, reply, t1 = timed(lambda: self.call(owner, "holders", "sem", name, variant))
        holders = ok(reply, f"{owner} holders() of {name}")
        alive, maybe = self.counts(name, t0, t1)
        assert alive <= holders <= alive + maybe, f"holders() {holders}: {alive} (+{maybe}) live"

    @rule(
        pick=PICK,
        name=st.sampled_from(NAMES),
        how=st.sampled_from(["remove a holder", "delete", "stall 20 ms", "stall 80 ms"]),
    )
    def disturb(self, pick: int, name: str, how: str) -> None:
        """From outside: one holder removed from the set, the whole set deleted (eviction),
        or the server stalled."""
        if how.startswith("stall"):
            self.admin.client_pause(int(how.split()[1]), all=False)
        elif how == "delete":
            self.admin.delete(f"sem:{name}")
            for slot in self.live(name):
                slot.vanish()
                slot.evicted = True
        elif self.live(name):
            slot = pick_from(self.live(name), pick)
            self.admin.zrem(f"sem:{name}", slot.token)
            slot.vanish()
            slot.evicted = True

    @invariant()
    def at_most_limit_live(self) -> None:
        for name in NAMES:
            t0 = now()
            with self.admin.pipeline(transaction=True) as pipe:
                pipe.time().zrange(f"sem:{name}", 0, -1, withscores=True).pttl(f"sem:{name}")
                (seconds, micros), members, pttl = pipe.execute()
            t1 = now()
            server_ms = seconds * 1000 + micros // 1000
            live = {member: score for member, score in members if score > server_ms}
            assert len(live) <= workers.LIMIT, f"sem:{name}: {len(live)} live holders: {live}"
            if live:  # the set must not expire before its live holders
                assert pttl >= max(live.values()) - server_ms - 5, f"sem:{name} PTTL {pttl}"
            known = {slot.token: slot for slot in self.live(name)}
            assert set(live) <= set(known), f"sem:{name}: holders unknown to the model: {live}"
            for token, slot in known.items():
                status = slot.status(t0, t1)
                if status == ALIVE:
                    assert token in live, f"sem:{name}: live slot {token} missing: {members}"
                elif token not in live:
                    slot.vanish()
                else:
                    assert status == MAYBE, f"sem:{name}: slot {token} should have ended"
        allowed = {f"sem:{name}" for name in NAMES} | {f"{{sem:{name}}}:limit" for name in NAMES}
        stray = set(self.admin.keys("*")) - allowed
        assert not stray, f"keys nobody should have written: {stray}"

    @invariant()
    def owners_agree(self) -> None:
        """Each owner's view of its newest slot (the one the API shows) matches the model;
        and holders never believe in more than ``limit`` of those per name at once (not
        lost, time left) unless some were removed from outside."""
        believed: dict[str, set[str]] = defaultdict(set)
        for (who, name, variant), mine in list(self.entries.items()):
            if mine:
                owner = OWNERS[0] if who == "shared" else who
                what = f"{owner} newest slot of {name} via {variant}"
                t0, reply, t1 = timed(
                    lambda o=owner, n=name, v=variant: self.call(o, "probe", "sem", n, v)
                )
                lease = ok(reply, what)
                assert lease is not None and lease[0] == mine[-1].token, f"{what}: {lease!r}"
                mine[-1].check_lost(lease[1], what, t0)
                mine[-1].check_remaining(lease[2], t0, t1, what)
                if not lease[1] and lease[2] > 0 and not mine[-1].evicted:
                    believed[name].add(lease[0])
        for name, tokens in believed.items():
            assert len(tokens) <= workers.LIMIT, f"holders believe in {tokens} of {name}"

    EMPTY_WITHIN = 1.5  # a deleted set's limit key lives out its ttl


@SHRINKING_TIMEOUT
def test_semaphores(server: RedisServer) -> None:
    run_state_machine_as_test(lambda: Semaphores(server), settings=machine_settings(20, 25))


# -- current_lease() -------------------------------------------------------------------

SECTION_NAMES = ("a", "b", "s")
# Sections entered through one shared Lock/Semaphore object and ending out of order were
# mixed up by the library (test_shared_object_sections_ending_out_of_order, now fixed); set
# this to True to steer the machine clear of that pattern.
KNOWN_BUG_SHARED_OBJECT = False  # two locks and a semaphore (limit 10: never busy here)
MAX_OPEN = 8
# The objects a section enters: fresh per section or one per name, of the plain classes or of
# subclasses whose hooks go through a decorator's wrapper.
SECTION_OBJECTS = ("fresh", "shared", "fresh wrapped", "shared wrapped")


class Stop(BaseException):
    """Unwinds the section owner's nested command loops."""


def _logged(method: Any) -> Any:
    """A decorator of the kind users put on methods (logging, tracing): a frame of its own
    between the ``with`` statement and the base's hook (review 81a, F1; 82a, F1)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    return wrapper


def _wrapped_hooks(base: type[Any]) -> type[Any]:
    """A subclass of ``base`` whose own hooks go through :func:`_logged`."""

    class Wrapped(base):  # type: ignore[valid-type,misc]
        @_logged
        def __enter__(self) -> Any:
            return super().__enter__()

        @_logged
        def __exit__(self, *exc: Any) -> Any:
            return super().__exit__(*exc)

    Wrapped.__name__ = Wrapped.__qualname__ = f"Wrapped{base.__name__}"
    return Wrapped


WrappedLock = _wrapped_hooks(Lock)
WrappedSemaphore = _wrapped_hooks(Semaphore)


class SectionOwner:
    """One thread entering and leaving protected sections on command.

    A section that ends last-in first-out (an ``@locked``/``@limited`` call, a ``with``
    block) runs a nested command loop inside it, so it stays open across machine steps;
    "exit" ends the innermost one. Generators suspended inside a ``with`` block end in any
    order, and may be left or closed by another thread (a step run elsewhere); inside its
    block, a generator may nest another block of the same object ("nest"). Lock/Semaphore
    objects are fresh per section, or one shared object per name, of the plain classes or of
    subclasses whose hooks go through a decorator's wrapper ("wrapped").
    """

    def __init__(self) -> None:
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.outbox: queue.Queue[Any] = queue.Queue()
        self.shared = {name: self.primitive(name) for name in SECTION_NAMES}
        self.shared_wrapped = {name: self.primitive(name, True) for name in SECTION_NAMES}
        self.gens: dict[int, Any] = {}
        self.stacks: dict[int, contextlib.ExitStack] = {}  # handed out with pop_all()

        @locked("{name}", ttl=30, wait=0)
        def locked_call(name: str) -> Any:
            return self.inside()

        @limited("{name}", limit=10, ttl=30, wait=0)
        def limited_call_(name: str) -> Any:
            return self.inside()

        self.decorated = {"lock": locked_call, "sem": limited_call_}
        self.thread = threading.Thread(target=self.main, name="section-owner", daemon=True)
        self.thread.start()

    @staticmethod
    def primitive(name: str, wrapped: bool = False) -> Any:
        if name == "s":
            return (WrappedSemaphore if wrapped else Semaphore)(name, limit=10, ttl=30, wait=0)
        return (WrappedLock if wrapped else Lock)(name, ttl=30, wait=0)

    def object(self, how: str, name: str) -> Any:
        """The object a section of ``how`` ("fresh"/"shared", maybe "wrapped") enters."""
        wrapped = how.endswith("wrapped")
        if "shared" in how:
            return (self.shared_wrapped if wrapped else self.shared)[name]
        return self.primitive(name, wrapped)

    @staticmethod
    def current() -> str | None:
        lease = current_lease(None)
        return None if lease is None else lease.token

    def main(self) -> None:
        try:
            self.serve()
        except Stop:
            pass
        finally:
            for gen in self.gens.values():
                with contextlib.suppress(Exception):
                    gen.close()
            for stack in self.stacks.values():
                with contextlib.suppress(Exception):
                    stack.close()

    def serve(self) -> None:
        """Run commands until "exit" (return: the enclosing section ends) or "stop"."""
        while True:
            cmd = self.inbox.get()
            if cmd[0] == "exit":
                return
            if cmd[0] == "stop":
                raise Stop
            try:
                reply: tuple[Any, ...] = ("ok", self.run(*cmd))
            except LockError as exc:
                reply = ("raised", type(exc).__name__, str(exc))
            except Exception:
                reply = ("error", traceback.format_exc())
            self.outbox.put(reply)

    def inside(self) -> None:
        self.outbox.put(("entered", self.current()))  # the reply to the command that entered
        self.serve()

    def section(self, lock: Any) -> Iterator[str | None]:
        with lock:
            while (sent := (yield self.current())) is None or sent == "nest":
                if sent == "nest":
                    self.nested(lock)
        yield self.current()  # after its block, as the generator sees it

    @staticmethod
    def nested(lock: Any) -> None:
        with lock:  # (a block of the same object, inside the generator's, in a call)
            pass

    def run(self, op: str, *args: Any) -> Any:
        if op == "enter":  # replies "entered" from inside; this is the reply to "exit"
            how, name = args
            try:
                if how == "decorated":
                    self.decorated["sem" if name == "s" else "lock"](name)
                else:
                    with self.object(how, name):
                        self.inside()
            except LockLost as exc:
                return type(exc).__name__, self.current()
            return None, self.current()
        if op == "open":
            gid, how, name = args
            gen = self.section(self.object(how, name))
            self.gens[gid] = gen
            return next(gen)
        if op == "resume":
            return next(self.gens[args[0]])
        if op == "nest":
            return self.gens[args[0]].send("nest")
        if op == "close":
            gid, how, where = args
            gen = self.gens.pop(gid)
            if where == "elsewhere":  # the step that ends the block, run by another thread
                return self.elsewhere(lambda: self.end(gen, how))
            return self.end(gen, how)
        return self.run_stack(op, *args)

    def end(self, gen: Any, how: str) -> tuple[str | None, str | None]:
        if how == "close":  # GeneratorExit inside the block: a loss raises LockLost too
            try:
                gen.close()
            except LockLost as exc:
                return type(exc).__name__, self.current()
            return None, self.current()
        try:
            seen = gen.send("leave")  # the block ends normally: a loss raises LockLost
        except LockLost as exc:
            return type(exc).__name__, self.current()
        gen.close()
        return None, seen

    def elsewhere(self, step: Any) -> tuple[str | None, str | None]:
        """``step()`` run by a thread of its own: what it returned, or raised (a LockError
        of ours is an answer: the machine compares it), the owner's current lease after."""
        out: list[Any] = []

        def run() -> None:
            try:
                out.append(step()[0])
            except BaseException as exc:  # (compared, and shown, by the machine)
                out.append(f"{type(exc).__name__}: {exc}")

        helper = threading.Thread(target=run)
        helper.start()
        helper.join(CALL_TIMEOUT)
        assert out, "the other thread's step did not finish"
        return out[0], self.current()

    def run_stack(self, op: str, *args: Any) -> Any:
        """The blocks entered through an ExitStack, and the probe."""
        if op == "stack":  # a block entered through an ExitStack, handed out with pop_all()
            sid, how, name = args
            with contextlib.ExitStack() as stack:
                stack.enter_context(self.object(how, name))
                token = self.current()
                self.stacks[sid] = stack.pop_all()
            return token
        if op == "helper stack":  # the same, by a thread of its own that then ends
            sid, how, name = args
            tokens: list[str | None] = []

            def hand_over() -> None:
                with contextlib.ExitStack() as stack:
                    stack.enter_context(self.object(how, name))
                    tokens.append(self.current())
                    self.stacks[sid] = stack.pop_all()

            helper = threading.Thread(target=hand_over)
            helper.start()
            helper.join(CALL_TIMEOUT)
            return tokens[0]
        if op == "close stack":  # here, or by a thread of its own
            sid, where = args
            handed = self.stacks.pop(sid)
            raised: list[str | None] = [None]

            def close() -> None:
                try:
                    handed.close()
                except LockLost as exc:
                    raised[0] = type(exc).__name__

            if where == "here":
                close()
            else:
                closer = threading.Thread(target=close)
                closer.start()
                closer.join(CALL_TIMEOUT)
            return raised[0], self.current()
        if op == "probe":
            return self.current()
        raise ValueError(op)

    def call(self, *cmd: Any) -> tuple[Any, ...]:
        self.inbox.put(cmd)
        try:
            reply: tuple[Any, ...] = self.outbox.get(timeout=CALL_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"section owner stuck on {cmd!r}") from None
        no_error(reply, repr(cmd))
        return reply

    def stop(self) -> None:
        self.inbox.put(("stop",))
        self.thread.join(5)
        assert not self.thread.is_alive(), "section owner did not stop"


@dataclass(eq=False)
class Section:
    seq: int
    name: str
    token: str
    gid: int | None  # a generator's id, None for a call or a with block
    shared: bool = False  # entered through the one object per name that sections share
    lost: bool = False  # its slot was removed server-side (semaphore sections)
    sid: int | None = None  # a handed-out ExitStack's id, for a block entered through one
    elsewhere: bool = False  # entered by a thread that has ended (not the owner's section)


class Sections(RuleBasedStateMachine):
    """``current_lease()`` is the lease of the innermost section still open in the calling
    thread (the most recently entered one that has not ended), or None -- from the thread
    and from inside a resumed generator; never another thread's. A lock's sections share one
    lease (re-entrant), a semaphore's each have their own slot; the server holds exactly
    those. A lease removed server-side while held is reported by the exit that gives it
    back: LockLost, whether that exit ends normally or by GeneratorExit (close())."""

    def __init__(self, server: RedisServer) -> None:
        super().__init__()
        self.admin = server.client(decode_responses=True)
        self.admin.flushall()
        self.open: list[Section] = []  # in order of entry
        self.calls: list[Section] = []  # the sections that end last-in first-out
        self.tokens: set[str] = set()
        self.seq = itertools.count()
        self.lock_lost = dict.fromkeys(SECTION_NAMES, False)  # key deleted while held
        self.slot_removed = False
        self.owner = SectionOwner()

    def innermost(self) -> str | None:
        mine = [section for section in self.open if not section.elsewhere]
        return mine[-1].token if mine else None

    def entered(self, name: str, token: str, gid: int | None, what: str, shared: bool) -> Section:
        same = [s.token for s in self.open if s.name == name]
        if same and name != "s":  # a lock re-entered: the same lease
            assert token == same[0], f"{what}: current_lease() {token}, the lease is {same[0]}"
        else:
            assert token not in self.tokens, f"{what}: current_lease() is an old lease {token}"
        self.tokens.add(token)
        section = Section(next(self.seq), name, token, gid, shared)
        self.open.append(section)
        return section

    @precondition(lambda self: len(self.open) < MAX_OPEN)
    @rule(
        how=st.sampled_from(["decorated", *(f"with {how}" for how in SECTION_OBJECTS)]),
        name=st.sampled_from(SECTION_NAMES),
    )
    def enter(self, how: str, name: str) -> None:
        what = f"enter {how} {name}"
        reply = self.owner.call("enter", how, name)
        assert reply[0] == "entered", f"{what}: {reply!r}"
        token = reply[1]
        self.calls.append(self.entered(name, token, None, what, "shared" in how))

    def may_end(self, section: Section) -> bool:
        """Whether ending ``section`` now stays clear of the known bug (see
        test_shared_object_sections_ending_out_of_order): with the library as it is, a
        section entered through a shared object may only end after every later section of
        that object has ended."""
        if not (KNOWN_BUG_SHARED_OBJECT and section.shared):
            return True
        later = self.open[self.open.index(section) + 1 :]
        return not any(other.shared and other.name == section.name for other in later)

    @precondition(lambda self: self.calls and self.may_end(self.calls[-1]))
    @rule()
    def exit(self) -> None:
        section = self.calls.pop()
        expected = self.ending(section)
        error, seen = ok(self.owner.call("exit"), f"exit {section}")
        assert error == expected, f"exit of {section}: {error} raised, expected {expected}"
        assert seen == self.innermost(), f"after exit of {section}: {seen}, not {self.open}"

    def ending(self, section: Section) -> str | None:
        """Forget ``section``; the error its end raises: LockLost if it gives back a lease
        that was lost meanwhile, whether it ends normally or by GeneratorExit (close():
        a note on GeneratorExit reached nobody, review 18) -- and only the outermost exit of
        a re-entered lock reports it."""
        self.open.remove(section)
        if section.name == "s":
            lost = section.lost
        elif any(other.name == section.name for other in self.open):
            return None  # an inner exit: the lease stays held
        else:
            lost, self.lock_lost[section.name] = self.lock_lost[section.name], False
        return "LockLost" if lost else None

    @precondition(lambda self: len(self.open) < MAX_OPEN)
    @rule(how=st.sampled_from(SECTION_OBJECTS), name=st.sampled_from(SECTION_NAMES))
    def open_generator(self, how: str, name: str) -> None:
        gid = next(self.seq)
        what = f"generator {gid}: with {how} {name}"
        token = ok(self.owner.call("open", gid, how, name), what)
        assert token is not None, f"{what}: no current_lease() inside"
        self.entered(name, token, gid, what, "shared" in how)

    def generators(self) -> list[Section]:
        return [section for section in self.open if section.gid is not None]

    @precondition(lambda self: len(self.open) < MAX_OPEN)
    @rule(how=st.sampled_from(SECTION_OBJECTS), name=st.sampled_from(SECTION_NAMES))
    def enter_stack(self, how: str, name: str) -> None:
        """A block entered through an ExitStack and handed out (pop_all()): it stays open,
        the owner's innermost, until the stack is closed, in any order, here or by another
        thread; that exit ends exactly this block (review 22, 06: it ended the closer's own
        block on the same object)."""
        sid = next(self.seq)
        what = f"stack {sid}: {how} {name}"
        token = ok(self.owner.call("stack", sid, how, name), what)
        assert token is not None, f"{what}: no current_lease() after entering"
        self.entered(name, token, None, what, "shared" in how).sid = sid

    @precondition(lambda self: len(self.open) < MAX_OPEN)
    @rule(how=st.sampled_from(SECTION_OBJECTS))
    def hand_over_stack(self, how: str) -> None:
        """A semaphore block entered through an ExitStack by a thread that hands the stack
        to the owner and ends: not the owner's section (its current_lease() is unchanged),
        and closing it, even inside the owner's own block on the same object, ends exactly
        it (review 22, 06 and 07: a third holder got in while the owner's body ran)."""
        sid = next(self.seq)
        what = f"helper's stack {sid}: {how} s"
        token = ok(self.owner.call("helper stack", sid, how, "s"), what)
        assert token is not None, f"{what}: no current_lease() after entering"
        section = self.entered("s", token, None, what, "shared" in how)
        section.sid, section.elsewhere = sid, True

    def stacks(self) -> list[Section]:
        return [section for section in self.open if section.sid is not None]

    @precondition(lambda self: self.stacks())
    @rule(data=st.data(), where=st.sampled_from(["here", "elsewhere"]))
    def close_stack(self, data: st.DataObject, where: str) -> None:
        section = data.draw(st.sampled_from(self.stacks()), label="stack")
        expected = self.ending(section)
        error, seen = ok(self.owner.call("close stack", section.sid, where), f"close {section}")
        assert error == expected, f"close of {section}: {error} raised, expected {expected}"
        assert seen == self.innermost(), f"after close of {section}: {seen}, not {self.open}"

    def endable_generators(self) -> list[Section]:
        return [section for section in self.generators() if self.may_end(section)]

    @precondition(lambda self: self.generators())
    @rule(data=st.data())
    def resume_generator(self, data: st.DataObject) -> None:
        section = data.draw(st.sampled_from(self.generators()), label="generator")
        seen = ok(self.owner.call("resume", section.gid), f"resume {section}")
        assert seen == self.innermost(), f"inside {section}: {seen}, not {self.open}"

    @precondition(lambda self: self.generators())
    @rule(data=st.data())
    def nest_in_generator(self, data: st.DataObject) -> None:
        """Inside the generator's block, a call nests a block of the same object: its exit
        leaves its own block (review 82a, F1: through a wrapped exit it ended the
        generator's, and another holder got in while the generator's body ran)."""
        section = data.draw(st.sampled_from(self.generators()), label="generator")
        seen = ok(self.owner.call("nest", section.gid), f"nest in {section}")
        assert seen == self.innermost(), f"inside {section}, nested: {seen}, not {self.open}"

    @precondition(lambda self: self.endable_generators())
    @rule(
        data=st.data(),
        how=st.sampled_from(["close", "leave"]),
        where=st.sampled_from(["here", "elsewhere"]),
    )
    def end_generator(self, data: st.DataObject, how: str, where: str) -> None:
        """The generator's block ends -- by a step this thread runs, or another thread
        (review 79a, F1; 81a, F1: through a wrapped hook that raised LockError and stayed
        held)."""
        section = data.draw(st.sampled_from(self.endable_generators()), label="generator")
        expected = self.ending(section)
        reply = self.owner.call("close", section.gid, how, where)
        error, seen = ok(reply, f"{how} {section} {where}")
        assert error == expected, f"{how} of {section} {where}: {error}, expected {expected}"
        if where == "here":  # (elsewhere, the generator saw the other thread's: none)
            assert seen == self.innermost(), f"after {how} of {section}: {seen}, not {self.open}"

    @rule(name=st.sampled_from(SECTION_NAMES), pick=PICK)
    def lose(self, name: str, pick: int) -> None:
        """The key (a lock) or one slot (the semaphore) is removed server-side while held."""
        sections = [s for s in self.open if s.name == name]
        if not sections:
            return
        if name == "s":
            section = pick_from(sections, pick)
            self.admin.zrem("sem:s", section.token)
            section.lost = self.slot_removed = True
        else:
            self.admin.delete(f"lock:{name}")
            self.lock_lost[name] = True

    @invariant()
    def innermost_is_current(self) -> None:
        assert ok(self.owner.call("probe"), "probe") == self.innermost(), self.open
        assert current_lease(None) is None, "another thread's section leaked into this one"
        for name in ("a", "b"):
            tokens = {s.token for s in self.open if s.name == name and not self.lock_lost[name]}
            assert self.admin.get(f"lock:{name}") == (tokens.pop() if tokens else None)
        holders = {s.token for s in self.open if s.name == "s" and not s.lost}
        assert set(self.admin.zrange("sem:s", 0, -1)) == holders, f"slots of {self.open}"

    def teardown(self) -> None:
        try:
            while self.open:  # newest first
                section = self.open.pop()
                if section.sid is not None:
                    ok(self.owner.call("close stack", section.sid, "here"), "closing a stack")
                elif section.gid is None:
                    assert self.calls.pop() is section
                    ok(self.owner.call("exit"), "leaving a section")
                else:
                    ok(
                        self.owner.call("close", section.gid, "close", "here"),
                        "closing a generator",
                    )
            assert ok(self.owner.call("probe"), "probe") is None
            left = set(self.admin.keys("*"))
            if self.slot_removed:  # the set vanished under its limit key: that one expires
                assert self.admin.pttl("{sem:s}:limit") in (-2, *range(1, 30_001))
                left.discard("{sem:s}:limit")
            assert not left, f"keys left behind: {left}"
        finally:
            try:
                self.owner.stop()
            finally:
                self.admin.close()


@SHRINKING_TIMEOUT
def test_sections(server: RedisServer) -> None:
    run_state_machine_as_test(lambda: Sections(server), settings=machine_settings(60, 30))


# -- minimal repros of what the machines found -----------------------------------------


def section_in(primitive: Any) -> Iterator[Any]:
    with primitive:
        yield current_lease()


def test_shared_object_sections_ending_out_of_order(r: redis.Redis) -> None:
    """Found by Sections (shrunk): one Semaphore object, a ``with`` block on it, and a
    generator started inside that block that enters the same object and is still suspended
    when the block ends. The block must give back *its* slot and drop *its* section; it gives
    back the generator's slot instead, and current_lease() is then the ended block's lease."""
    sem = Semaphore("s", limit=10, ttl=30, wait=0)
    with sem:
        outer = current_lease()
        gen = section_in(sem)
        inner = next(gen)
    try:
        assert outer is not None and inner is not None
        assert r.zrange("sem:s", 0, -1) == [inner.token.encode()]  # got [outer.token]
        assert current_lease() is inner  # got outer, whose block has ended
    finally:
        gen.close()


def test_shared_lock_sections_ending_out_of_order() -> None:
    """The same with one Lock object (re-entrant, so the lease itself is right): closing the
    first of two generators suspended inside ``with a:`` removes the *second* one's
    section, and current_lease() becomes the lease of "b", entered in between."""
    a = Lock("a", ttl=30, wait=0)
    first, b, second = section_in(a), section_in(Lock("b", ttl=30, wait=0)), section_in(a)
    next(first), next(b)
    lease_a = next(second)
    first.close()
    try:
        assert current_lease() is lease_a  # `second` is the innermost open section: got "b"
    finally:
        second.close()
        b.close()


def test_shared_async_object_sections_ending_out_of_order(server: RedisServer) -> None:
    """The asyncio twin (async generator inside ``async with`` on one shared Semaphore)."""

    async def section(sem: Any) -> Any:
        async with sem:
            yield current_lease()

    async def scenario() -> None:
        sem = redlock_deco.asyncio.Semaphore("s", limit=10, ttl=30, wait=0)
        async with sem:
            gen = section(sem)
            inner = await gen.__anext__()
        try:
            assert current_lease() is inner  # got the ended block's lease
        finally:
            await gen.aclose()

    asyncio.run(scenario())


def test_a_lease_held_by_the_object_leaves_the_tasks_own_alone(r: redis.Redis) -> None:
    """Regression (found while modelling the async machine, on the library before 811e485,
    where the first task using an object *adopted* the leases helper tasks had left to it):
    a task holding "n" through its own lease L2 that touches an object holding an expired
    helper-task lease L1 used to get L1 in its re-entrancy table over L2 -- re-entering "n"
    raised LockLost although the server said the task held it, and after releasing L2 every
    acquire of "n" by that task raised LockLost. Now the object keeps L1 to itself."""

    async def scenario() -> None:
        left = redlock_deco.asyncio.Lock("n", ttl=0.2, wait=0, auto_renew=False)
        mine = redlock_deco.asyncio.Lock("n", ttl=5, wait=0)
        assert await asyncio.gather(left.acquire()) == [True]  # L1, held by `left`
        await asyncio.sleep(0.3)  # L1 expires, unused
        async with mine:  # L2: this task holds "n" in a block
            token = mine.lease.token
            assert r.get("lock:n") == token.encode()
            assert left.lease is not None and left.lease.token != token  # the object's L1
            async with mine:  # re-enters L2
                assert mine.lease.token == token
        assert r.get("lock:n") is None
        assert await mine.acquire()  # free again: a fresh lease
        await mine.release()
        with pytest.raises(LockNotOwned):
            await left.release()  # L1 had expired

    asyncio.run(scenario())

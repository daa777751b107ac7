"""Stateful property tests of the reader-writer lock (``Lock(name, shared=True)``):
hypothesis state machines with a model of who holds what, against a real redis-server.

Three owners (threads for ``Lock``, tasks for ``redlock_deco.asyncio.Lock``) act on one name
through shared objects of both modes (reader: ``shared=True``; writer: plain) and two
variants (short unrenewed leases, renewed ones), always trying once (``wait=0``, so nobody
queues): acquire, release, extend, owned(), holders(), time passing, crashed holders (a
lease taken by the library's own acquire script on a connection that then goes quiet: never
renewed, never released) and force_release.

Timing is modelled as in tests/support/stateful.py: an unrenewed lease is certainly on the
server until ``ttl`` after its request was sent, certainly gone ``ttl`` (+EPS) after its
reply, maybe in between; renewed leases are live until released or removed.

Checked after every step, read from Redis in one script (one instant of the server):
- never a writer's token in the lock key while live readers are listed;
- while readers are listed live, the key says SHARED and lives at least as long as every
  live reader's lease (and so does the readers' set): readers never outlive the key;
- every key expires; no key but the lock key and its readers' set (nobody queues);
- who the server lists matches the model (every certainly-live holder there, nothing unknown);
- ``holders()`` counts what the model says may be live;
- no two owners believe they hold it in conflicting modes (unless removed by force).
And per step: a try-once shared acquire succeeds iff no writer's lease is live; a try-once
exclusive acquire iff no lease at all is live -- through any object, the one holding it
included: what ``acquire()`` takes belongs to the object, so nothing re-enters it, and any
owner may release, extend or check it through the object. (Re-entry and upgrades are of
sections: tests/integration/test_shared.py.)
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from hypothesis import strategies as st
from hypothesis.stateful import (
    invariant,
    rule,
    run_state_machine_as_test,
)
from support import shared_stateful_workers as workers
from support.stateful import (
    ALIVE,
    GONE,
    MAYBE,
    SHRINKING_TIMEOUT,
    LeaseModel,
    OwnersMachine,
    TaskOwner,
    machine_settings,
    ok,
    raised,
    stop_all,
    timed,
)

from redlock_deco import Lock
from redlock_deco import _scripts as scripts
from redlock_deco._protocol import HANDOFF_MS, QUEUE_WINDOW_MS, READER_SUFFIX, SHARED_VALUE
from redlock_deco._tokens import new_token
from redlock_deco.testing import RedisServer

pytestmark = pytest.mark.slow  # like test_stateful.py: run by the whole-suite legs

KEY = f"lock:{workers.NAME}"
QUEUE = f"{{{KEY}}}:queue"
READERS = f"{{{KEY}}}:readers"
OWNERS = ("o0", "o1", "o2")
MODES = workers.MODES
VARIANTS = tuple(workers.VARIANTS)
OBJECTS = [(mode, variant) for mode in MODES for variant in VARIANTS]  # shared by all owners
MIN_RENEWED_TTL = 2.0  # as test_stateful's: renewals late under load
SLACK_MS = 2  # PTTL and TIME read inside one script may differ by a millisecond


def server_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


# What the machines saw (printed with -s): grants and refusals by the rivals' statuses.
STATS: Counter[str] = Counter()

# One snapshot of everything the lock keeps, at one instant of the server.
SNAPSHOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local value = redis.call('GET', KEYS[1])
return {now, value, redis.call('PTTL', KEYS[1]),
        redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES'), redis.call('PTTL', KEYS[2]),
        redis.call('ZCARD', KEYS[3]), redis.call('DBSIZE'), redis.call('TIME')}
"""


@dataclass(eq=False)
class Held(LeaseModel):
    """The model of one lease: a reader's share or a writer's hold."""

    mode: str  # "r" or "w"
    token: str
    ttl: float
    renewed: bool
    sent: float
    replied: float
    owner: str | None = None  # None: a crashed holder (nobody will renew or release it)
    gone: bool = False
    lost: bool | None = False
    released: bool = False
    vanished_at: float = 0.0
    evicted: bool = False  # removed by force_release (its holder cannot know at once)


class ReadersWriters(OwnersMachine):
    """The model: every lease with what is known of it on the server; per object (mode,
    variant), shared by every owner, the leases it holds (``entries``, newest last)."""

    def __init__(self, server: RedisServer) -> None:
        self.entries: dict[tuple[str, str], list[Held]] = defaultdict(list)
        super().__init__(server)
        self.snapshot = self.admin.register_script(SNAPSHOT)
        self.leases: list[Held]

    def live(self) -> list[Held]:
        return [held for held in self.leases if not held.gone]

    def conflicting(self, mode: str) -> list[Held]:
        """What a new holder in ``mode`` must not coexist with."""
        return [h for h in self.live() if mode == "w" or h.mode == "w"]

    def targets(self) -> list[tuple[str, str, str]]:
        """(owner, mode, variant) reaching an object that holds something: any owner."""
        held = [obj for obj, mine in self.entries.items() if mine]
        return sorted((owner, *obj) for obj in held for owner in OWNERS)

    # -- rules --

    @rule(
        owner=st.sampled_from(OWNERS),
        mode=st.sampled_from(MODES),
        variant=st.sampled_from(VARIANTS),
    )
    def acquire(self, owner: str, mode: str, variant: str) -> None:
        self.do_acquire(owner, mode, variant)

    @rule(pick=st.integers(0, 255), owner=st.sampled_from(OWNERS))
    def acquire_fresh(self, pick: int, owner: str) -> None:
        """Through an object holding nothing (contention, rather than a second hold)."""
        free = [o for o in OBJECTS if not self.entries[o]] or list(OBJECTS)
        self.do_acquire(owner, *free[pick % len(free)])

    def do_acquire(self, owner: str, mode: str, variant: str) -> None:
        mine = self.entries[(mode, variant)]
        what = f"{owner} acquire {mode} via {variant}"
        t0, reply, t1 = timed(lambda: self.call(owner, "acquire", mode, variant))
        granted, lease = ok(reply, what)
        fresh = self.admitted(mode, bool(granted), t0, t1, what, lease and lease[0])
        if fresh is None:
            shown = mine[-1].token if mine else None
            assert (lease and lease[0]) == shown, f"{what}: refused, the object shows {lease!r}"
            return
        assert lease is not None and lease[1] is False, f"{what}: {lease!r}"
        assert lease[0].endswith(READER_SUFFIX) == (mode == "r"), f"{what}: token {lease[0]}"
        fresh.renewed = bool(workers.VARIANTS[variant]["auto_renew"])
        fresh.ttl = float(workers.VARIANTS[variant]["ttl"])
        fresh.owner = owner
        mine.append(fresh)

    def admitted(
        self, mode: str, granted: bool, t0: float, t1: float, what: str, token: str | None
    ) -> Held | None:
        """Check a fresh try-once attempt's answer against the model; the new lease."""
        rivals = self.conflicting(mode)
        statuses = {rival.status(t0, t1) for rival in rivals}
        STATS[f"{mode} {'granted' if granted else 'refused'} (rivals {sorted(statuses)})"] += 1
        if not granted:
            assert statuses - {GONE}, (
                f"{what}: refused although no {'writer' if mode == 'r' else 'holder'} "
                f"may be live: {self.live()}"
            )
            return None
        assert ALIVE not in statuses, f"{what}: granted while a conflicting lease is live: {rivals}"
        others = sum(1 for held in self.live() if held.mode == "r")
        if mode == "r" and others:
            STATS["r granted beside other readers"] += 1
        for rival in rivals:
            rival.vanish()  # it had ended
        assert token is not None and all(token != other.token for other in self.leases)
        fresh = Held(mode, token, 0.0, False, t0, t1)
        self.leases.append(fresh)
        return fresh

    @rule(
        owner=st.sampled_from(OWNERS),
        mode=st.sampled_from(MODES),
        variant=st.sampled_from(VARIANTS),
    )
    def release(self, owner: str, mode: str, variant: str) -> None:
        self.do_release(owner, mode, variant)

    @rule(pick=st.integers(0, 255))
    def release_held(self, pick: int) -> None:
        targets = self.targets()
        if targets:
            self.do_release(*targets[pick % len(targets)])

    def do_release(self, owner: str, mode: str, variant: str) -> None:
        mine = self.entries[(mode, variant)]
        what = f"{owner} release via {mode} {variant}"
        t0, reply, t1 = timed(lambda: self.call(owner, "release", mode, variant))
        if not mine:
            raised(reply, "LockNotOwned", what)
            return
        mine.pop().judge_release(reply, what, t0, t1)

    @rule(pick=st.integers(0, 255), ttl=st.sampled_from([None, 0.3, 0.6, 1.0]))
    def extend_held(self, pick: int, ttl: float | None) -> None:
        targets = self.targets()
        if not targets:
            return
        owner, mode, variant = targets[pick % len(targets)]
        held = self.entries[(mode, variant)][-1]
        seconds = ttl if ttl is not None else float(workers.VARIANTS[variant]["ttl"])
        if held.renewed and seconds < MIN_RENEWED_TTL:
            ttl = seconds = MIN_RENEWED_TTL
        what = f"{owner} extend via {mode} {variant} to {ttl}"
        t0, reply, t1 = timed(lambda: self.call(owner, "extend", mode, variant, ttl))
        held.judge_extend(reply, what, t0, t1, seconds)

    @rule(pick=st.integers(0, 255))
    def check_owned(self, pick: int) -> None:
        targets = self.targets()
        if not targets:
            return
        owner, mode, variant = targets[pick % len(targets)]
        held = self.entries[(mode, variant)][-1]
        what = f"{owner} owned() via {mode} {variant}"
        t0, reply, t1 = timed(lambda: self.call(owner, "owned", mode, variant))
        owned, lease = ok(reply, what)
        held.judge_owned(owned, lease, what, t0, t1)

    @rule(mode=st.sampled_from(MODES), ttl=st.sampled_from([0.15, 0.4]))
    def crashed_holder(self, mode: str, ttl: float) -> None:
        """A holder in another process takes it (the library's own try-once acquire script)
        and crashes at once: nothing renews or releases its lease."""
        token = new_token() + (READER_SUFFIX if mode == "r" else "")
        script = scripts.SHARED_ACQUIRE if mode == "r" else scripts.LOCK_ACQUIRE
        args = (token, int(ttl * 1000), 0, QUEUE_WINDOW_MS, HANDOFF_MS, 1, 1)
        t0, reply, t1 = timed(lambda: self.admin.eval(script.source, 3, KEY, QUEUE, READERS, *args))
        what = f"crashed {mode} holder"
        fresh = self.admitted(mode, reply[0] == 1, t0, t1, what, token)
        if fresh is not None:
            fresh.ttl = ttl
            fresh.released = True  # nobody will ever release it

    @rule()
    def force_release(self) -> None:
        """An operator removes whoever holds it: every share, or the writer (or finds nothing:
        no precondition on what is live, which depends on timing, and a precondition that
        does makes Hypothesis's replays draw differently: FlakyStrategyDefinition)."""
        t0, released, t1 = timed(lambda: Lock.force_release(workers.NAME))
        statuses = [held.status(t0, t1) for held in self.live()]
        if ALIVE in statuses:
            assert released.removed and released.kind == "lock", f"{released!r}: {self.live()}"
        if not released.removed:
            assert set(statuses) <= {GONE, MAYBE}, f"{released!r}: {self.live()}"
        assert not released.handed_to, f"nobody queues, yet {released!r}"
        STATS[f"force_release removed {len(released.holders)}"] += 1
        for held in self.live():
            held.vanish()
            held.evicted = True

    # -- invariants --

    @invariant()
    def server_agrees(self) -> None:
        t0, snap, t1 = timed(lambda: self.snapshot(keys=[KEY, READERS, QUEUE]))
        server_now, value, pttl, flat, readers_pttl, queued, dbsize, t = snap
        # PTTL reads the clock as it runs: a server descheduled mid-script (a loaded machine)
        # reads each PTTL that much later than `now`.
        ran = int(t[0]) * 1000 + int(t[1]) // 1000 - server_now
        scores = {flat[i]: float(flat[i + 1]) for i in range(0, len(flat), 2)}
        live_readers = {token: end for token, end in scores.items() if end > server_now}
        state = f"key={value!r} pttl={pttl} readers={scores} (now {server_now}) model={self.live()}"
        # the layout
        if value is not None and value != SHARED_VALUE:
            assert not live_readers, f"a writer's token while readers are live: {state}"
        if live_readers:
            longest = max(live_readers.values()) - server_now
            assert value == SHARED_VALUE, f"live readers, but the key is not SHARED: {state}"
            assert pttl + ran >= longest - SLACK_MS, f"readers outlive the lock key: {state}"
            assert readers_pttl + ran >= longest - SLACK_MS, f"readers outlive their set: {state}"
        if value is not None:
            # (0 is a key in its last millisecond: a script sees keys at its start time)
            assert pttl >= 0, f"the lock key never expires: {state}"
        if scores:
            assert readers_pttl >= 0, f"the readers' set never expires: {state}"
        assert queued == 0, f"nobody waits, yet {queued} queued: {state}"
        expected = (value is not None) + bool(scores)
        assert dbsize == expected, f"keys besides the lock's: {self.admin.keys('*')}"
        # the model
        known = {held.token: held for held in self.leases}
        if value is not None and value != SHARED_VALUE:
            writer = known.get(value)
            assert writer is not None and writer.mode == "w", f"unknown holder: {state}"
            assert writer.status(t0, t1) != GONE, f"a writer the model knows ended: {state}"
        for token in live_readers:
            reader = known.get(token)
            assert reader is not None and reader.mode == "r", f"unknown reader {token}: {state}"
            assert reader.status(t0, t1) != GONE, f"reader {token} should have ended: {state}"
        for held in self.live():
            there = value == held.token if held.mode == "w" else held.token in live_readers
            status = held.status(t0, t1)
            if status == ALIVE:
                assert there, f"{held} is live, but not on the server: {state}"
            elif not there:
                held.vanish()

    @invariant()
    def holders_agree(self) -> None:
        t0, reply, t1 = timed(lambda: self.call("o0", "holders", "r", "manual"))
        count, locked = ok(reply, "holders()")
        statuses = [(held.mode, held.status(t0, t1)) for held in self.live()]
        alive = sum(1 for _, status in statuses if status == ALIVE)
        maybe = sum(1 for _, status in statuses if status == MAYBE)
        assert alive <= count <= alive + maybe, f"holders() {count}, model {self.live()}"
        if ("w", ALIVE) in statuses:
            assert count == 1, f"holders() {count} while a writer holds it"
        assert locked == (count >= 1) or maybe, f"locked() {locked}, holders() {count}"

    @invariant()
    def owners_agree(self) -> None:
        """Each object's view of its newest lease (probed by one owner, then another) matches
        the model, and no object believes it writes while another believes it holds it
        (unless removed by force)."""
        believed: dict[str, set[str]] = defaultdict(set)
        for index, ((mode, variant), mine) in enumerate(list(self.entries.items())):
            if not mine:
                continue
            owner = OWNERS[index % len(OWNERS)]
            held = mine[-1]
            what = f"{owner} lease via {mode} {variant}"
            t0, reply, t1 = timed(lambda o=owner, m=mode, v=variant: self.call(o, "probe", m, v))
            lease = ok(reply, what)
            assert lease is not None and lease[0] == held.token, f"{what}: {lease!r}"
            held.check_lost(lease[1], what, t0)
            held.check_remaining(lease[2], t0, t1, what)
            if not lease[1] and lease[2] > 0 and not held.evicted:
                believed[held.mode].add(held.token)
        writers, readers = believed["w"], believed["r"]
        assert len(writers) <= 1 and not (writers and readers), (
            f"owners believe they hold it in conflicting modes: writers {writers}, "
            f"readers {readers}"
        )


class SyncReadersWriters(ReadersWriters):
    """o0, o1, o2: threads sharing every Lock object."""

    def start_owners(self) -> None:
        self.owners = workers.sync_owners(OWNERS)

    def stop_owners(self) -> None:
        stop_all(self.owners)


class AsyncReadersWriters(ReadersWriters):
    """o0, o1, o2: tasks of one loop sharing every asyncio Lock object."""

    def start_owners(self) -> None:
        self.loop_owners = workers.AsyncOwners(len(OWNERS))
        self.owners = {o: TaskOwner(self.loop_owners, i) for i, o in enumerate(OWNERS)}

    def stop_owners(self) -> None:
        self.loop_owners.stop()


@SHRINKING_TIMEOUT
def test_sync_readers_writers(server: RedisServer) -> None:
    run_state_machine_as_test(lambda: SyncReadersWriters(server), settings=machine_settings(30, 20))
    print(f"\nsync: {dict(sorted(STATS.items()))}")
    STATS.clear()


@SHRINKING_TIMEOUT
def test_async_readers_writers(server: RedisServer) -> None:
    run_state_machine_as_test(
        lambda: AsyncReadersWriters(server), settings=machine_settings(20, 20)
    )
    print(f"\nasync: {dict(sorted(STATS.items()))}")
    STATS.clear()


# -- deterministic checks of what the machines rely on --------------------------------------


def test_readers_share_and_a_writer_waits_for_the_last(r: redis.Redis) -> None:
    """Two readers at once; a writer is refused until both have gone; every key goes."""
    import threading

    results: dict[str, Any] = {}

    def reader(tag: str, hold: threading.Event, held: threading.Event) -> None:
        lock = Lock(workers.NAME, shared=True, ttl=5, wait=0)
        results[tag] = lock.acquire()
        held.set()
        hold.wait(5)
        lock.release()

    hold, held1, held2 = threading.Event(), threading.Event(), threading.Event()
    threads = [
        threading.Thread(target=reader, args=("a", hold, held1)),
        threading.Thread(target=reader, args=("b", hold, held2)),
    ]
    for thread in threads:
        thread.start()
    assert held1.wait(5) and held2.wait(5)
    try:
        assert results == {"a": True, "b": True}
        assert r.get(KEY) == SHARED_VALUE.encode() and r.zcard(READERS) == 2
        writer = Lock(workers.NAME, ttl=5, wait=0)
        assert writer.holders() == 2 and writer.locked()
        assert writer.acquire() is False
    finally:
        hold.set()
        for thread in threads:
            thread.join(5)
    assert writer.acquire() is True
    assert r.get(KEY) == writer.lease.token.encode()
    other: list[bool] = []
    probe = threading.Thread(
        target=lambda: other.append(Lock(workers.NAME, shared=True, wait=0).acquire())
    )
    probe.start()
    probe.join(5)
    assert other == [False]  # a writer blocks readers (of another thread)
    assert Lock(workers.NAME, shared=True, wait=0).acquire() is False  # and of this one
    writer.release()
    # a block of this thread re-enters its exclusive block in shared mode: it stays exclusive
    with Lock(workers.NAME, ttl=5, wait=0) as outer:
        with Lock(workers.NAME, shared=True, wait=0) as inner:
            assert inner.lease is outer.lease and r.get(KEY) == outer.lease.token.encode()
        assert r.get(KEY) == outer.lease.token.encode()
    assert r.dbsize() == 0


def test_a_shorter_extend_keeps_the_key_alive_for_the_longest_reader(r: redis.Redis) -> None:
    """One reader shortens its lease below another's: the key must outlive both."""
    import threading

    done = threading.Event()
    ready = threading.Event()

    def long_reader() -> None:
        lock = Lock(workers.NAME, shared=True, ttl=2, wait=0, auto_renew=False)
        assert lock.acquire()
        ready.set()
        done.wait(5)
        with contextlib.suppress(Exception):
            lock.release()

    thread = threading.Thread(target=long_reader)
    thread.start()
    assert ready.wait(5)
    try:
        short = Lock(workers.NAME, shared=True, ttl=3, wait=0, auto_renew=False)
        assert short.acquire()
        short.extend(to=0.2)
        longest = max(score for _, score in r.zrange(READERS, 0, -1, withscores=True))
        # The server's clock read *after* PTTL: the key had at least that much left then (a
        # clock read before it, taken in two TIME calls, was off by the time between them).
        left = r.pttl(KEY)
        assert left >= longest - server_ms(r) - SLACK_MS
        short.release()
        longest = max(score for _, score in r.zrange(READERS, 0, -1, withscores=True))
        left = r.pttl(KEY)
        assert left >= longest - server_ms(r) - SLACK_MS
        assert left <= 2000  # settled to the remaining reader's lease
    finally:
        done.set()
        thread.join(5)
    assert r.dbsize() == 0

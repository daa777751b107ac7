"""Every Lua script ships in the installed package with its contract header, and answers
with the codes of the one reply table on a real server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from importlib import resources

import pytest
import redis

from redlock_deco import _scripts as scripts
from redlock_deco._protocol import AGAIN, HANDOFF_MS, QUEUE, QUEUE_WINDOW_MS, TRY

LUA = resources.files("redlock_deco").joinpath("lua")
NAMES = sorted(p.name.removesuffix(".lua") for p in LUA.iterdir() if p.name.endswith(".lua"))


@pytest.mark.parametrize("name", NAMES)
def test_script_has_contract_header_and_runs(name: str, r: redis.Redis) -> None:
    text = LUA.joinpath(f"{name}.lua").read_text("utf-8")
    header = text.split("\n\n", 1)[0]
    if name in ("waiters", "moving"):  # fragments: included by the others, put before them
        return
    assert "KEYS[1]" in header and "ARGV[1]" in header and "returns" in header
    script = scripts.load(name)
    assert r.script_load(script.source) == script.sha  # valid Lua, loadable
    if script.on_cluster is not None:  # and its text for a cluster (moving.lua first)
        assert r.script_load(script.on_cluster.source) == script.on_cluster.sha


# Script arguments after the token and ttl: queue window, the ttl of an entry without terms,
# PUBLISH counts prove a waiter gone (1), limit.
TAIL = (QUEUE_WINDOW_MS, HANDOFF_MS, 1, 1)
LOCK_KEYS = ("lock:s", "{lock:s}:queue")
SEM_KEYS = ("sem:s", "{sem:s}:queue", "{sem:s}:limit")


def token(process: str, secret: str) -> str:
    """A token of the library's shape: its waiter hears grants on ``redlock-deco:h:1:<process>``."""
    return f"h:1:{process}:{secret}"


def entry(tok: str, ttl: int = 5000, limit: int = 1) -> bytes:
    """A waiter's queue entry: its token and its own terms."""
    return f"{tok}|{ttl}|{limit}".encode()


@pytest.fixture
def listener(r: redis.Redis) -> Iterator[Callable[..., list[str]]]:
    """Subscribes to the grant channels of the given processes; returns what they heard."""
    pubsub = r.pubsub()

    def listen(*processes: str) -> list[str]:
        if processes:
            pubsub.subscribe(*(f"redlock-deco:h:1:{p}" for p in processes))
        heard = []
        while (message := pubsub.get_message(timeout=0.2)) is not None:
            if message["type"] == "message":
                heard.append(message["data"].decode())
        return heard

    yield listen
    pubsub.close()


def acquire(r: redis.Redis, tok: str, mode: int, ttl: int = 5000) -> list[int]:
    return r.eval(scripts.LOCK_ACQUIRE.source, 2, *LOCK_KEYS, tok, ttl, mode, *TAIL)


def release(
    r: redis.Redis, tok: str, leaving: bool = False, counted: int = 1, ttl: int = 5000
) -> int:
    args = (tok, HANDOFF_MS, counted, int(leaving), entry(tok, ttl).decode(), 1)
    return r.eval(scripts.LOCK_RELEASE.source, 2, *LOCK_KEYS, *args)


def sem_acquire(r: redis.Redis, tok: str, mode: int, limit: int, ttl: int = 5000) -> list[int]:
    args = (tok, ttl, mode, QUEUE_WINDOW_MS, HANDOFF_MS, 1, limit)
    return r.eval(scripts.SEM_ACQUIRE.source, 3, *SEM_KEYS, *args)


def sem_release(r: redis.Redis, tok: str, limit: int, ttl: int = 5000) -> int:
    args = (tok, HANDOFF_MS, 1, 0, entry(tok, ttl, limit).decode(), limit)
    return r.eval(scripts.SEM_RELEASE.source, 3, *SEM_KEYS, *args)


def test_lock_scripts_reply_codes(r: redis.Redis, listener: Callable[..., list[str]]) -> None:
    t1, t2 = token("p1", "t1"), token("p2", "t2")
    listener("p2")  # t2's process listens for its grant
    extend = scripts.LOCK_EXTEND.source
    assert acquire(r, t1, TRY) == [1, 5000]
    code, left = acquire(r, t2, QUEUE, ttl=9000)
    assert code == 0 and 4000 < left <= 5000
    assert r.zrange("{lock:s}:queue", 0, -1) == [entry(t2, 9000)]  # t2 queued, with its terms
    assert r.eval(extend, 1, "lock:s", t2, 9000) == 0
    assert r.eval(extend, 1, "lock:s", t1, 9000) == 1
    assert release(r, t2) == 0
    assert r.zrange("{lock:s}:queue", 0, -1) == [entry(t2, 9000)]  # a refused release: untouched
    assert release(r, t1) == 1
    # Handed to the queued waiter for its own ttl (9 s, not a constant hand-off lease), and
    # its process heard the grant on its channel, naming what it was granted.
    assert r.get("lock:s") == t2.encode() and 5000 < r.pttl("lock:s") <= 9000
    assert listener() == [f"{t2} L lock:s"]
    assert acquire(r, t2, AGAIN, ttl=9000) == [1, 9000]  # confirmed
    assert r.keys("*") == [b"lock:s"]  # the queue went with its last waiter
    assert release(r, t2) == 1 and r.dbsize() == 0
    assert release(r, t2) == 2  # gone


def test_a_release_skips_waiters_whose_process_is_gone(
    r: redis.Redis, listener: Callable[..., list[str]]
) -> None:
    holder, dead, alive = token("p1", "h"), token("gone", "d"), token("p3", "a")
    listener("p3")
    assert acquire(r, holder, TRY)[0] == 1
    assert acquire(r, dead, QUEUE)[0] == 0 and acquire(r, alive, QUEUE)[0] == 0
    assert release(r, holder) == 1
    assert r.get("lock:s") == alive.encode()  # nobody heard the dead one's grant: next
    assert listener() == [f"{alive} L lock:s"] and not r.exists("{lock:s}:queue")


def test_without_publish_counts_the_head_waiter_is_served_regardless(r: redis.Redis) -> None:
    """On a cluster a PUBLISH count covers one node and proves nothing: counted=0."""
    holder, waiter = token("p1", "h"), token("gone", "w")
    assert acquire(r, holder, TRY)[0] == 1 and acquire(r, waiter, QUEUE, ttl=700)[0] == 0
    assert release(r, holder, counted=0) == 1
    # It holds the lock for its own ttl if it never takes it (700 ms here).
    assert r.get("lock:s") == waiter.encode() and 0 < r.pttl("lock:s") <= 700


def test_release_without_waiters_leaves_no_key(r: redis.Redis) -> None:
    tok = token("p1", "t")
    assert acquire(r, tok, QUEUE) == [1, 5000]  # free: taken, not queued
    assert release(r, tok) == 1
    assert r.dbsize() == 0


def test_a_waiter_giving_up_leaves_nothing_behind(
    r: redis.Redis, listener: Callable[..., list[str]]
) -> None:
    holder, waiter = token("p1", "h"), token("p2", "w")
    listener("p2")
    assert acquire(r, holder, TRY)[0] == 1 and acquire(r, waiter, QUEUE)[0] == 0
    assert release(r, waiter, leaving=True) == 0  # not the holder: only left the queue
    assert r.keys("*") == [b"lock:s"]
    # A hand-off that reached a waiter just before it gave up is passed on, not kept.
    assert acquire(r, waiter, QUEUE)[0] == 0
    assert release(r, holder) == 1 and r.get("lock:s") == waiter.encode()
    assert release(r, waiter, leaving=True) == 1
    assert r.dbsize() == 0


@pytest.mark.parametrize("mode", [QUEUE, AGAIN])
def test_a_retried_attempt_queues_its_waiter_once(
    r: redis.Redis, listener: Callable[..., list[str]], mode: int
) -> None:
    """Finding a01: an attempt that ran and lost its reply is re-sent by the client's retry.
    The token must be queued once, or its second entry is served again later and hands the
    key back to a holder whose lease had ended, which then renews it: a silent second
    holder."""
    holder, waiter, other = token("p1", "h"), token("p2", "w"), token("p3", "o")
    listener("p2", "p3")
    assert acquire(r, holder, TRY)[0] == 1
    assert acquire(r, waiter, QUEUE)[0] == 0
    assert acquire(r, other, QUEUE)[0] == 0
    assert acquire(r, waiter, mode)[0] == 0  # the re-sent attempt
    assert r.zrange("{lock:s}:queue", 0, -1) == [entry(waiter), entry(other)]


def test_a_retried_attempt_that_was_granted_meanwhile_holds_and_leaves_the_queue(
    r: redis.Redis, listener: Callable[..., list[str]]
) -> None:
    """The attempt queued the waiter and lost its reply; a release granted the lock before
    the client's retry re-sent the attempt: the retry finds its own token holding the key
    (the lease is its own, taken to its ttl), not a busy lock to queue behind."""
    holder, waiter = token("p1", "h"), token("p2", "w")
    listener("p2")
    assert acquire(r, holder, TRY)[0] == 1
    assert acquire(r, waiter, QUEUE, ttl=8000)[0] == 0
    assert release(r, holder) == 1 and r.get("lock:s") == waiter.encode()
    assert acquire(r, waiter, QUEUE, ttl=8000) == [1, 8000]
    assert r.keys("*") == [b"lock:s"]  # not queued behind itself
    assert release(r, waiter, ttl=8000) == 1 and r.dbsize() == 0


def test_a_semaphore_hand_off_admits_a_waiter_only_within_its_own_limit(
    r: redis.Redis, listener: Callable[..., list[str]]
) -> None:
    """Finding a02: holders admitted with limit 3; a waiter with limit 1 must not be handed
    a slot while others hold (its entry carries its limit), and is once nobody does."""
    a, b, c, w = (token(p, p) for p in ("pa", "pb", "pc", "pw"))
    listener("pw")
    for holder in (a, b, c):
        assert sem_acquire(r, holder, TRY, limit=3)[0] == 1
    assert sem_acquire(r, w, QUEUE, limit=1, ttl=7000)[0] == 0
    assert sem_release(r, a, limit=3) == 1
    assert r.zscore("sem:s", w) is None and listener() == []  # two still hold: not within 1
    assert sem_release(r, b, limit=3) == 1
    assert r.zscore("sem:s", w) is None
    assert sem_release(r, c, limit=3) == 1
    assert r.zrange("sem:s", 0, -1) == [w.encode()] and listener() == [f"{w} S sem:s"]
    assert 5000 < r.pttl("sem:s") <= 7000  # its own ttl
    assert r.get("{sem:s}:limit") == b"1"
    assert sem_release(r, w, limit=1, ttl=7000) == 1 and r.dbsize() == 0


def test_a_retried_semaphore_attempt_holds_one_slot_and_never_queues_behind_it(
    r: redis.Redis, listener: Callable[..., list[str]]
) -> None:
    a, w = token("pa", "a"), token("pw", "w")
    listener("pw")
    assert sem_acquire(r, a, TRY, limit=1)[0] == 1
    assert sem_acquire(r, w, QUEUE, limit=1)[0] == 0
    assert sem_acquire(r, w, QUEUE, limit=1)[0] == 0  # re-sent
    assert r.zrange("{sem:s}:queue", 0, -1) == [entry(w)]
    assert sem_release(r, a, limit=1) == 1 and r.zrange("sem:s", 0, -1) == [w.encode()]
    assert sem_acquire(r, w, QUEUE, limit=1) == [1, 5000]  # re-sent after its grant
    assert r.zcard("sem:s") == 1 and not r.exists("{sem:s}:queue")


def test_a_retried_attempt_that_finds_the_lock_free_leaves_the_queue(
    r: redis.Redis, listener: Callable[..., list[str]]
) -> None:
    """The first copy of an attempt queued the waiter; the holder's lease then ended; the
    retried copy takes the free lock with SET NX and must take the entry out too, or it is
    served later to a holder whose lease had ended (found by the simulator)."""
    holder, waiter = token("p1", "h"), token("p2", "w")
    listener("p2")
    assert acquire(r, holder, TRY, ttl=100)[0] == 1
    assert acquire(r, waiter, QUEUE)[0] == 0
    assert r.zrange("{lock:s}:queue", 0, -1) == [entry(waiter)]
    time.sleep(0.15)  # the holder's lease ends
    assert acquire(r, waiter, QUEUE) == [1, 5000]  # the retried copy
    assert r.keys("*") == [b"lock:s"]


def test_newcomers_never_pass_a_semaphore_waiter_held_back_by_its_own_limit(
    r: redis.Redis, listener: Callable[..., list[str]]
) -> None:
    """Found in review: a waiter with limit 1 queued while two limit-3 callers hold; limit-3
    newcomers took every slot that came free before it (57 in 8 s) and it starved. In order:
    nobody passes it; it is admitted once nobody holds. A head whose process is gone does not
    hold the line."""
    a, b, w, n = (token(p, p) for p in ("pa", "pb", "pw", "pn"))
    listener("pw", "pn")
    assert sem_acquire(r, a, TRY, limit=3)[0] == 1 and sem_acquire(r, b, TRY, limit=3)[0] == 1
    assert sem_acquire(r, w, QUEUE, limit=1)[0] == 0
    assert sem_acquire(r, n, QUEUE, limit=3)[0] == 0  # a free slot, but w waits ahead of it
    assert r.zrange("{sem:s}:queue", 0, -1) == [entry(w, limit=1), entry(n, limit=3)]
    assert sem_release(r, a, limit=3) == 1  # one holder left: w still held back
    assert r.zscore("sem:s", w) is None and r.zscore("sem:s", n) is None
    assert sem_release(r, b, limit=3) == 1  # nobody holds: w first, then n within its limit
    assert set(r.zrange("sem:s", 0, -1)) == {w.encode(), n.encode()}
    assert sem_release(r, w, limit=1) == 1 and sem_release(r, n, limit=3) == 1
    # A waiter whose process is gone (nobody listens on its channel) never holds the line.
    dead = token("gone", "d")
    assert sem_acquire(r, a, TRY, limit=3)[0] == 1
    assert sem_acquire(r, dead, QUEUE, limit=1)[0] == 0
    assert sem_acquire(r, n, QUEUE, limit=3) == [1, 5000]

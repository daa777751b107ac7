"""Every Lua script ships in the installed package with its contract header, and answers
with the codes of the one reply table on a real server."""

from __future__ import annotations

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
    if name != "waiters":  # the shared fragment, included by the others
        assert "KEYS[1]" in header and "ARGV[1]" in header and "returns" in header
        script = scripts.load(name)
        assert r.script_load(script.source) == script.sha  # valid Lua, loadable


# Script arguments after the token and ttl: queue window, hand-off lease, PUBLISH counts prove
# a waiter gone (1), limit.
TAIL = (QUEUE_WINDOW_MS, HANDOFF_MS, 1, 1)
LOCK_KEYS = ("lock:s", "{lock:s}:queue")


def token(process: str, secret: str) -> str:
    """A token of the library's shape: its waiter hears grants on ``redlock-deco:h:1:<process>``."""
    return f"h:1:{process}:{secret}"


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


def acquire(r: redis.Redis, tok: str, mode: int) -> list[int]:
    return r.eval(scripts.LOCK_ACQUIRE.source, 2, *LOCK_KEYS, tok, 5000, mode, *TAIL)


def release(r: redis.Redis, tok: str, leaving: bool = False, counted: int = 1) -> int:
    args = (tok, HANDOFF_MS, counted, int(leaving))
    return r.eval(scripts.LOCK_RELEASE.source, 2, *LOCK_KEYS, *args)


def test_lock_scripts_reply_codes(r: redis.Redis, listener: Callable[..., list[str]]) -> None:
    t1, t2 = token("p1", "t1"), token("p2", "t2")
    listener("p2")  # t2's process listens for its grant
    extend = scripts.LOCK_EXTEND.source
    assert acquire(r, t1, TRY) == [1, 5000]
    code, left = acquire(r, t2, QUEUE)
    assert code == 0 and 4000 < left <= 5000
    assert r.lrange("{lock:s}:queue", 0, -1) == [t2.encode()]  # t2 queued
    assert r.eval(extend, 1, "lock:s", t2, 9000) == 0
    assert r.eval(extend, 1, "lock:s", t1, 9000) == 1
    assert release(r, t2) == 0
    assert r.lrange("{lock:s}:queue", 0, -1) == [t2.encode()]  # a refused release touched nothing
    assert release(r, t1) == 1
    # Handed to the queued waiter: the key holds its token for the hand-off lease, and its
    # process heard the grant on its channel.
    assert r.get("lock:s") == t2.encode() and 0 < r.pttl("lock:s") <= HANDOFF_MS
    assert listener() == [t2]
    assert acquire(r, t2, AGAIN) == [1, 5000]  # confirmed: taken to its own ttl
    assert r.pttl("lock:s") > HANDOFF_MS
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
    assert listener() == [alive] and not r.exists("{lock:s}:queue")


def test_without_publish_counts_the_head_waiter_is_served_regardless(r: redis.Redis) -> None:
    """On a cluster a PUBLISH count covers one node and proves nothing: counted=0."""
    holder, waiter = token("p1", "h"), token("gone", "w")
    assert acquire(r, holder, TRY)[0] == 1 and acquire(r, waiter, QUEUE)[0] == 0
    assert release(r, holder, counted=0) == 1
    assert r.get("lock:s") == waiter.encode()  # its hand-off lease ends if it never takes it


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

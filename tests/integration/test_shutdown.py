"""The end of an event loop: what it still holds is released and its clients are closed.

``asyncio.run`` cancels the tasks still running when ``main()`` returns; their locks must be
given back there and then, not left to expire after ttl (a task-based reaper was once
cancelled together with them and closed the clients under their releases). A loop closed by
hand (``run_until_complete`` + ``close``) must leave no pending task of ours to be destroyed
noisily, and ``await redlock_deco.aclose()`` cleans such a loop up before it is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Coroutine
from typing import Any

import pytest
import redis
from support.dropped import warns_dropped

import redlock_deco
import redlock_deco._process
import redlock_deco._providers
import redlock_deco.asyncio
from redlock_deco import limited, locked
from redlock_deco._protocol import LOCK, Claim, Keys
from redlock_deco.testing import RedisServer

TRIALS = 50
LOOPS = 30
TTL = 30  # far longer than any test here: a key gone at once was released, not expired

NOISE = ("Task was destroyed but it is pending", "ignored GeneratorExit")


@locked("bg:lock", ttl=TTL)
async def hold_lock(entered: asyncio.Event) -> None:
    entered.set()
    await asyncio.sleep(3600)


@limited("bg:sem", limit=2, ttl=TTL)
async def hold_slot(entered: asyncio.Event) -> None:
    entered.set()
    await asyncio.sleep(3600)


@locked("bg:renewed", ttl=0.3)
async def hold_renewed(entered: asyncio.Event) -> None:
    """Renewed every 0.1 s: a renewal may be in flight when the loop ends."""
    entered.set()
    await asyncio.sleep(3600)


async def hold_explicitly(entered: asyncio.Event) -> None:
    """A lock acquired by hand and never released."""
    assert await redlock_deco.asyncio.Lock("bg:explicit", ttl=TTL).acquire(wait=0)
    entered.set()
    await asyncio.sleep(3600)


async def start_holders() -> list[asyncio.Task[None]]:
    """Start tasks that hold a lock, both slots of a semaphore, a renewed lock and an
    explicit lock, and tasks waiting for the lock and for a slot; return once all hold."""
    events = [asyncio.Event() for _ in range(5)]
    tasks = [
        asyncio.create_task(hold_lock(events[0])),
        asyncio.create_task(hold_slot(events[1])),
        asyncio.create_task(hold_slot(events[2])),
        asyncio.create_task(hold_renewed(events[3])),
        asyncio.create_task(hold_explicitly(events[4])),
    ]
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in events)), 10)
    never = asyncio.Event()
    tasks += [asyncio.create_task(hold_lock(never)), asyncio.create_task(hold_slot(never))]
    await asyncio.sleep(0.01)  # the waiters are waiting
    return tasks


async def return_while_holding(
    r: redis.Redis, tasks: list[asyncio.Task[None]], linger: float
) -> None:
    """An ``asyncio.run`` main that returns while its tasks, and itself, hold locks."""
    tasks.extend(await start_holders())
    assert await redlock_deco.asyncio.Lock("main:explicit", ttl=TTL).acquire(wait=0)
    assert r.dbsize() >= 5
    await asyncio.sleep(linger)  # varies where the renewals are when the loop ends
    # main returns; asyncio.run cancels the tasks, still holding or waiting


def run_cancelling_again(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run(main)``; on Python 3.10, where redis-py can drop a cancel (docs/asyncio.md:
    "cancel again"), the loop's tasks are cancelled again every 5 s until it returns -- else a
    waiter whose cancel was dropped was handed the lock and held it for good, and asyncio.run
    never returned (CI's 3.10 leg, once, under load)."""
    if sys.version_info >= (3, 11):
        asyncio.run(main)
        return
    loops: list[asyncio.AbstractEventLoop] = []

    async def noting() -> None:
        loops.append(asyncio.get_running_loop())
        await main

    done = threading.Event()

    def cancel_all() -> None:
        for task in asyncio.all_tasks(loops[0]):
            task.cancel()

    def again() -> None:
        while not done.wait(5):
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loops[0].call_soon_threadsafe(cancel_all)

    watchdog = threading.Thread(target=again, daemon=True)
    watchdog.start()
    try:
        asyncio.run(noting())
    finally:
        done.set()
        watchdog.join()


def test_asyncio_run_releases_what_its_cancelled_tasks_held(r: redis.Redis) -> None:
    for trial in range(TRIALS):
        tasks: list[asyncio.Task[None]] = []
        with warns_dropped():
            run_cancelling_again(return_while_holding(r, tasks, linger=trial % 6 * 0.02))
        left = sorted(r.keys("*"))
        assert left == [], f"trial {trial}: left after asyncio.run returned: {left}"
        assert all(task.cancelled() for task in tasks), [
            task.exception() for task in tasks if not task.cancelled()
        ]


def test_asyncio_run_releases_a_lock_entered_with_async_with(r: redis.Redis) -> None:
    async def main() -> None:
        entered = asyncio.Event()

        async def inside() -> None:
            async with redlock_deco.asyncio.Lock("cm", ttl=TTL):
                entered.set()
                await asyncio.sleep(3600)

        asyncio.create_task(inside())  # noqa: RUF006  # left running on purpose
        await asyncio.wait_for(entered.wait(), 10)
        assert r.exists("lock:cm")

    asyncio.run(main())
    assert r.dbsize() == 0


@pytest.mark.parametrize("kind", ["lock", "shared", "semaphore"])
def test_asyncio_run_ending_as_a_task_leaves_its_block_releases(r: redis.Redis, kind: str) -> None:
    """Review 16, 10: ``main`` returns in the very turn in which a task leaves its ``async
    with``: the release task started at the block's exit is cancelled by the shutdown before
    its first step, so its own "cancelled: queue a clean-up" never ran, and the key stayed
    held by nobody for its ttl. The task's end queues the clean-up now, which the shutdown
    sends."""

    def primitive() -> Any:
        if kind == "shared":
            return redlock_deco.asyncio.Lock("turn", ttl=TTL, shared=True)
        if kind == "semaphore":
            return redlock_deco.asyncio.Semaphore("turn", limit=2, ttl=TTL)
        return redlock_deco.asyncio.Lock("turn", ttl=TTL)

    async def main() -> None:
        inside, leave = asyncio.Event(), asyncio.Event()

        async def worker() -> None:
            async with primitive():
                inside.set()
                await leave.wait()

        asyncio.create_task(worker())  # noqa: RUF006  # left running on purpose
        await inside.wait()
        leave.set()  # the worker leaves its block in this loop turn, and main returns in it

    for trial in range(5):
        asyncio.run(main())
        assert r.keys("*") == [], f"trial {trial}: left for its ttl: {r.keys('*')}"


def run_script(server: RedisServer, *parts: str) -> subprocess.CompletedProcess[str]:
    """Run ``parts`` in a fresh interpreter with the default provider on ``server``."""
    prelude = textwrap.dedent(
        f"""
        import asyncio, gc, sys, redis
        import redlock_deco, redlock_deco.asyncio, redlock_deco._process
        from redlock_deco import limited, locked
        redlock_deco.register_provider("default", {server.url!r})
        r = redis.Redis(port={server.port})
        """
    )
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", "".join(map(textwrap.dedent, (prelude, *parts)))],
        capture_output=True,
        text=True,
        timeout=60,
    )


# What each hand-managed loop runs: every kind of primitive, a lease held across a
# renewal (so the loop's renewer and a renewal round have run in it), and a wait for a held
# lock (so the loop's grant subscriber has started, and idles on when the loop closes).
JOB = """
@locked("job:lock", ttl=5)
async def guarded():
    return 1

@locked("job:contended", ttl=5, wait=5)
async def contended(hold):
    await asyncio.sleep(hold)

@limited("job:sem", limit=2, ttl=5)
async def limited_job():
    return 2

async def job():
    assert await guarded() == 1
    assert await limited_job() == 2
    async with redlock_deco.asyncio.Semaphore("job:cm", limit=1, ttl=5):
        pass
    # ttl 0.3 s (0.15 s once expired unrenewed on a machine running CI beside two test runs)
    lock = redlock_deco.asyncio.Lock("job:renewed", ttl=0.3)
    assert await lock.acquire(wait=1)
    await asyncio.sleep(0.2)  # renewed at 0.1 s
    await lock.release()
    await asyncio.gather(contended(0.05), contended(0))
"""


@pytest.mark.slow
def test_loops_closed_by_hand_leave_no_pending_task_behind(server: RedisServer) -> None:
    done = run_script(
        server,
        JOB,
        f"""
        for _ in range({LOOPS}):
            loop = asyncio.new_event_loop()
            loop.run_until_complete(job())
            loop.close()
            gc.collect()
        gc.collect()
        print("keys", r.dbsize())
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["keys", "0"]
    for noise in NOISE:
        assert noise not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_loops_closed_by_hand_after_aclose_leave_nothing_behind(server: RedisServer) -> None:
    done = run_script(
        server,
        JOB,
        f"""
        base = len(r.client_list())
        for _ in range({LOOPS}):
            loop = asyncio.new_event_loop()
            loop.run_until_complete(job())
            loop.run_until_complete(redlock_deco.aclose())
            loop.close()
            gc.collect()
        print("keys", r.dbsize(), "extra-clients", len(r.client_list()) - base)
        """,
    )
    assert done.returncode == 0, done.stderr
    keys, extra = done.stdout.split()[1::2]
    assert keys == "0" and int(extra) <= 0, done.stdout  # (another test's client may go)
    assert done.stderr == ""


@pytest.mark.slow
def test_loops_shut_down_by_hand_like_asyncio_run_leave_nothing_behind(
    server: RedisServer,
) -> None:
    """``shutdown_asyncgens()`` before ``close()`` (what asyncio.run does) cleans up too."""
    done = run_script(
        server,
        JOB,
        f"""
        async def keep_holding():
            lock = redlock_deco.asyncio.Lock("kept", ttl=30)
            assert await lock.acquire(wait=0)
            kept.append(lock)  # referenced: the loop's shutdown, not the collector, ends it

        kept = []

        base = len(r.client_list())
        for _ in range({LOOPS}):
            loop = asyncio.new_event_loop()
            loop.run_until_complete(job())
            loop.run_until_complete(keep_holding())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            gc.collect()
        print("keys", r.dbsize(), "extra-clients", len(r.client_list()) - base)
        """,
    )
    assert done.returncode == 0, done.stderr
    keys, extra = done.stdout.split()[1::2]
    assert keys == "0" and int(extra) <= 0, done.stdout  # (another test's client may go)
    assert done.stderr == ""


def client_ids(r: redis.Redis) -> set[str]:
    return {str(client["id"]) for client in r.client_list()}


def new_clients(r: redis.Redis, before: set[str], timeout: float = 5.0) -> set[str]:
    """The server's clients that were not there ``before``, once there are none left (or when
    ``timeout`` runs out): a closed connection reaches the server a moment after the client
    let go of it. Compared by id, not counted: another test's connection ending meanwhile
    (this server is the worker's) once made a count come out one short."""
    deadline = time.monotonic() + timeout
    while True:
        left = client_ids(r) - before
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


def run_collected(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    """Run ``coro``, then collect garbage: Python 3.13 frees objects a coroutine dropped later
    than 3.10-3.12, after a ``pytest.warns`` block around the run alone had ended."""
    result = loop.run_until_complete(coro)
    gc.collect()
    return result


def test_aclose_releases_what_a_hand_managed_loop_holds_and_closes_its_clients(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    assert redlock_deco.aclose is redlock_deco._process.aclose
    before = client_ids(r)
    loop = asyncio.new_event_loop()
    try:
        with warns_dropped():
            tasks = run_collected(loop, start_holders())
        for task in tasks:  # the holders end without releasing
            task.cancel()
        loop.run_until_complete(asyncio.wait(tasks))

        async def hold_more() -> None:
            assert await redlock_deco.asyncio.Lock("more", ttl=TTL).acquire(wait=0)
            assert await redlock_deco.asyncio.Semaphore("more", limit=2, ttl=TTL).acquire(wait=0)

        with warns_dropped():
            run_collected(loop, hold_more())
        assert r.exists("lock:more")
        assert client_ids(r) - before  # the loop's client is connected
        loop.run_until_complete(redlock_deco.aclose())
        assert r.dbsize() == 0  # released at once, not after ttl
        assert new_clients(r, before) == set()
        loop.run_until_complete(redlock_deco.aclose())  # a second call is harmless
    finally:
        loop.close()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()
    assert not [rec for rec in caplog.records if rec.name == "asyncio"], caplog.text


def test_a_loop_used_again_after_aclose_builds_new_clients(r: redis.Redis) -> None:
    loop = asyncio.new_event_loop()
    try:

        async def use() -> None:
            async with redlock_deco.asyncio.Lock("again", ttl=TTL):
                assert r.exists("lock:again")

        loop.run_until_complete(use())
        loop.run_until_complete(redlock_deco.aclose())
        loop.run_until_complete(use())
        loop.run_until_complete(redlock_deco.aclose())
    finally:
        loop.close()
    assert r.dbsize() == 0


@pytest.mark.slow
def test_asyncio_run_finishes_a_clean_up_still_pending_at_shutdown() -> None:
    """An acquire cut short by a stall leaves a clean-up to the loop's renewer (its write may
    land when the server comes back). If the loop ends first, nothing would ever retry it:
    the loop's shutdown must run it, or the name stays locked by nobody for the whole ttl."""
    with RedisServer() as own:
        redlock_deco.register_provider("own", own.url)
        own_client = own.client()

        @locked("cut-short", wait=0.5, ttl=TTL, provider="own")
        async def call() -> str:
            return "ran"

        async def main() -> None:
            assert await call() == "ran"  # connected
            own.pause()
            try:
                with pytest.raises(redis.exceptions.TimeoutError):
                    await call()
            finally:
                own.resume()
            deadline = time.monotonic() + 5
            while not own_client.exists("lock:cut-short"):  # the stalled write lands now
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            # main returns with the clean-up still due (it is retried every 0.5 s)

        try:
            asyncio.run(main())
            assert own_client.keys("*") == []
        finally:
            own_client.close()


def test_aclose_refuses_while_a_running_task_holds_a_lease(r: redis.Redis) -> None:
    import redlock_deco
    from redlock_deco.asyncio import Lock

    async def main() -> None:
        inside = asyncio.Event()
        done = asyncio.Event()

        async def holder() -> None:
            async with Lock("live-holder", ttl=5):
                inside.set()
                await done.wait()

        task = asyncio.create_task(holder())
        await inside.wait()
        with pytest.raises(RuntimeError, match="live-holder"):
            await redlock_deco.aclose()
        assert r.exists("lock:live-holder")  # untouched: the holder is still inside
        done.set()
        await task
        await redlock_deco.aclose()

    asyncio.run(main())
    assert r.dbsize() == 0


@pytest.mark.slow
def test_shutdown_on_a_stalled_server_is_bounded() -> None:
    from redlock_deco import register_provider
    from redlock_deco._process import SHUTDOWN_TIMEOUT
    from redlock_deco.asyncio import Lock
    from redlock_deco.testing import RedisServer

    with RedisServer() as own:
        register_provider("stalling", own.url)

        async def main() -> None:
            for n in range(5):  # acquired and never released: left to the shutdown
                assert await Lock(f"left:{n}", provider="stalling", ttl=30).acquire()
            own.pause()

        started = time.monotonic()
        try:
            with warns_dropped():
                asyncio.run(main())
        finally:
            own.resume()
        assert time.monotonic() - started < SHUTDOWN_TIMEOUT + 2


def test_a_release_out_on_a_slow_link_when_asyncio_run_ends_still_frees_the_key(
    server: Any, r: redis.Redis
) -> None:
    """Review 12, 01: ``asyncio.run`` ended while a holder's release was out on a slow link
    (each command 0.5 s, its script to be loaded again). The cancelled release left its
    clean-up to the loop's shutdown, which gave each clean-up 1 s of its own: too short for
    a NOSCRIPT and the EVAL after it, and the key stayed held by nobody for its whole ttl.
    The shutdown's one deadline bounds them all now."""
    from redlock_deco.testing import FaultProxy

    with FaultProxy(server.port) as proxy:
        redlock_deco.register_provider("slow-link", proxy.url)

        async def holder(out: asyncio.Event) -> None:
            async with redlock_deco.asyncio.Lock("slow-release", provider="slow-link", ttl=TTL):
                r.script_flush()  # the release's EVALSHA is refused ...
                proxy.latency(0.5)  # ... slowly, and the EVAL after it is slow too
                out.set()

        async def main() -> None:
            out = asyncio.Event()
            task = asyncio.create_task(holder(out))
            await out.wait()
            await asyncio.sleep(0.15)  # the release is out; main returns: the loop ends
            assert not task.done()

        asyncio.run(main())
        proxy.heal()
    deadline = time.monotonic() + 5
    while r.exists("lock:slow-release"):
        assert time.monotonic() < deadline, "the key was left held by nobody for its ttl"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["cancelled", "loop-ended"])
def test_a_give_back_cut_short_before_its_first_step_still_frees_the_key(
    r: redis.Redis, how: str
) -> None:
    """A grant that reached a loop where nobody waits for it any more is given back by a
    task of its own. Cancelled before its first step -- by ``asyncio.run`` ending in that
    turn, or by a cancel-everything shutdown handler -- no handler inside it could run, and
    the key stayed held by nobody for the grantee's whole ttl. Its done-callback leaves the
    give-back to the renewer's clean-ups now, which a loop's shutdown tries once more."""
    from redlock_deco import _providers
    from redlock_deco._protocol import granted_claim

    token = "grantee-that-left"

    async def main() -> None:
        r.set("lock:given", token, px=TTL * 1000)  # the grant, as a release handed it over
        waiting = _providers.async_target("default").waiting
        claim = granted_claim(f"{token} L lock:given")
        assert waiting is not None and claim is not None
        waiting._start_give_back(claim)
        (task,) = [t for t in asyncio.all_tasks() if t.get_name() == "redlock-deco-give-back"]
        if how == "cancelled":
            task.cancel()  # before its first step
            deadline = time.monotonic() + 5
            while r.exists("lock:given"):
                assert time.monotonic() < deadline, "the grant was not given back"
                await asyncio.sleep(0.02)
        # loop-ended: main returns in this turn, and asyncio.run cancels the task unstarted

    asyncio.run(main())
    assert not r.exists("lock:given")


@pytest.mark.parametrize("held_by", ["block", "object"])
def test_an_async_generators_block_closed_at_shutdown_keeps_its_lock_to_its_end(
    r: redis.Redis, held_by: str
) -> None:
    """Review 18, 02: an async generator suspended inside its block when ``asyncio.run``
    ended is closed by ``shutdown_asyncgens()`` -- in one gather with the loop's own
    clean-up, which released every lease it still knew at once: another client got in while
    the generator's clean-up inside the block still ran, and nothing reported it. The
    clean-up lets the other async generators end first: a block's own exit, or an object's
    own release, releases the lease (an object's found it gone: LockNotOwned). Review 19,
    01: asyncio.run had stopped the loop's renewer with every task, and a ttl shorter than
    the clean-up expired under it: the renewer runs again while the loop waits."""
    import threading

    marks: dict[str, float] = {}
    lost: list[object] = []
    SHORT = 0.6  # shorter than the clean-up: renewed, or it expires under it

    async def in_a_block() -> Any:
        async with redlock_deco.asyncio.Lock("closing", ttl=SHORT, on_lost=lost.append):
            try:
                yield 1
            finally:
                marks["cleanup"] = time.monotonic()
                await asyncio.sleep(1.0)  # still inside the block, past the ttl
                marks["cleaned"] = time.monotonic()

    async def by_its_object() -> Any:
        lock = redlock_deco.asyncio.Lock("closing", ttl=SHORT, on_lost=lost.append)
        await lock.acquire()
        try:
            yield 1
        finally:
            marks["cleanup"] = time.monotonic()
            await asyncio.sleep(1.0)  # still held (its release raised LockNotOwned)
            marks["cleaned"] = time.monotonic()
            await lock.release()

    steps = in_a_block if held_by == "block" else by_its_object

    kept: list[Any] = []

    async def main() -> None:
        agen = steps()
        kept.append(agen)  # still referenced when main returns: closed by the shutdown
        assert await agen.__anext__() == 1
        watcher.start()  # tries from now on

    def other() -> None:
        deadline = time.monotonic() + 10
        lock = redlock_deco.Lock("closing", ttl=TTL)
        while not lock.acquire(blocking=False):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        marks["other"] = time.monotonic()
        lock.release()

    watcher = threading.Thread(target=other)
    asyncio.run(main())
    watcher.join(15)
    assert marks["other"] >= marks["cleaned"], (
        f"another client got in {marks['cleaned'] - marks['other']:.3f} s before the "
        "generator's clean-up inside its block ended"
    )
    assert lost == []
    assert r.keys("*") == []


# The async generator ``steps()``, advanced once and still referenced when asyncio.run's
# main returns: the loop's shutdown_asyncgens() closes it, beside the library's clean-up.
SUSPENDED_AT_THE_END = """
kept = []

async def main():
    agen = steps()
    kept.append(agen)
    await agen.__anext__()

asyncio.run(main())
kept.clear()
gc.collect()
"""


def test_a_block_that_outlives_the_shutdowns_wait_is_lost_and_reopens_no_client(
    server: RedisServer,
) -> None:
    """Review 19, 02: a generator's clean-up inside its block took longer than the loop's
    shutdown waits (2.5 s). The block is reported lost and released, as documented; its exit
    afterwards made a new loop state -- a new client on the closed loop, never closed
    (unclosed socket, transport and connection at the end)."""
    done = run_script(
        server,
        """
        import time
        lost = []

        async def steps():
            async with redlock_deco.asyncio.Lock("outlived", ttl=30, on_lost=lost.append):
                try:
                    yield 1
                finally:
                    await asyncio.sleep(2.8)  # past the shutdown's wait
        """,
        SUSPENDED_AT_THE_END,
        """
        print("lost", len(lost), "keys", r.dbsize())
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["lost", "1", "keys", "0"], done.stdout
    noise = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert not noise, done.stderr


@pytest.mark.parametrize("held", [3.5, pytest.param(5.5, marks=pytest.mark.slow)])
def test_a_lock_a_closing_generator_waits_for_past_the_shutdowns_wait_leaks_nothing(
    server: RedisServer, held: float
) -> None:
    """Review 21, 02: a generator closed at asyncio.run's end started waiting for a lock in
    its finally, granted only after the loop's clean-up had stopped waiting (2.5 s): the
    clean-up closed the clients under the wait, which reconnected, and the connection was
    never closed. Review 22, 02: the same when granted after 5 s, once the shutdown's own
    deadline had closed the clients. The clients stay open until the closing generators are
    done; the late grant is refused and given back."""
    done = run_script(
        server,
        f"""
        import threading, time
        outcome = []
        holding = threading.Event()

        def hold():
            with redlock_deco.Lock("late-grant", ttl=30):
                holding.set()
                time.sleep({held})  # past the shutdown's 2.5 s wait (and its 5 s)

        holder = threading.Thread(target=hold)
        holder.start()
        holding.wait(10)

        async def steps():
            async with redlock_deco.asyncio.Lock("warm", ttl=5):
                pass  # the loop has used the library: the shutdown's wait runs
            try:
                yield 1
            finally:
                try:
                    async with redlock_deco.asyncio.Lock("late-grant", ttl=5, wait=10):
                        outcome.append("got it")
                except redlock_deco.ProviderError:
                    outcome.append("refused")
        """,
        SUSPENDED_AT_THE_END,
        """
        holder.join(10)
        gc.collect()  # what the loop's end left unclosed warns now
        until = time.monotonic() + 2  # (the give-back is a background task's: a moment,
        while r.dbsize() and time.monotonic() < until:  # 0.2 s was too short in CI's slow leg)
            time.sleep(0.05)
        print(outcome, "keys", r.dbsize())
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['refused']", "keys", "0"], done.stdout
    noise = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert not noise, done.stderr


@pytest.mark.parametrize("let_go", ["after the stop", "at the stop"])
def test_a_waiter_whose_loop_stops_at_any_step_is_refused_at_once_and_leaves_nothing(
    server: RedisServer, let_go: str
) -> None:
    """CI's 3.10 slow leg (the test above, held 5.5 s): the shutdown's deadline stopped the
    loop's targets as a waiter's recheck was out; its next wait revived the subscriber, which
    heard the grant of the holder's release, and the refused acquire could neither confirm
    nor give it back -- the lock stayed taken for the waiter's whole ttl. Review 101a, F1:
    the same when the holder let go at the stop itself, its subscription still open on the
    server, so the release handed the lock to the waiter being refused. Here the target is
    stopped before each step of a contended acquire is sent, after its reply, and while it
    is out, in turn; the holder lets go just after the stop, or at it. Each acquire is
    refused at once (not at its next recheck), and nothing stays taken."""
    done = run_script(
        server,
        f"""
        import threading, time
        import redlock_deco._drivers as drivers

        AT_THE_STOP = {let_go == "at the stop"}
        sent = drivers.AsyncTarget.execute
        STEPS = 5  # the fast try, the subscription, the queueing attempt, a wait, a recheck

        def scenario(k, when):
            holding, let_go = threading.Event(), threading.Event()

            def hold():
                with redlock_deco.Lock("stopped", ttl=30):
                    holding.set()
                    let_go.wait(10)

            holder = threading.Thread(target=hold)
            holder.start()
            holding.wait(10)
            count, stopped = [0], []

            def stop(target):
                stopped.append(time.monotonic())
                target.stop()
                if AT_THE_STOP:  # (the loop's thread waits: its subscription stays open)
                    let_go.set()
                    holder.join(10)

            async def execute(self, step):
                count[0] += 1
                n = count[0]
                if n == k and when == "before":
                    stop(self)
                elif n == k and when == "during":
                    asyncio.get_running_loop().call_later(0.05, stop, self)
                try:
                    return await sent(self, step)
                finally:
                    if n == k and when == "after":
                        stop(self)  # as the reply was still out: it comes after the
                        await asyncio.sleep(0.05)  # subscriber has ended

            async def main():
                drivers.AsyncTarget.execute = execute
                try:
                    async with redlock_deco.asyncio.Lock("stopped", ttl=5, wait=10):
                        return "got it"
                except redlock_deco.ProviderError:
                    return "refused"
                finally:
                    drivers.AsyncTarget.execute = sent
                    let_go.set()

            async def run():
                task = asyncio.create_task(main())
                while not stopped and not task.done():
                    await asyncio.sleep(0.005)
                await asyncio.sleep(0.1)  # (then the holder lets go: a grant for the waiter)
                let_go.set()
                outcome = await task
                return outcome, time.monotonic() - stopped[0] if stopped else None

            outcome, took = asyncio.run(run())
            holder.join(10)
            time.sleep(0.2)  # (a give-back of the holder's own is a moment's)
            print(k, when, outcome, "prompt" if took is not None and took < 0.9 else took,
                  "keys", r.dbsize())

        for k in range(1, STEPS + 1):
            for when in ("before", "after", "during"):
                scenario(k, when)
        """,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 15, done.stdout
    wrong = [line for line in lines if line.split()[2:] != ["refused", "prompt", "keys", "0"]]
    assert not wrong, done.stdout
    noise = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert not noise, done.stderr


def test_aclose_with_waiters_queued_and_releases_at_that_moment_leaves_nothing(
    server: RedisServer,
) -> None:
    """Review 101a, F1: ``await redlock_deco.aclose()`` in a loop run by hand, with waiters
    queued for a lock, a semaphore and a writer, and each holder letting go at the moment the
    clients are stopped: the subscription, still open on the server, took the hand-offs, and
    the refused waiters could not leave the queue -- each name stayed taken for the
    waiter's ttl. They are refused, and leave it, passing the hand-off on, before the
    clients close."""
    done = run_script(
        server,
        """
        import time
        import redlock_deco._drivers as drivers

        held = [redlock_deco.Lock("x", ttl=20), redlock_deco.Semaphore("s", limit=1, ttl=20),
                redlock_deco.Lock("rw", shared=False, ttl=20)]
        for lock in held:
            assert lock.acquire(blocking=False)
        stop = drivers.AsyncTarget.stop

        def stopping(self):
            stop(self)
            for lock in held:  # at this moment: the subscription is still open
                lock.release()

        drivers.AsyncTarget.stop = stopping

        async def waiter(primitive):
            try:
                async with primitive:
                    return "got it"
            except redlock_deco.ProviderError:
                return "refused"

        async def main():
            tasks = [
                asyncio.create_task(waiter(primitive))
                for primitive in (
                    redlock_deco.asyncio.Lock("x", ttl=10, wait=8),
                    redlock_deco.asyncio.Semaphore("s", limit=1, ttl=10, wait=8),
                    redlock_deco.asyncio.Lock("rw", shared=False, ttl=10, wait=8),
                )
            ]
            until = time.monotonic() + 10
            while len(r.keys("*queue*")) < 3 and time.monotonic() < until:
                await asyncio.sleep(0.01)  # (all three queued)
            await redlock_deco.aclose()
            return await asyncio.gather(*tasks)

        loop = asyncio.new_event_loop()
        outcomes = loop.run_until_complete(main())
        loop.close()
        time.sleep(0.2)
        print(outcomes, "keys", sorted(key.decode() for key in r.keys("*")))
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['refused',", "'refused',", "'refused']", "keys", "[]"], (
        done.stdout
    )
    noise = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert not noise, done.stderr


def test_a_target_whose_loop_has_shut_down_sends_nothing_not_even_a_give_back(
    server: RedisServer,
) -> None:
    """Review 21, 02 and 22, 02, restated since a stopped target still gives back (see
    AsyncTarget.stop): once the loop's shutdown closes its clients, the target refuses every
    step, releases included -- one sent then reconnected the closed client, and nothing
    closed that connection again."""
    kept: list[Any] = []

    async def main() -> None:
        async with redlock_deco.asyncio.Lock("sealed", ttl=5):
            kept.append(redlock_deco._providers.async_target("default"))

    asyncio.run(main())
    claim = Claim(LOCK, Keys.for_key("lock:sealed", LOCK), "a-token", 5000)
    with pytest.raises(redlock_deco.ProviderError, match="shut down"):
        asyncio.run(kept[0].execute(claim.release_step(leaving=True)))


def test_a_lock_taken_by_a_generators_clean_up_at_the_loops_end_is_refused(
    server: RedisServer,
) -> None:
    """Review 20, 02: an async generator closed by asyncio.run's shutdown_asyncgens() took a
    lock in its finally; the loop state made for it registered its closer too late, and its
    client was never closed. Refused now, with a ProviderError that says why."""
    done = run_script(
        server,
        """
        refused = []

        async def steps():
            try:
                yield 1
            finally:
                try:
                    async with redlock_deco.asyncio.Lock("late", ttl=5):
                        pass
                except redlock_deco.ProviderError as exc:
                    refused.append(str(exc))
        """,
        SUSPENDED_AT_THE_END,
        """
        print("refused", len(refused), "keys", r.dbsize())
        print(refused[0] if refused else "")
        """,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["refused", "1", "keys", "0"], done.stdout
    assert "shutting down" in lines[1]
    noise = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert not noise, done.stderr


def test_an_object_lock_released_by_its_loops_end_sends_nothing_from_a_later_loop(
    server: RedisServer,
) -> None:
    """Review 22, 05: a lock held by its object when asyncio.run ended is released by that
    loop's shutdown, which closes its client. Its release() in a later asyncio.run raised
    LockNotOwned, as documented, but first sent the release on the ended loop's client,
    which reconnected, and nothing ever closed it."""
    done = run_script(
        server,
        """
        import time
        lock = redlock_deco.asyncio.Lock("from-an-ended-loop", ttl=30)

        async def first():
            assert await lock.acquire()

        async def second():
            async with redlock_deco.asyncio.Lock("warm", ttl=5):
                pass  # this loop has a state of its own
            try:
                await lock.release()
            except redlock_deco.LockNotOwned:
                print("not owned")

        asyncio.run(first())
        asyncio.run(second())
        time.sleep(0.1)
        gc.collect()
        print("keys", r.dbsize())
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["not", "owned", "keys", "0"], done.stdout
    noise = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert not noise, done.stderr


def test_a_loop_cleaned_up_by_hand_and_used_again_shuts_down_at_once(server: RedisServer) -> None:
    """Review 23, 05: ``await redlock_deco.aclose()`` in the middle of a loop's life (a
    fixture's teardown on a shared loop), then a lock again: the loop had two closers at its
    end, and each waited for the other for good."""
    done = run_script(
        server,
        """
        import time

        async def main():
            for _ in range(2):
                async with redlock_deco.asyncio.Lock("again", ttl=5):
                    pass
                await redlock_deco.aclose()
            async with redlock_deco.asyncio.Lock("again", ttl=5):
                pass

        started = time.monotonic()
        asyncio.run(main())
        print("took", round(time.monotonic() - started))
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["took", "0"], done.stdout


def test_a_generator_closing_in_the_background_holds_up_no_shutdown(server: RedisServer) -> None:
    """Review 23, 01: a loop run by hand with a generator's ``aclose()`` still pending in a
    task of its own (a slow clean-up): shutdown_asyncgens() does not wait for that task, but
    the library's closer did (30 s in the report), although nothing of the library was in
    use any more."""
    done = run_script(
        server,
        """
        import time

        async def slow():
            try:
                yield 1
            finally:
                await asyncio.sleep(30)

        async def main():
            async with redlock_deco.asyncio.Lock("background", ttl=5):
                pass
            agen = slow()
            await agen.__anext__()
            asyncio.ensure_future(agen.aclose())
            await asyncio.sleep(0.05)

        loop = asyncio.new_event_loop()
        loop.run_until_complete(main())
        started = time.monotonic()
        loop.run_until_complete(loop.shutdown_asyncgens())
        print("took", round(time.monotonic() - started))
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["took", "0"], done.stdout


@pytest.mark.parametrize("stall", [0, 0.4])
def test_a_generators_clean_up_takes_a_lock_the_loop_used_at_its_end(
    server: RedisServer, stall: float
) -> None:
    """Review 24, 01 and 02: an async generator's clean-up at asyncio.run's end took a lock
    the loop had used, held by nobody (as asyncio.md allows): with nothing held, the closer
    did not wait, and the clean-up got ProviderError; with the server stalled as the loop
    ended (its first try in flight, not counted), the grant came after the clients had been
    stopped, was refused, and its key stayed held by nobody for its whole ttl."""
    done = run_script(
        server,
        f"""
        import time
        outcome = []

        async def steps():
            async with redlock_deco.asyncio.Lock("used", ttl=20):
                pass  # the loop has used the lock
            try:
                yield 1
            finally:
                await asyncio.sleep(0.01)
                async with redlock_deco.asyncio.Lock("used", ttl=20, wait=5):
                    outcome.append("taken")

        kept = []

        async def main():
            agen = steps()
            kept.append(agen)
            await agen.__anext__()
            if {stall}:
                r.execute_command("CLIENT", "PAUSE", int({stall} * 1000), "ALL")

        asyncio.run(main())
        kept.clear()
        gc.collect()
        time.sleep(0.5)
        print(outcome, "keys", r.dbsize())
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['taken']", "keys", "0"], done.stdout
    noise = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert not noise, done.stderr


def test_an_acquire_is_in_flight_to_its_end_give_back_included(r: redis.Redis) -> None:
    """What the loop's shutdown waits for (review 24, 02): from an asyncio acquire's start to
    its end, its client counts as in use -- also between the wait, cut short by a cancel, and
    the give-back that a task of its own sends, where neither a round trip nor a wait is in
    flight (a shutdown looking then closed the client under the give-back). Sampled at every
    turn of the loop, over trials that land the sampler on either side of that turn."""
    r.set("lock:in-flight", "someone else's", px=30_000)

    async def trial() -> list[bool]:
        state = redlock_deco._process.loop_state()
        seen: list[bool] = []
        acquiring = asyncio.ensure_future(
            redlock_deco.asyncio.Lock("in-flight", ttl=5, wait=10).acquire()
        )
        await asyncio.sleep(0.05)  # queued, waiting for a grant
        acquiring.cancel()
        while not acquiring.done():
            seen.append(state._in_use())
            await asyncio.sleep(0)
        return seen

    for _ in range(20):
        seen = asyncio.run(trial())
        assert seen and all(seen), seen
    r.delete("lock:in-flight")


# Another client trying a name once, `after` seconds on (a thread of the script): "contender
# in" if it got in (and gave it back), else "contender out".
CONTENDS = """
import threading, time
lost, events = [], []

def contend(name, after):
    time.sleep(after)
    other = redlock_deco.Lock(name, ttl=5)
    if other.acquire(blocking=False):
        events.append("contender in")
        other.release()
    else:
        events.append("contender out")
"""


def test_a_task_cancelled_at_the_loops_end_keeps_its_lease_through_its_clean_up(
    server: RedisServer,
) -> None:
    """Review 25, 02: asyncio.run's end cancels every task, the loop's renewer too, while a
    task it cancelled may still run inside its block (a clean-up under the cancel): nothing
    renewed its lease, another client got in at its ttl while the body ran on, and on_lost
    never fired. The loop's renewer is a timer now, which no cancel reaches."""
    done = run_script(
        server,
        CONTENDS,
        """
        async def worker(entered):
            async with redlock_deco.asyncio.Lock("cancelled", ttl=1, on_lost=lost.append):
                entered.set()
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    await asyncio.sleep(1.6)  # past the ttl, inside the block
                    events.append("body ended")
                    raise

        contender = lambda: contend("cancelled", 1.3)

        async def main():
            entered = asyncio.Event()
            asyncio.ensure_future(worker(entered))
            await entered.wait()
            threading.Thread(target=contender).start()

        asyncio.run(main())
        time.sleep(0.2)
        print(events, "lost", len(lost))
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['contender", "out',", "'body", "ended']", "lost", "0"], (
        done.stdout
    )


@pytest.mark.parametrize("how", ["block", "object"])
def test_a_renewer_cancelled_before_its_first_step_still_renews(
    server: RedisServer, how: str
) -> None:
    """Review 26, 06: a task that took a lease and then cancelled every other task (a common
    graceful-stop routine) cancelled the loop's renewer task before its first step; nothing
    reset it, and no lease of the loop was renewed again: another client got in while the
    body ran, with no on_lost. The renewer is a timer on the loop now, which no cancel
    reaches."""
    done = run_script(
        server,
        CONTENDS,
        f"""
        contender = lambda: contend("renewed", 1.4)

        async def main():
            lock = redlock_deco.asyncio.Lock("renewed", ttl=1, on_lost=lost.append)
            if "{how}" == "block":
                held = lock
                await held.__aenter__()
            else:
                assert await lock.acquire()
            me = asyncio.current_task()
            for task in asyncio.all_tasks():
                if task is not me:
                    task.cancel()
            threading.Thread(target=contender).start()
            await asyncio.sleep(2)  # past the ttl
            if "{how}" == "block":
                await held.__aexit__(None, None, None)
            else:
                await lock.release()
            events.append("released")

        asyncio.run(main())
        time.sleep(0.2)
        print(events, "lost", len(lost))
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['contender", "out',", "'released']", "lost", "0"], done.stdout


def test_cancelling_every_other_task_until_none_is_left_ends(server: RedisServer) -> None:
    """Review 26, 05: code that cancels every other task until none is left (a graceful stop)
    never ended while a lease was held: the renewer task came back after each sweep. And a
    loop run by hand, ended by such a sweep and closed, left the renewer pending: "Task was
    destroyed but it is pending" (26, 01)."""
    done = run_script(
        server,
        """
        sweeps = []

        async def main():
            lock = redlock_deco.asyncio.Lock("sweep", ttl=0.3)
            assert await lock.acquire()
            me = asyncio.current_task()
            for _ in range(100_000):  # until a renewal round is in flight (every 0.1 s)
                if any(t.get_name() == "redlock-deco-renewal" for t in asyncio.all_tasks()):
                    break
                await asyncio.sleep(0)
            for _ in range(50):
                others = [task for task in asyncio.all_tasks() if task is not me]
                if not others:
                    break
                for task in others:
                    task.cancel()
                await asyncio.gather(*others, return_exceptions=True)
                sweeps.append(len(others))
            await asyncio.sleep(0.5)  # renewed meanwhile, the cancelled round tried again
            await lock.release()  # (LockNotOwned if its lease had expired)
            return lock

        loop = asyncio.new_event_loop()
        kept = loop.run_until_complete(main())
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.close()
        gc.collect()
        print("sweeps", len(sweeps), "keys", r.dbsize())
        """,
    )
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    assert words[0] == "sweeps" and int(words[1]) < 5 and words[2:] == ["keys", "0"], done.stdout
    noise = [line for line in done.stderr.splitlines() if "destroyed" in line or "Warning" in line]
    assert not noise, done.stderr


@pytest.mark.parametrize("collected", [False, True])
def test_a_waiter_of_a_loop_closed_by_hand_is_not_handed_the_lock(
    server: RedisServer, collected: bool
) -> None:
    """Review 37: a loop closed by hand (no asyncio.run, no aclose()) while one task held a
    lock and another waited for it. The dead loop's grant subscription stayed open, so the
    server counted its waiter as listening: once the holder's lease lapsed, the next
    acquirer's hand-off granted the lock to that waiter, for the waiter's own ttl, and the
    name was taken again only after about two ttls (3.4 s for a ttl of 2 s). The dead
    loop's subscription is closed once the process's next loop starts, so the name is free
    within the holder's ttl, as docs/asyncio.md says."""
    ttl = 2.0
    done = run_script(
        server,
        f"""
        import time
        Lock = redlock_deco.asyncio.Lock

        async def holder():
            async with Lock("closed", ttl={ttl}):
                await asyncio.sleep(60)

        async def waiter():
            async with Lock("closed", ttl={ttl}, wait=30):
                await asyncio.sleep(60)

        async def start():
            asyncio.ensure_future(holder())
            await asyncio.sleep(0.3)
            asyncio.ensure_future(waiter())
            while not r.exists("{{lock:closed}}:queue"):
                await asyncio.sleep(0.01)
            await asyncio.sleep({ttl})  # renewed meanwhile

        loop = asyncio.new_event_loop()
        loop.run_until_complete(start())
        loop.close()
        closed = time.monotonic()
        if {collected}:
            del loop
            gc.collect()

        async def again():
            async with Lock("closed", ttl={ttl}, wait={ttl} + 3):
                return time.monotonic() - closed

        print("took", round(asyncio.run(again()), 2))
        """,
    )
    assert done.returncode == 0, done.stderr
    took = float(done.stdout.split()[-1])
    assert took < ttl + 0.7, done.stdout  # the holder's lease lapses within its ttl


@pytest.mark.parametrize("other", ["loop", "thread", "thread-at-another-address"])
def test_a_closed_loops_waiters_do_not_hold_up_a_loop_or_thread_already_waiting(
    server: RedisServer, other: str
) -> None:
    """Review 38: a loop closed by hand while two of its tasks waited (ttl 8 s), with a waiter
    of the same process queued behind them in a loop of another thread, already running, or
    in a sync thread. No new loop started, so nothing noticed the close: each dead waiter in
    turn was handed the lock for its own ttl, and the live waiter got it 17.4 s after the
    close, against the holder's 2 s. The subscriber that hears a grant for a token it does
    not know now looks for closed loops first, and gives the dead waiter's grant back.
    Review 41: the same from a provider that reaches the server at another address
    (``localhost``, not ``127.0.0.1``): it took that for another server and gave nothing back
    (17.7 s)."""
    done = run_script(
        server,
        f"""
        import threading, time
        Lock = redlock_deco.asyncio.Lock
        SyncLock = redlock_deco.Lock

        async def holder():
            async with Lock("dead", ttl=2):
                await asyncio.sleep(60)

        async def waiter():
            async with Lock("dead", ttl=8, wait=60):
                await asyncio.sleep(60)

        async def start():
            asyncio.ensure_future(holder())
            await asyncio.sleep(0.3)
            for _ in range(2):
                asyncio.ensure_future(waiter())
            while r.zcard("{{lock:dead}}:queue") < 2:
                await asyncio.sleep(0.01)

        got = []

        def live():
            if {other!r} == "loop":
                async def wait():
                    async with Lock("dead", ttl=2, wait=30):
                        got.append(time.monotonic())
                asyncio.run(wait())
            else:
                provider = "default"
                if {other!r} == "thread-at-another-address":
                    provider = "same-server"
                    redlock_deco.register_provider(provider, "redis://localhost:{server.port}")
                with SyncLock("dead", ttl=2, wait=30, provider=provider):
                    got.append(time.monotonic())

        loop = asyncio.new_event_loop()
        loop.run_until_complete(start())
        behind = threading.Thread(target=live)
        behind.start()
        while r.zcard("{{lock:dead}}:queue") < 3:
            time.sleep(0.01)
        closed = time.monotonic()
        loop.close()
        behind.join(30)
        print("took", round(got[0] - closed, 2))
        """,
    )
    assert done.returncode == 0, done.stderr
    took = float(done.stdout.split()[-1])
    assert took < 2 + 1.0, done.stdout  # the holder's ttl, not a dead waiter's 8 s


def test_a_block_left_open_until_the_interpreter_exits_does_not_hang_the_exit(
    server: RedisServer,
) -> None:
    """A block left open (an ExitStack popped and never closed), collected only by the
    interpreter's last collection at exit: its finalizer queued the release and started a
    renewer thread there, whose start() waited forever -- the process never ended (found by
    the mutant py:exit-stack-guessed, whose test run never ended). It lapses within its ttl."""
    started = time.monotonic()
    done = run_script(
        server,
        """
        import contextlib
        stack = contextlib.ExitStack()
        stack.enter_context(redlock_deco.Lock("left-open", ttl=5))
        left = stack.pop_all()
        cycle = [left]
        cycle.append(cycle)  # found only by the last collection, at exit
        del left, stack, cycle
        print("exiting")
        """,
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("kind", ["lock", "semaphore", "reader"])
def test_a_generator_left_in_a_block_exits_with_its_server_gone(kind: str) -> None:
    """Review 39: a generator left suspended inside a block, its server killed, the program
    ends: the generator is closed at exit, the block's release fails, and its background
    give-back started the renewer's thread during finalization, whose start() never
    returned -- the process never exited (5/5). No thread is started then; the lease lapses
    within its ttl."""
    made = {
        "lock": 'redlock_deco.Lock("gen", ttl=3)',
        "semaphore": 'redlock_deco.Semaphore("gen", limit=2, ttl=3)',
        "reader": 'redlock_deco.Lock("gen", ttl=3, shared=True)',
    }[kind]
    script = textwrap.dedent(
        f"""
        import redlock_deco
        from redlock_deco.testing import RedisServer

        server = RedisServer().start()
        redlock_deco.register_provider("default", server.url)

        def inside():
            with {made}:
                yield 1

        left = inside()
        next(left)
        server.kill()
        print("exiting")
        """
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.stdout.strip() == "exiting", done.stderr
    assert time.monotonic() - started < 30

"""Who owns an asyncio lease. A bare ``acquire()`` belongs to its object, like a
threading.Lock, whichever task ran it (directly, or in a task of its own through gather,
shield, wait_for before 3.12): renewal goes on while the object exists, any task may
``release()``, ``extend()`` or check it through the object, and it is never re-entered
(another task asking for it waits). An ``async with`` block belongs to its task: another task
sharing the object can neither release its lease nor walk into it."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import pytest
import redis
from support.dropped import warns_dropped

from redlock_deco import LockNotOwned
from redlock_deco.asyncio import Lock, Semaphore


def test_gather_acquires_leave_the_locks_to_the_caller(r: redis.Redis) -> None:
    async def main() -> None:
        a, b = Lock("gather:a", ttl=0.6), Lock("gather:b", ttl=0.6)
        assert await asyncio.gather(a.acquire(), b.acquire()) == [True, True]
        await asyncio.sleep(1.0)  # past the ttl: renewed all along
        assert r.exists("gather:a", "lock:gather:a", "lock:gather:b") == 2
        assert await a.owned() and await b.owned()
        await a.release()
        await b.release()

    asyncio.run(main())
    assert r.dbsize() == 0


def test_wait_for_and_shield_acquires_belong_to_the_awaiting_task(r: redis.Redis) -> None:
    async def main() -> None:
        lock = Lock("wf", ttl=0.6)
        assert await asyncio.wait_for(lock.acquire(), timeout=5)
        assert await lock.owned()
        await lock.extend(to=0.6)
        await asyncio.sleep(0.9)
        assert r.exists("lock:wf")
        await lock.release()
        shielded = Lock("shielded", ttl=0.6)
        assert await asyncio.shield(shielded.acquire())
        assert await shielded.owned()
        await asyncio.wait_for(shielded.extend(to=0.6), 5)  # a helper task may use it too
        await asyncio.wait_for(shielded.release(), 5)

    asyncio.run(main())
    assert r.dbsize() == 0


def test_an_object_held_lease_is_never_re_entered_by_another_task(r: redis.Redis) -> None:
    """Task A takes the lock through a helper task; task B's `async with` on the same object
    must wait for A's release, not walk in (handing the lease over let a second task in)."""

    async def main() -> None:
        lock = Lock("object-held", ttl=5, wait=5)
        inside: list[str] = []
        overlaps: list[list[str]] = []

        async def a() -> None:
            assert await asyncio.wait_for(lock.acquire(), 5)
            inside.append("A")
            await asyncio.sleep(0.3)
            overlaps.append(list(inside))
            inside.remove("A")
            await lock.release()

        async def b() -> None:
            await asyncio.sleep(0.1)
            async with lock:
                inside.append("B")
                overlaps.append(list(inside))
                inside.remove("B")

        await asyncio.gather(a(), b())
        assert overlaps == [["A"], ["B"]]

    asyncio.run(main())
    assert r.dbsize() == 0


def test_an_acquired_lease_is_the_objects_any_task_may_release_it(r: redis.Redis) -> None:
    async def main() -> None:
        lock = Lock("own", ttl=5)
        assert await lock.acquire()

        async def another_task() -> None:
            assert await lock.owned()
            await lock.release()

        await asyncio.create_task(another_task())
        assert not r.exists("lock:own")
        with pytest.raises(LockNotOwned):
            await lock.release()

    asyncio.run(main())
    assert r.dbsize() == 0


def test_a_helper_acquired_lease_is_renewed_only_while_its_object_lives(
    r: redis.Redis,
) -> None:
    def dropped(locks: list[Lock]) -> None:
        locks.clear()  # nobody can ever release it now: renewal must stop
        gc.collect()

    async def main() -> None:
        locks = [Lock("dropped", ttl=0.5)]
        await asyncio.gather(locks[0].acquire())
        with warns_dropped():
            dropped(locks)
        await asyncio.sleep(1.2)
        assert not r.exists("lock:dropped")

    asyncio.run(main())


def test_tasks_sharing_an_object_do_not_release_each_others_slots(r: redis.Redis) -> None:
    async def main() -> None:
        sem = Semaphore("shared", limit=2, ttl=5)
        held = asyncio.Event()
        done = asyncio.Event()

        async def holder() -> None:
            async with sem:
                held.set()
                await done.wait()

        task = asyncio.create_task(holder())
        await held.wait()
        with pytest.raises(LockNotOwned):
            await sem.release()
        assert await sem.holders() == 1
        done.set()
        await task

    asyncio.run(main())
    assert r.dbsize() == 0


def test_a_task_inside_its_threads_section_does_not_wait_for_it(r: redis.Redis) -> None:
    """Review 16, 05: a sync decorated call that runs asyncio.run of a decorated coroutine
    on the same name waited its whole ``wait`` (forever with ``wait=None``) for its own
    thread's section, which cannot end while the loop runs, and then blamed "someone else".
    LockError at once, as for the mirror case (a sync wait inside a task's section)."""
    import time

    from redlock_deco import LockError, locked

    @locked("nested:{n}", wait=None)
    async def inner(n: int) -> str:
        return "inside"

    @locked("nested:{n}")
    def outer(n: int) -> str:
        return asyncio.run(inner(n))

    started = time.monotonic()
    with pytest.raises(LockError, match="could only wait for itself"):
        outer(1)
    assert time.monotonic() - started < 2
    assert r.keys("*") == []


async def _entered_directly(name: str, on_lost: Callable[[Any], object]) -> Any:
    async with Lock(name, ttl=0.5, on_lost=on_lost):
        yield 1
        yield 2


async def _entered_through_a_stack(name: str, on_lost: Callable[[Any], object]) -> Any:
    import contextlib

    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(Lock(name, ttl=0.5, on_lost=on_lost))
        yield 1
        yield 2


def _sync_entered_directly(name: str, on_lost: Callable[[Any], object]) -> Any:
    from redlock_deco import Lock as SyncLock

    with SyncLock(name, ttl=0.5, on_lost=on_lost):
        yield 1
        yield 2


def _sync_entered_through_a_stack(name: str, on_lost: Callable[[Any], object]) -> Any:
    import contextlib

    from redlock_deco import Lock as SyncLock

    with contextlib.ExitStack() as stack:
        stack.enter_context(SyncLock(name, ttl=0.5, on_lost=on_lost))
        yield 1
        yield 2


@pytest.mark.parametrize(
    ("async_steps", "sync_steps"),
    [
        (_entered_directly, _sync_entered_directly),
        (_entered_through_a_stack, _sync_entered_through_a_stack),
    ],
    ids=["with", "exit-stack"],
)
def test_a_generators_block_is_told_at_once_when_whoever_entered_it_ends(
    r: redis.Redis, async_steps: Callable[..., Any], sync_steps: Callable[..., Any]
) -> None:
    """Review 16, 01: a lock block inside a generator, around its ``yield``, with the
    generator first advanced by a task (or a thread) that then ended: a block's lease lives
    no longer than its owner (API.md), and it stopped renewing with no signal -- another
    holder got in while the generator, never told, was still inside its block. Review 17,
    03: the same through an (Async)ExitStack, whose exit from another owner released
    nothing. The lease is reported lost at once (``on_lost``), before anyone else can get
    in; the block's exit raises LockLost, naming the cause, and releases what is left."""
    import threading
    import time

    from redlock_deco import Lock as SyncLock
    from redlock_deco import LockLost

    def attempt(lost: list[float], take: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 5
        while not take():
            assert time.monotonic() < deadline, "the lease never expired"
            time.sleep(0.02)
        assert lost, "another holder got in while the generator, never told, was in its block"

    async def scenario() -> None:
        lost: list[float] = []
        steps = async_steps("gen:async", lambda lease: lost.append(time.monotonic()))
        assert await asyncio.create_task(steps.__anext__()) == 1  # a task that then ends
        other = Lock("gen:async", wait=0)
        deadline = time.monotonic() + 5
        while not await other.acquire():
            assert time.monotonic() < deadline, "the lease never expired"
            await asyncio.sleep(0.02)
        assert lost, "another holder got in while the generator, never told, was in its block"
        assert await steps.__anext__() == 2
        with pytest.raises(LockLost, match="the task or thread that entered the block ended"):
            await steps.__anext__()  # the block's exit
        assert r.exists("lock:gen:async")  # the other holder's, untouched
        await other.release()

    asyncio.run(scenario())
    lost: list[float] = []
    steps = sync_steps("gen:sync", lambda lease: lost.append(time.monotonic()))
    first: list[int] = []
    started = threading.Thread(target=lambda: first.append(next(steps)))
    started.start()
    started.join(10)  # a thread that then ended
    assert first == [1]
    other = SyncLock("gen:sync", wait=0)
    attempt(lost, other.acquire)
    assert next(steps) == 2
    with pytest.raises(LockLost, match="the task or thread that entered the block ended"):
        next(steps)
    assert r.exists("lock:gen:sync")
    other.release()
    assert r.keys("*") == []


def test_a_generator_resumed_elsewhere_is_refused_a_wait_for_its_own_block(
    r: redis.Redis,
) -> None:
    """Review 17, 01: a generator holds ``x`` in a block around its ``yield``, and its next
    step, run by another thread or task, nests a block on ``x``. A block belongs to the
    thread or task that entered it, so the nested one does not re-enter it -- and waited
    for its own generator's block: its whole ``wait``, forever with ``wait=None``. It is
    refused at once now, with a LockError that says what to write instead."""
    import threading
    import time

    from redlock_deco import Lock as SyncLock
    from redlock_deco import LockError

    def steps() -> Any:
        with SyncLock("gen:nested", ttl=5):
            with SyncLock("gen:nested"):  # nested in the same frame (review 18, 01: its
                pass  # exit erased the outer block's record)
            yield 1
            with SyncLock("gen:nested", wait=None):
                yield 2

    sync_steps = steps()
    assert next(sync_steps) == 1  # entered by this thread, which lives on
    raised: list[BaseException] = []

    def second() -> None:
        try:
            next(sync_steps)
        except BaseException as exc:
            raised.append(exc)

    started = time.monotonic()
    elsewhere = threading.Thread(target=second)
    elsewhere.start()
    elsewhere.join(10)
    assert time.monotonic() - started < 2
    assert len(raised) == 1 and isinstance(raised[0], LockError), raised
    assert "could only wait for itself" in str(raised[0])
    assert r.keys("*") == []  # the generator's block ended with the error

    async def async_steps() -> Any:
        async with Lock("gen:nested-async", ttl=5):
            async with Lock("gen:nested-async"):  # nested in the same frame
                pass
            yield 1
            async with Lock("gen:nested-async", wait=None):
                yield 2

    async def scenario() -> None:
        agen = async_steps()
        assert await agen.__anext__() == 1  # entered by this task, which lives on
        started = time.monotonic()
        with pytest.raises(LockError, match="could only wait for itself"):
            await asyncio.wait_for(asyncio.create_task(agen.__anext__()), 10)
        assert time.monotonic() - started < 2

    asyncio.run(scenario())
    assert r.keys("*") == []


def test_a_generator_closed_inside_a_block_whose_lease_ended_raises_lock_lost(
    r: redis.Redis,
) -> None:
    """Review 18, 02: the exit of a block left by ``close()`` (or ``aclose()``) only noted the
    lost lease on the GeneratorExit, which close() swallows: the loss reached nobody."""
    from redlock_deco import Lock as SyncLock
    from redlock_deco import LockLost

    def steps() -> Any:
        with SyncLock("gen:closed", ttl=5):
            yield 1

    gen = steps()
    assert next(gen) == 1
    r.set("lock:gen:closed", "someone-else", px=5000)  # taken over while suspended
    with pytest.raises(LockLost):
        gen.close()
    assert r.get("lock:gen:closed") == b"someone-else"

    async def async_steps() -> Any:
        async with Lock("gen:aclosed", ttl=5):
            yield 1

    async def scenario() -> None:
        agen = async_steps()
        assert await agen.__anext__() == 1
        r.set("lock:gen:aclosed", "someone-else", px=5000)
        with pytest.raises(LockLost):
            await agen.aclose()

    asyncio.run(scenario())
    r.delete("lock:gen:closed", "lock:gen:aclosed")

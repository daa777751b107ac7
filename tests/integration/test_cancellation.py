"""A cancel is never lost: ``Task.cancel()`` during an asyncio acquire raises CancelledError,
the protected body never runs, and nothing stays held; around an acquire, ``wait_for``,
``asyncio.timeout()`` and TaskGroup behave as with any awaitable; a task cancelled while
releasing still releases, and stays cancelled.

redis-py sometimes completes a command whose task was cancelled meanwhile instead of raising
CancelledError (c02: 13 of 60 cancelled ``async with`` acquires ran their body to the end,
all on the uncontended path, which skipped the check the step driver makes after each step).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import redis
from support.interrupts import with_exits

from redlock_deco import Lock, locked, register_provider
from redlock_deco.asyncio import Lock as AsyncLock
from redlock_deco.asyncio import Semaphore as AsyncSemaphore
from redlock_deco.testing import RedisServer

needs_cancelling = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="Task.cancelling() (3.11+) is how a cancel redis-py swallowed is noticed",
)


async def cancel_after(task: asyncio.Task[Any], iterations: int) -> None:
    for _ in range(iterations):
        await asyncio.sleep(0)
    task.cancel()


@needs_cancelling
@pytest.mark.parametrize("form", ["async with", "decorated", "acquire"])
def test_a_cancelled_acquire_never_runs_the_body(form: str, r: redis.Redis) -> None:
    """72 cancels, after 0 to 11 loop iterations of the acquire (the uncontended path's
    round trip, where redis-py dropped some of them): no body runs after its cancel."""
    ran_after_cancel: list[tuple[int, int]] = []
    finished: list[tuple[int, int]] = []

    async def main() -> None:
        for k in range(12):
            for rep in range(6):
                name = f"c{k}-{rep}"
                cancelled = asyncio.Event()

                async def body(
                    k: int = k, rep: int = rep, cancelled: asyncio.Event = cancelled
                ) -> None:
                    if cancelled.is_set():
                        ran_after_cancel.append((k, rep))
                    await asyncio.sleep(0.05)

                async def victim(name: str = name, body: Any = body) -> None:
                    if form == "async with":
                        async with AsyncLock(name, ttl=30, wait=5):
                            await body()
                    elif form == "decorated":
                        await locked(name, ttl=30, wait=5)(body)()
                    else:
                        lock = AsyncLock(name, ttl=30, wait=5)
                        if await lock.acquire():
                            try:
                                await body()
                            finally:
                                await lock.release()

                task = asyncio.create_task(victim())
                for _ in range(k):
                    await asyncio.sleep(0)
                cancelled.set()
                task.cancel()
                try:
                    await asyncio.wait_for(task, 5)
                    finished.append((k, rep))
                except asyncio.CancelledError:
                    assert task.cancelled()
        # (The acquire form's CancelledError may come from the body's sleep: also fine.)

    asyncio.run(main())
    assert ran_after_cancel == []
    assert finished == []
    assert r.dbsize() == 0  # nothing held after any of them


@needs_cancelling
def test_a_cancelled_contended_acquire_raises_and_leaves_no_queue_entry(r: redis.Redis) -> None:
    async def main() -> None:
        async with AsyncLock("held", ttl=30):
            for k in range(8):
                task = asyncio.create_task(AsyncLock("held", wait=10).acquire())
                await cancel_after(task, k)
                with pytest.raises(asyncio.CancelledError):
                    await task
        assert not r.exists("lock:held")

    asyncio.run(main())
    assert r.dbsize() == 0


def test_a_waiter_cancelled_as_its_grant_arrives_never_runs_the_body(r: redis.Redis) -> None:
    """Review 16, 08: the library's own waits for a grant used asyncio.wait_for, which on
    Python 3.10 returns the result and drops the cancellation when both come in one turn: a
    waiter cancelled as its grant arrived acquired and ran its body (51 of 134 cancels), and
    3.10 has no Task.cancelling() to notice it afterwards. Cancels swept across the release,
    its PUBLISH and the grant's delivery."""

    async def rounds() -> tuple[int, list[float]]:
        raised, ran = 0, []
        for i in range(150):
            cancelled = [False]
            release_now = asyncio.Event()

            async def holder(release_now: asyncio.Event = release_now) -> None:
                async with AsyncLock("grant-cancel", ttl=5):
                    await release_now.wait()

            async def waiter(cancelled: list[bool] = cancelled) -> bool:
                async with AsyncLock("grant-cancel", ttl=5, wait=5):
                    return cancelled[0]  # True: inside after its cancel()

            held = asyncio.create_task(holder())
            await asyncio.sleep(0.01)
            waiting = asyncio.create_task(waiter())
            await asyncio.sleep(0.02)  # queued and listening
            release_now.set()
            delay = i % 50 * 0.00008  # 0 to 4 ms after the release began
            await asyncio.sleep(delay)
            if not waiting.done():
                cancelled[0] = True
                waiting.cancel()
            try:
                if await waiting and cancelled[0]:
                    ran.append(delay)
            except asyncio.CancelledError:
                raised += 1
            await held
        return raised, ran

    raised, ran = asyncio.run(rounds())
    assert ran == [], f"{len(ran)} of {len(ran) + raised} cancelled waiters ran the body"
    assert r.keys("*") == []


def test_wait_for_around_an_acquire_times_out_like_any_awaitable(r: redis.Redis) -> None:
    async def main() -> None:
        holder = AsyncLock("busy", ttl=30)
        assert await holder.acquire()
        lock = AsyncLock("busy", wait=None)
        started = time.monotonic()
        with pytest.raises((asyncio.TimeoutError, TimeoutError)):
            await asyncio.wait_for(lock.acquire(), 0.3)
        assert time.monotonic() - started < 1.5
        assert lock.lease is None
        await holder.release()
        assert not r.exists("lock:busy")

    asyncio.run(main())
    assert r.dbsize() == 0


@needs_cancelling
def test_asyncio_timeout_and_taskgroup_around_an_acquire(r: redis.Redis) -> None:
    entered: list[str] = []

    async def waits(name: str, seen: str) -> None:
        async with AsyncLock(name, wait=None):
            entered.append(seen)

    async def fails() -> None:
        await asyncio.sleep(0.1)
        raise ValueError("sibling failed")

    async def in_group() -> None:
        async with asyncio.TaskGroup() as group:  # a failing sibling cancels the waiter
            group.create_task(waits("tg", "taskgroup"))
            group.create_task(fails())

    async def timed_out(k: int) -> None:
        async with asyncio.timeout(0):  # fires at the k-th suspension
            for _ in range(k):
                await asyncio.sleep(0)
            async with AsyncLock(f"free-{k}", ttl=30):  # uncontended: one round trip
                await asyncio.sleep(1)  # only a cancel that was lost gets here
                entered.append(f"free-{k}")

    async def main() -> None:
        holder = AsyncLock("tg", ttl=30)  # held by an object: every block below waits for it
        assert await holder.acquire()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(waits("tg", "wait_for"), 0.2)
        with pytest.raises(BaseExceptionGroup) as info:  # noqa: F821  # a 3.11+ builtin
            # (in a task of its own: CPython 3.11.2's TaskGroup leaves its parent's cancel
            # count at 1, and its asyncio.timeout then let the CancelledError out instead of
            # a TimeoutError -- Debian 12's python3, with no library code involved)
            await asyncio.create_task(in_group())
        assert [type(e) for e in info.value.exceptions] == [ValueError]
        await holder.release()
        for k in range(10):
            with pytest.raises(TimeoutError):
                await timed_out(k)

    asyncio.run(main())
    assert entered == []
    assert r.dbsize() == 0


@needs_cancelling
@pytest.mark.parametrize("primitive", ["lock", "semaphore"])
def test_a_task_cancelled_while_releasing_still_releases_and_stays_cancelled(
    primitive: str, r: redis.Redis
) -> None:
    """The release path: a cancel arriving at any point of the exit still gives the lease
    back, and the task ends cancelled (the cancel is not swallowed by the release)."""
    outcomes: list[tuple[bool, str]] = []

    async def main() -> None:
        for k in range(10):
            left = asyncio.Event()

            async def holder(k: int = k, left: asyncio.Event = left) -> None:
                obj: Any = (
                    AsyncLock(f"rel-{k}", ttl=30)
                    if primitive == "lock"
                    else AsyncSemaphore(f"rel-{k}", limit=1, ttl=30)
                )
                async with obj:
                    left.set()

            task = asyncio.create_task(holder())
            await left.wait()  # the body is done: the task is in the block's exit now
            for _ in range(k):
                await asyncio.sleep(0)
            requested = task.cancel()  # False once the task has finished
            try:
                await task
                outcomes.append((requested, "returned"))
            except asyncio.CancelledError:
                outcomes.append((requested, "cancelled"))
            assert not r.exists(f"{primitive[:3]}:rel-{k}")  # released either way

    asyncio.run(main())
    # A cancel requested before the task finished is never swallowed by the release.
    assert [outcome for requested, outcome in outcomes if requested] == ["cancelled"] * sum(
        requested for requested, _ in outcomes
    )
    assert any(requested for requested, _ in outcomes)  # (some did land mid-release)
    assert r.dbsize() == 0


# -- interrupted calls (sync): nothing of the call is left held or renewed -----------------


def line_events(call: Callable[[], object], stop_at: int = 0) -> int:
    """Run ``call`` counting the lines it executes in redlock_deco's own modules; with
    ``stop_at``, raise KeyboardInterrupt at that line instead (tracing ends with the raise,
    so once). Returns the count.

    The exit line of a ``with`` statement is not counted: an exception raised by a trace
    function there falls outside the block's exception range, so ``__exit__`` never runs (a
    threading lock stays held and the next ``with`` on it hangs). That is an artefact of
    tracing, which raises where no signal handler runs."""
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if event == "line":
            entered_at = with_exits(frame.f_code).get(frame.f_lineno)
            if entered_at is not None and frame.f_lasti > entered_at:
                return local
            count += 1
            if count == stop_at:
                raise KeyboardInterrupt
        return local

    def calls(frame: FrameType, event: str, arg: object) -> Any:
        if not frame.f_globals.get("__name__", "").startswith("redlock_deco"):
            return None
        outer: FrameType | None = frame
        while outer is not None:  # a finalizer the collector ran meanwhile is not the call
            if outer.f_code.co_name == "__del__":
                return None
            outer = outer.f_back
        return local

    sys.settrace(calls)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


def in_thread(fn: Callable[[], Any]) -> Any:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(10)
    return out[0]


def no_lease_left(key: str) -> list[str]:
    """What is still held or renewed by this thread after an interrupted call (empty: all
    good): its tables, leases the renewer keeps renewing."""
    from redlock_deco import _process, _renewal
    from redlock_deco._lifecycle import Lease

    problems = []
    held, calls = _process.thread_tables()
    if held or calls or _process.thread_owner().here:
        problems.append(f"tables: {held} {calls} {_process.thread_owner().here}")
    renewed = [job for job in _renewal.renewer()._table.jobs.values() if type(job) is Lease]
    problems += [f"renewed: {job!r}" for job in renewed if job.held and job.key == key]
    return problems


def renewer_thread() -> threading.Thread | None:
    from redlock_deco import _renewal

    return _renewal.renewer()._thread


def taken_and_given_back() -> bool:
    """Is the name free at once for anyone else?"""
    other = Lock("intr", wait=0)
    taken = other.acquire()
    if taken:
        other.release()
    return taken


# ttl 5 s: a lease merely left to expire would outlast every bound below.
@locked("intr", ttl=5, wait=1)
def protected() -> None:
    pass


def with_block() -> None:
    with Lock("intr", ttl=5, wait=1):
        pass


def gone_within(r: redis.Redis, key: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while r.exists(key):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def make_cold(url: str) -> None:
    """Put the process back where a first lock call starts: a new target for the provider
    (its client, lanes and subscriber built at first use), the server not yet checked, a
    renewer with no thread yet (the last one goes on with its clean-ups, then idles out). Two
    bugs lived only there, hidden by warm-up calls: an interrupt between creating the
    renewer's thread and starting it, and a dropped cancel in the first call's server check."""
    from redlock_deco import _eviction, _process
    from redlock_deco import _renewal as renewal

    register_provider("default", url)
    _eviction._checked.clear()
    _process.sync_renewer[:] = [renewal.Renewer()]


@pytest.mark.interrupts  # one run per line: the interrupts CI leg, beside test_interrupts.py
# ~1 min alone on 2 cores, CPU-bound (a tracer on every line): past the default 120 s on a
# loaded machine (CI, beside another leg's worker), as test_interrupts.py's are.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("state", ["warm", "cold"])
@pytest.mark.parametrize("form", ["decorated", "with"])
# A socket (and its asyncio transport) that an interrupt inside redis-py's connect left to the
# collector, in another test of the same xdist worker, is collected by this test's
# gc.collect(): its ResourceWarning is not this test's finding (as in test_interrupts.py;
# CI 47's interrupts leg: an unclosed _SelectorSocketTransport here, a sync test).
@pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
@pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning")
def test_a_keyboard_interrupt_at_any_line_leaves_nothing_held_or_renewed(
    form: str, state: str, r: redis.Redis, server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b07: a caught Ctrl-C at some points of a call left its lease held and renewed for as
    long as the thread lived, and the thread's later calls walked into it without a round
    trip. Here the interrupt comes at every line the call runs in the library, in turn;
    after each, nothing of the call is renewed or recorded, and the name is free again at
    once -- released by the call's own clean-up, or (where the interrupt came at the very
    line that starts the exit, before any handler can run) by the renewer as soon as the
    dropped section is collected."""
    call = protected if form == "decorated" else with_block
    call()  # warm: the first call of a process also builds its client (other lines)
    if state == "cold":  # each interrupted call is a first call (see make_cold)
        from redlock_deco import _process
        from redlock_deco import _renewal as renewal

        monkeypatch.setattr(renewal, "IDLE", 0.05)  # (the replaced renewers' threads end)
        monkeypatch.setattr(_process, "sync_renewer", [])
    for stop_at in itertools.count(1):
        if state == "cold":
            make_cold(server.url)
        try:
            line_events(call, stop_at)
        except KeyboardInterrupt as exc:
            where = traceback.extract_tb(exc.__traceback__)[-2]  # (the last is the tracer)
            del exc
        else:
            break  # past the call's last line: it ran to its end
        gc.collect()  # the interrupted frames (held by the traceback) are gone now
        at = f"interrupted at line {stop_at}, {Path(where.filename).name}:{where.lineno}"
        assert no_lease_left("lock:intr") == [], at
        assert gone_within(r, "lock:intr", 1.0), at
        assert in_thread(taken_and_given_back), at
        # ... and that acquisition's lease started the renewer's thread, if it had none (an
        # interrupt as it was started once left a thread that never ran standing for it:
        # nothing renewed or given back again).
        thread = renewer_thread()
        assert thread is None or thread.is_alive(), f"{at}: the renewer's thread never ran"
    assert stop_at > 100  # every line of the acquire, the call and the release
    call()  # and the name works as ever
    assert r.dbsize() == 0


async def ending(task: asyncio.Task[None]) -> BaseException | None:
    """What ended ``task`` (the finding), or None if it returned."""
    try:
        await task
    except BaseException as exc:
        return exc
    return None


# Python 3.10's ``await task`` raises a new CancelledError, not the one the task raised: the
# notes a cancelled call's error carries reach whoever awaits it on 3.11+ only.
NOTES_REACH_THE_AWAITER = sys.version_info >= (3, 11)


def test_a_cancellation_during_the_release_still_hears_what_the_release_found(
    server: Any, r: redis.Redis
) -> None:
    """Review 11, A: the lease was taken over before the exit, and the task was cancelled
    while its release was out. The release was sent again, its answer ignored: a bare
    CancelledError, no note, no 'lost' event. The release now runs on as a task of its own,
    and its answer is judged and noted on the cancellation, as a cancelled body's is."""
    from redlock_deco import add_listener, remove_listener
    from redlock_deco.testing import FaultProxy

    seen: list[str] = []

    def listener(event: Any) -> None:
        seen.append(event.kind)

    add_listener(listener)
    try:
        with FaultProxy(server.port) as proxy:
            register_provider("slow", proxy.url + "?socket_timeout=10")

            async def holder(out: asyncio.Event) -> None:
                async with AsyncLock("taken", provider="slow", ttl=20):
                    r.set("lock:taken", "someone-else", px=20_000)  # taken over
                    proxy.latency(0.4)  # the release will be out for a while
                    out.set()

            async def scenario() -> BaseException | None:
                out = asyncio.Event()
                task = asyncio.create_task(holder(out))
                await out.wait()
                await asyncio.sleep(0.1)  # the release is out now
                task.cancel()
                return await ending(task)

            ended = asyncio.run(scenario())
            proxy.heal()
    finally:
        remove_listener(listener)
    assert isinstance(ended, asyncio.CancelledError)
    if NOTES_REACH_THE_AWAITER:
        assert any("was also lost" in note for note in getattr(ended, "__notes__", []))
    assert seen[-2:] == ["lost", "released"]
    assert r.get("lock:taken") == b"someone-else"  # nothing of the new holder's touched


@pytest.mark.parametrize("cancels", [1, 2])
def test_a_cancellation_during_a_release_the_server_never_answers_leaves_a_clean_up(
    server: Any, r: redis.Redis, cancels: int
) -> None:
    """Review 11, B: cancelled while its release was out to a server that did not answer:
    the second release's TimeoutError replaced the cancellation, and nothing released the
    key once the server answered again: it stayed held for its ttl. Now the cancellation
    goes on, noted, and a background clean-up releases the key when the server is back."""
    from redlock_deco.testing import FaultProxy

    with FaultProxy(server.port) as proxy:
        register_provider("stalled", proxy.url)  # a URL client: 2 s socket timeout

        async def holder(out: asyncio.Event) -> None:
            async with AsyncLock("unreached", provider="stalled", ttl=15):
                proxy.stall()
                out.set()

        async def scenario() -> BaseException | None:
            out = asyncio.Event()
            task = asyncio.create_task(holder(out))
            await out.wait()
            await asyncio.sleep(0.2)
            task.cancel()
            if cancels == 2:  # the second stops waiting; the release task runs on alone and
                await asyncio.sleep(0.05)  # queues the clean-up itself (review 12, 02)
                task.cancel()
            return await ending(task)

        async def run() -> BaseException | None:
            ended = await scenario()
            if cancels == 2:  # the orphaned release times out on the stalled server first
                await asyncio.sleep(2.5)
            proxy.drop()
            proxy.heal()
            deadline = time.monotonic() + 5  # the clean-up retries every <= 0.5 s
            while r.exists("lock:unreached") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return ended

        ended = asyncio.run(run())
    assert isinstance(ended, asyncio.CancelledError)
    if NOTES_REACH_THE_AWAITER and cancels == 1:
        assert any("failed too" in note for note in getattr(ended, "__notes__", []))
    assert not r.exists("lock:unreached")  # released in the background, not at its ttl


def _suspended_in(task: asyncio.Task[Any], name: str) -> bool:
    """Is ``task`` suspended inside a call of the function named ``name``?"""
    coro: Any = task.get_coro()
    while coro is not None and getattr(coro, "cr_frame", None) is not None:
        if coro.cr_frame.f_code.co_name == name:
            return True
        coro = coro.cr_await
    return False


def test_a_cancel_as_the_first_calls_server_check_ends_is_never_dropped(
    server: RedisServer,
) -> None:
    """Review 30: a loop's first lock call checks the server's eviction policy in line; it
    waited with asyncio.wait_for, which on 3.10 returns instead of raising when the cancel
    comes as the awaited check ends (and 3.10 has no Task.cancelling() for the acquire to
    notice it): the acquire went on and ran its body in the cancelled task, 20 of 20 times.
    Here the cancel comes at exactly that moment, in each of 10 fresh loops."""
    from redlock_deco import _eviction

    where = _eviction._where(redis.Redis.from_url(server.url))

    async def trial(n: int) -> tuple[str, bool]:
        _eviction._checked.discard(where)  # (else the check runs once per process)
        ran: list[bool] = []

        async def victim() -> None:
            async with AsyncLock(f"first-check:{n}", ttl=5):
                ran.append(True)

        task = asyncio.ensure_future(victim())
        while not task.done():
            if where in _eviction._checked and _suspended_in(task, "check_async_once"):
                task.cancel()  # the check has just ended; the acquire waits on it still
                break
            await asyncio.sleep(0)
        try:
            await task
            outcome = "returned"
        except asyncio.CancelledError:
            outcome = "cancelled"
        return outcome, bool(ran)

    results = [asyncio.run(trial(n)) for n in range(10)]
    assert all(not ran for _, ran in results), results  # never the body of a cancelled task
    assert all(outcome == "cancelled" for outcome, _ in results), results


@pytest.mark.parametrize("contended", [False, True])
def test_a_cancellation_of_an_acquire_the_server_never_answers_goes_on_within_a_bound(
    server: Any, r: redis.Redis, contended: bool
) -> None:
    """Review 35, 09: ``asyncio.timeout(0.5)`` around an acquire took 8 s when the server did
    not answer: the acquire's clean-up was awaited, shielded, until the server answered (or
    the client's socket_timeout). Now the cancellation goes on after CUT_SHORT_WAIT at most,
    and the clean-up releases what the acquire took once the server answers again.
    Uncontended: cancelled while its request is out (it ran: the lock is taken). Contended:
    cancelled while queued, its clean-up (leaving the queue) unanswered."""
    from redlock_deco import _guard
    from redlock_deco.testing import FaultProxy

    with FaultProxy(server.port) as proxy:
        register_provider("withheld", proxy.url + "?socket_timeout=30")

        async def scenario() -> float:
            async with AsyncLock("unanswered", provider="withheld", ttl=30):
                pass  # connected (and the first call's server check done)
            if contended:
                r.set("lock:unanswered", "someone-else", px=30_000)
            else:
                proxy.withhold_replies()
            waiter = asyncio.create_task(
                AsyncLock("unanswered", provider="withheld", ttl=30, wait=60).acquire()
            )
            if contended:
                while not r.exists("{lock:unanswered}:queue"):
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)  # waiting for its grant
                proxy.stall()  # (withheld replies would let the clean-up run)
            else:
                while not r.exists("lock:unanswered"):
                    await asyncio.sleep(0.01)
            began = time.monotonic()
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            took = time.monotonic() - began
            if contended:
                r.delete("lock:unanswered")
            assert r.dbsize()  # the queue entry, or the lock taken: not cleaned up yet
            proxy.drop()  # the clean-up's connection too
            proxy.heal()
            deadline = time.monotonic() + 5  # the renewer's clean-ups retry every <= 0.5 s
            while r.dbsize() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return took

        took = asyncio.run(scenario())
    assert took < _guard.CUT_SHORT_WAIT + 1.0  # was 30 s: the socket_timeout
    assert r.dbsize() == 0


@pytest.mark.timeout(30)
def test_a_cancel_lost_by_aclose_is_pythons_own(r: redis.Redis) -> None:
    """Found by test_async_hook_shapes: a task running an async generator's ``aclose()``,
    cancelled before its first step, returns normally on Python 3.10 to 3.12 -- the cancel is
    lost. CPython loses it for any context manager the generator is suspended in (its
    ``aclose()`` turns the cancel thrown in into GeneratorExit); the library's exit does as a
    plain one does, and gives the lease back all the same."""

    class Plain:
        async def __aenter__(self) -> None:
            pass

        async def __aexit__(self, *exc: object) -> None:
            await asyncio.sleep(0)

    async def closed_cancelled(manager: Any) -> str:
        async def inside() -> Any:
            async with manager:
                yield

        generator = inside()
        await generator.__anext__()
        closing = asyncio.ensure_future(generator.aclose())
        closing.cancel()  # (before its first step)
        try:
            await closing
        except asyncio.CancelledError:
            return "cancelled"
        return "returned"

    async def scenario() -> tuple[str, str]:
        plain = await closed_cancelled(Plain())
        ours = await closed_cancelled(AsyncLock("aclose-cancelled", ttl=30))
        return plain, ours

    plain, ours = asyncio.run(scenario())
    assert ours == plain
    assert ours == ("cancelled" if sys.version_info >= (3, 13) else "returned")
    assert not r.exists("lock:aclose-cancelled")

"""An interrupt at every step of contextlib's own ExitStack code, on a long-lived stack reused
entry after entry (review 70, F2 and F3).

``stack.enter_context(obj)`` runs ``obj.__enter__`` and then pushes its exit; the stack's
``close()`` pops each exit and then calls it. An interrupt between the two (after the enter
returned, before the push; after the pop, before the call) leaves a block open that no exit
will ever end. The weakref on the stack's callbacks ends it once the stack is collected, but
a stack kept for good (a module's, an attribute) and reused keeps that deque alive: the block
stayed held and renewed for good, and a limit-1 semaphore object refused every later entry,
its own thread's included.

Here every trace event of contextlib's code in one ``enter_context`` + ``close()`` cycle is
cut in turn, the exception kept or dropped; then the same thread enters the object again
(through the stack, or with a ``with`` statement) and closes the stack. Nothing may be left
held or renewed, and a limit-1 semaphore must let the next entry in whenever the cut took the
exit off the stack. (A cut before the exit was popped leaves it on the stack, as contextlib
does for any callback: the stack's next close ends it.)
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
import redis

from redlock_deco import Lock, LockError, LockLost, LockNotAcquired, Semaphore, current_lease
from redlock_deco import _renewal as renewal
from redlock_deco.asyncio import Lock as AsyncLock
from redlock_deco.asyncio import Semaphore as AsyncSemaphore

NAME = "stacked"


class Cut(BaseException):
    """The interrupt (a BaseException, as KeyboardInterrupt: nothing of ours catches it)."""


class _Cutter:
    """A tracer that counts the trace events of contextlib's frames and raises :class:`Cut`
    at the ``at``-th (never, if ``at`` is None): what each was is in ``seen``."""

    def __init__(self, at: int | None = None) -> None:
        self.at = at
        self.seen: list[tuple[str, int, str]] = []

    def __call__(self, frame: FrameType, event: str, arg: object) -> Any:
        if self.at is not None and len(self.seen) > self.at:
            return None
        if event != "line" and frame.f_code.co_flags & inspect.CO_COROUTINE:
            # (a coroutine's call and return events are its resumptions and suspensions
            # too: raised there, the exception leaves the coroutine it awaits suspended
            # mid-step, which no interrupt of asyncio's does)
            return self
        if frame.f_globals.get("__name__") == "contextlib":
            self.seen.append((frame.f_code.co_name, frame.f_lineno, event))
            if len(self.seen) - 1 == self.at:
                raise Cut
        return self

    @property
    def where(self) -> tuple[str, int, str] | None:
        return self.seen[self.at] if self.at is not None and len(self.seen) > self.at else None


def _traced(cutter: _Cutter, cycle: Callable[[], Any]) -> None:
    sys.settrace(cutter)
    try:
        cycle()
    finally:
        sys.settrace(None)


def _exit_on(stack: Any, obj: object) -> bool:
    """Whether ``stack`` still holds ``obj``'s exit (contextlib binds it to the object)."""
    return any(getattr(cb, "__self__", None) is obj for _, cb in stack._exit_callbacks)


def _nothing_left(r: redis.Redis, what: str) -> None:
    deadline = time.monotonic() + 2
    while r.dbsize() and time.monotonic() < deadline:
        time.sleep(0.02)  # (a give-back handed to the background: within a moment)
    assert r.dbsize() == 0, f"held after {what}: {r.keys('*')}"
    assert len(renewal.renewer()) == 0, f"still renewed after {what}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
@pytest.mark.parametrize("keep", [False, True], ids=["dropped", "kept"])
@pytest.mark.parametrize("again", ["stack", "with"])
def test_a_cut_in_contextlib_leaves_nothing_held_on_a_reused_stack(
    r: redis.Redis, kind: str, keep: bool, again: str
) -> None:
    obj = Lock(NAME, ttl=5, wait=0) if kind == "lock" else Semaphore(NAME, limit=1, ttl=5, wait=0)
    stack = contextlib.ExitStack()  # (one stack, reused: as a module's or an attribute)

    def cycle() -> None:
        stack.enter_context(obj)
        stack.close()

    cycle()  # (warm: the provider's first call has contextlib steps of its own)
    events = _Cutter()
    _traced(events, cycle)
    assert any(name == "_push_cm_exit" for name, _, _ in events.seen), events.seen
    kept: list[BaseException] = []
    for index in range(len(events.seen)):
        cutter = _Cutter(index)
        try:
            _traced(cutter, cycle)
        except Cut as exc:
            if keep:
                kept.append(exc)
        else:
            pytest.fail(f"event {index} ({events.seen[index]}) was not reached")
        what = f"a cut at {cutter.where} (event {index}), then an entry by {again}"
        if _exit_on(stack, obj):
            stack.close()  # (left on the stack, as contextlib leaves any: its next close)
        if again == "stack":
            stack.enter_context(obj)
        else:
            with obj:
                pass
        stack.close()
        assert not obj._blocks, f"a block left open on the object after {what}"
        assert current_lease(None) is None, f"a section left open after {what}"
        _nothing_left(r, what)
    kept.clear()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_cut_in_contextlib_leaves_nothing_held_on_a_reused_async_stack(
    r: redis.Redis, kind: str
) -> None:
    """The same with an AsyncExitStack, exception kept, next entry through the stack (an
    interrupt there is a signal handler's exception: a cancellation lands only where the
    stack awaits, around the block's own enter and exit)."""

    async def scenario() -> None:
        obj = (
            AsyncLock(NAME, ttl=5, wait=0)
            if kind == "lock"
            else AsyncSemaphore(NAME, limit=1, ttl=5, wait=0)
        )
        stack = contextlib.AsyncExitStack()

        async def cycle(cutter: _Cutter) -> None:
            sys.settrace(cutter)
            try:
                await stack.enter_async_context(obj)
                await stack.aclose()
            finally:
                sys.settrace(None)

        await cycle(_Cutter())  # (warm: see the sync test)
        events = _Cutter()
        await cycle(events)
        assert any(name == "_push_async_cm_exit" for name, _, _ in events.seen), events.seen
        kept: list[BaseException] = []
        for index in range(len(events.seen)):
            cutter = _Cutter(index)
            try:
                await cycle(cutter)
            except Cut as exc:
                kept.append(exc)
            else:
                pytest.fail(f"event {index} ({events.seen[index]}) was not reached")
            what = f"a cut at {cutter.where} (event {index})"
            if _exit_on(stack, obj):
                await stack.aclose()
            await stack.enter_async_context(obj)
            await stack.aclose()
            assert not obj._blocks, f"a block left open on the object after {what}"
            deadline = time.monotonic() + 2
            while r.dbsize() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert r.dbsize() == 0, f"held after {what}: {r.keys('*')}"
        kept.clear()

    asyncio.run(scenario())


def _cut_as(function: str) -> Callable[[FrameType, str, object], Any]:
    """A tracer raising :class:`Cut` as contextlib's ``function`` is called, once."""
    fired: list[bool] = []

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if fired:
            return None
        if (event, frame.f_code.co_name) == ("call", function) and frame.f_globals.get(
            "__name__"
        ) == "contextlib":
            fired.append(True)
            raise Cut
        return tracer

    return tracer


def _left_on(stack: contextlib.ExitStack, obj: Lock | Semaphore, kept: list[BaseException]) -> None:
    """Enter ``obj`` through ``stack``, cut before the stack pushes its exit; the exception
    kept in ``kept``."""
    sys.settrace(_cut_as("_push_cm_exit"))
    try:
        stack.enter_context(obj)
    except Cut as exc:
        kept.append(exc)
    finally:
        sys.settrace(None)
    assert kept, "the cut was not reached"


def _takes(obj: Callable[[], Lock | Semaphore]) -> bool:
    """Whether another thread takes a fresh ``obj()`` at once (and lets it go)."""
    taken: list[bool] = []

    def other() -> None:
        lock = obj()
        taken.append(lock.acquire(blocking=False))
        if taken[-1]:
            lock.release()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(10)
    return taken == [True]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("other_owner", ["alive", "ended"])
def test_another_owners_block_left_on_a_shared_stack_leaves_this_owners_blocks_alone(
    r: redis.Redis, other_owner: str
) -> None:
    """Review 71, F1 (a second holder): a thread's block left on a long-lived stack by a cut
    before the push, then another thread's block entered through the same stack, and that
    thread's next entry of the object: counting the object's exits on the stack blamed the
    newest block -- the live one -- which was closed and given back while its body ran on;
    the stack's close then ended the stale one with no LockLost. Each block is matched with
    the index its own exit was to take. And a stale block of a thread that has ended goes at
    the next entry of anyone (review 71, L1: kept in the object for good)."""
    limit = 2 if other_owner == "alive" else 1
    obj = Semaphore(NAME, limit=limit, ttl=5, wait=0)
    stack = contextlib.ExitStack()
    kept: list[BaseException] = []
    go_on = threading.Event()

    def a() -> None:
        _left_on(stack, obj, kept)
        if other_owner == "alive":
            go_on.wait(30)  # (alive, and doing other work)

    first = threading.Thread(target=a)
    first.start()
    if other_owner == "ended":
        first.join(10)
        kept.clear()
    else:
        while not kept:
            time.sleep(0.01)
    try:
        stack.enter_context(obj)  # this thread's block, its exit on the stack
        mine = obj._blocks[-1]
        # (entered again; refused with limit 2 while the stale block holds a slot)
        with contextlib.suppress(LockNotAcquired), obj:
            pass
        assert mine.open, "this thread's live block was given up by its next entry"
        assert not _takes(lambda: Semaphore(NAME, limit=limit, ttl=5, wait=0)), (
            "another thread got in while this thread's block ran"
        )
        if other_owner == "ended":
            assert obj._blocks == [mine], "the ended thread's stale block is still kept"
        stack.close()  # ends this thread's block: no LockLost
        assert not mine.open
    finally:
        go_on.set()
        first.join(10)
    kept.clear()
    with obj:  # (the other thread has ended now: its leftover goes at any next entry)
        pass
    assert not obj._blocks
    _nothing_left(r, f"a stale block of a thread that is {other_owner}")


@pytest.mark.timeout(30)
def test_a_pushed_exit_of_a_block_entered_by_hand_ends_that_block(r: redis.Redis) -> None:
    """Review 71, F2: a block entered by hand whose exit was pushed on a stack
    (``stack.push(obj)``), then a block entered through that stack and cut before its own
    exit was pushed: the stack's close ended the newest block through it -- the cut one --
    with the by-hand block's exit, and the by-hand block stayed held and renewed for good,
    past the thread's next ``with``. The exit the stack pops ends the block it belongs to."""
    obj = Lock(NAME, ttl=5, wait=0)
    stack = contextlib.ExitStack()
    obj.__enter__()
    stack.push(obj)
    kept: list[BaseException] = []
    _left_on(stack, obj, kept)
    stack.close()
    assert len(obj._blocks) == 1 and obj._blocks[0].through is not None, (
        "the stack's close ended the wrong block"
    )
    with obj:  # the next entry ends the cut one (GUARANTEES)
        pass
    assert not obj._blocks
    kept.clear()
    _nothing_left(r, "a pushed by-hand exit")


_WINDOWS = ("contextlib", "redlock_deco._ownership", "redlock_deco._primitive")


class _Handler:
    """A tracer that runs ``handler`` -- as a signal handler, a finalizer or a callback would
    run -- at the ``at``-th trace event of contextlib's and the ownership code's frames, or
    lists those events (``at`` None)."""

    def __init__(self, handler: Callable[[], None], at: int | None = None) -> None:
        self.handler, self.at = handler, at
        self.seen: list[tuple[str, int, str]] = []

    def __call__(self, frame: FrameType, event: str, arg: object) -> Any:
        if self.at is not None and len(self.seen) > self.at:
            return None
        if frame.f_globals.get("__name__") in _WINDOWS:
            self.seen.append((frame.f_code.co_name, frame.f_lineno, event))
            if len(self.seen) - 1 == self.at:
                self.handler()  # (tracing is off while a trace function runs)
        return self


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
@pytest.mark.parametrize("run", ["same-object", "same-name", "push", "another-through-the-stack"])
def test_an_entry_run_at_any_step_of_a_stacked_entry_leaves_that_block_held(
    r: redis.Redis, kind: str, run: str
) -> None:
    """Review 71a, F1 (a second holder): the same thread entering the object -- a signal
    handler, a finalizer -- between ``__enter__``'s return and the stack's push of the exit
    saw a block with no exit on its stack and gave it back: the body ran with nothing held.
    F2: entering the same name while the section was in the thread's table but not yet
    counted by its lease re-entered the lease, and that entry's exit gave it back. Review 72,
    F1 (a second holder): a push onto the same stack there (a callback, another lock entered
    through it) put the block's exit one index higher than it had recorded, and the owner's
    next entry gave the block up; F2: the same as the stack's exit ran, and the close raised
    with the block left held. At every step of the ownership code and contextlib's, such an
    entry or push runs here; the block must be open and held once the entry returns and after
    the owner enters the object again, and nothing may be left after the stack closes."""

    def make(name: str = NAME) -> Lock | Semaphore:
        if kind == "lock":
            return Lock(name, ttl=5, wait=0)
        return Semaphore(name, limit=2, ttl=5, wait=0)

    obj = make()
    stack = contextlib.ExitStack()

    def handler() -> None:
        if run == "push":
            stack.callback(lambda: None)
        elif run == "another-through-the-stack":
            stack.enter_context(make(NAME + "-other"))
        else:
            with contextlib.suppress(LockNotAcquired), obj if run == "same-object" else make():
                pass

    def cycle(tracer: _Handler | None) -> None:
        sys.settrace(tracer)
        try:
            stack.enter_context(obj)
        finally:
            sys.settrace(None)
        assert obj._blocks and all(block.open for block in obj._blocks), "the block was closed"
        assert obj.owned(), "the block's lease was given back while it ran"
        mine = obj._blocks[-1]
        with contextlib.suppress(LockNotAcquired), obj:  # (the owner's next entry)
            pass
        assert mine.open and obj.owned(), "the owner's next entry gave the block up"
        assert kind == "semaphore" or not _takes(make), "another thread got in"
        sys.settrace(tracer)
        try:
            stack.close()
        except LockLost:
            # (an entry run inside the close itself may finish the close early: the close's
            # own give-back then finds the lease ended -- loud, and after the body; a
            # documented limit of the library used from a signal handler)
            pass
        finally:
            sys.settrace(None)
        stack.close()  # (what a handler pushed as the close ended: left on it, as contextlib does)
        assert not obj._blocks, "a block left open after the stack closed"

    cycle(None)  # (warm)
    listing = _Handler(handler)
    cycle(listing)
    assert len(listing.seen) > 20, listing.seen
    for index in range(len(listing.seen)):
        try:
            cycle(_Handler(handler, index))
        except (AssertionError, LockError) as exc:
            raise AssertionError(f"{run} at {listing.seen[index]} (event {index}): {exc}") from exc
        _nothing_left(r, f"{run} at {listing.seen[index]} (event {index})")


def _held_at(module: str, name: str, reached: threading.Event, go_on: threading.Event) -> Any:
    """A trace function that holds its thread as ``module``'s ``name`` is called (once):
    ``reached`` is set, and the thread waits for ``go_on`` -- a thread switch at a chosen
    point, with no interrupt."""

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if (event, frame.f_code.co_name) == ("call", name) and (
            frame.f_globals.get("__name__") == module
        ):
            sys.settrace(None)
            reached.set()
            go_on.wait(10)
        return None

    return tracer


@pytest.mark.timeout(30)
def test_two_threads_entering_through_one_stack_at_once_are_both_ended_by_its_close(
    r: redis.Redis,
) -> None:
    """Review 72, F2: two threads entering one object through one stack at the same moment
    record the same index for their exits; the stack's close then matched neither, raised
    LockError and left a block held and renewed. Thread A is held in contextlib's window
    (after its enter, before its push) while B enters; then A's push lands above B's."""
    obj = Semaphore(NAME, limit=3, ttl=5, wait=0)
    stack = contextlib.ExitStack()
    in_window, go_on = threading.Event(), threading.Event()

    def a() -> None:
        sys.settrace(_held_at("contextlib", "_push_cm_exit", in_window, go_on))
        try:
            stack.enter_context(obj)
        finally:
            sys.settrace(None)

    first = threading.Thread(target=a)
    first.start()
    assert in_window.wait(10)
    second = threading.Thread(target=lambda: stack.enter_context(obj))
    second.start()
    second.join(10)
    go_on.set()
    first.join(10)
    slots = [block.slot for block in obj._blocks]
    assert len(slots) == 2 and slots[0] == slots[1], slots  # (the same index recorded)
    stack.close()  # both blocks' exits: no LockError
    assert not obj._blocks
    _nothing_left(r, "two entries through one stack at once")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_blocks_of_one_object_entered_through_one_stack_each_keep_their_exit(
    r: redis.Redis, kind: str
) -> None:
    """Several blocks of one object on one stack, with other callbacks between: the object's
    next entry leaves every one open, and the stack's close ends each (newest first)."""
    obj = Lock(NAME, ttl=5, wait=0) if kind == "lock" else Semaphore(NAME, limit=4, ttl=5, wait=0)
    with contextlib.ExitStack() as stack:
        stack.enter_context(obj)
        stack.callback(lambda: None)
        stack.enter_context(obj)
        stack.enter_context(Lock(NAME + "-other", ttl=5))
        stack.enter_context(obj)
        blocks = list(obj._blocks)
        with obj:  # the object's next entry
            assert all(block.open for block in blocks), "a block on the stack was given up"
        assert obj._blocks == blocks
    assert not obj._blocks
    _nothing_left(r, "several blocks of one object on one stack")


@pytest.mark.timeout(30)
def test_a_stack_closed_as_another_thread_enters_through_it_gives_up_no_block_in_use(
    r: redis.Redis,
) -> None:
    """Reviews 72b and 73b, F1/F2: a stack closed by one thread while another enters the
    object through it -- the entering block recorded the index of the exit being run, its
    own exit not pushed yet. Ending the newest of the two gave back the entering thread's
    block while its body ran; ending the oldest does the same when the entering thread was
    the other one. Which exit is whose cannot be told: the close raises, releasing nothing,
    and every block stays held; the stack's next close, by one of their threads, ends them."""
    obj = Semaphore(NAME, limit=2, ttl=5, wait=0)
    stack = contextlib.ExitStack()
    stack.enter_context(obj)  # this thread's block, its exit on the stack
    first = obj._blocks[-1]
    at_exit, at_push, go_exit, go_push = (threading.Event() for _ in range(4))

    raised: list[BaseException] = []

    def closer() -> None:
        sys.settrace(_held_at("redlock_deco._primitive", "__exit__", at_exit, go_exit))
        try:
            stack.close()
        except LockError as exc:
            raised.append(exc)

    entered: list[Any] = []

    def enterer() -> None:
        assert at_exit.wait(10)
        sys.settrace(_held_at("contextlib", "_push_cm_exit", at_push, go_push))
        stack.enter_context(obj)
        entered.append(obj.owned())

    threads = [threading.Thread(target=closer), threading.Thread(target=enterer)]
    for thread in threads:
        thread.start()
    assert at_push.wait(10)
    go_exit.set()  # the close's exit runs while the other block waits for its push
    time.sleep(0.2)
    go_push.set()
    for thread in threads:
        thread.join(10)
    assert entered == [True], "the entering thread's block was given up"
    assert len(raised) == 1, "an exit that could not tell its block released one"
    assert first.open and len(obj._blocks) == 2 and all(b.open for b in obj._blocks)
    stack.close()  # this thread's: its own block, or the ended thread's
    with obj:  # (and the one left without an exit on the stack goes at the next entry)
        pass
    assert not obj._blocks
    _nothing_left(r, "a close as another thread entered through the stack")


@pytest.mark.timeout(30)
def test_a_stack_handed_on_while_an_entry_through_it_waits_keeps_that_block(
    r: redis.Redis,
) -> None:
    """Review 73a, F1 (a second holder): a task entering the object through a shared stack
    waits for the lock; meanwhile another task hands the stack's callbacks on
    (``pop_all()``), and the stack gets new ones, where contextlib pushes the block's exit.
    The block recorded the old ones, found no exit there, and the owner's next entry gave it
    up while its body ran."""

    async def scenario() -> None:
        obj = AsyncLock(NAME, ttl=5, wait=5)
        stack = contextlib.AsyncExitStack()
        holder = AsyncLock(NAME, ttl=5)
        assert await holder.acquire()

        async def other_gets_in() -> bool:
            try:
                async with AsyncLock(NAME, ttl=5, wait=0):
                    return True
            except LockNotAcquired:
                return False

        async def enter_and_run() -> None:
            await stack.enter_async_context(obj)  # waits for the holder
            mine = obj._blocks[-1]
            async with obj:  # the owner's next entry
                pass
            assert mine.open and await obj.owned(), "the owner's next entry gave the block up"
            assert not await asyncio.create_task(other_gets_in()), "another task got in"
            await stack.aclose()
            assert not obj._blocks

        running = asyncio.create_task(enter_and_run())
        await asyncio.sleep(0.2)
        handed = stack.pop_all()  # (its callbacks, empty now, go on)
        await holder.release()
        await running
        await handed.aclose()

    asyncio.run(scenario())
    _nothing_left(r, "a stack handed on while an entry through it waited")


@pytest.mark.timeout(30)
def test_a_stack_closed_by_another_thread_as_an_entry_pushes_keeps_and_then_ends_that_block(
    r: redis.Redis,
) -> None:
    """Review 73a F2 and 73b F1 (a second holder): a stack holding a callback is closed by
    another thread while a thread's entry through it is between its ``__enter__`` and the
    push of its exit, which then lands below the index the block recorded: the block counted
    as missing its exit, and the owner's next entry gave it up while its body ran; the
    stack's next close, by the owner, raised and left it held."""
    obj = Lock(NAME, ttl=5, wait=0)
    stack = contextlib.ExitStack()
    stack.callback(lambda: None)
    in_window, go_on, checked = threading.Event(), threading.Event(), threading.Event()
    seen: list[object] = []

    def owner() -> None:
        sys.settrace(_held_at("contextlib", "_push_cm_exit", in_window, go_on))
        try:
            stack.enter_context(obj)
        finally:
            sys.settrace(None)
        mine = obj._blocks[-1]
        with obj:  # the owner's next entry
            pass
        seen.append(mine.open and obj.owned())
        seen.append(_takes(lambda: Lock(NAME, ttl=5, wait=0)))
        checked.set()
        stack.close()  # the owner's close: its own block
        seen.append(not obj._blocks)

    thread = threading.Thread(target=owner)
    thread.start()
    assert in_window.wait(10)
    stack.close()  # another thread's close, as the entry is about to push its exit
    go_on.set()
    thread.join(10)
    assert seen == [True, False, True], seen
    _nothing_left(r, "a close by another thread as an entry pushed its exit")

"""An interrupt at every step of contextlib's own ExitStack code, on a long-lived stack reused
entry after entry (review 70, F2 and F3).

``stack.enter_context(obj)`` runs ``obj.__enter__`` and then pushes its exit; the stack's
``close()`` pops each exit and then calls it. An interrupt between the two (after the enter
returned, before the push; after the pop, before the call) left a block open that no exit
would ever end: with a stack kept for good (a module's, an attribute) and reused, the block
stayed held and renewed for good, and a limit-1 semaphore object refused every later entry,
its own thread's included. Now each entry's exit is its own (ownership.StackExit), the block
puts a second exit on the stack before ``__enter__`` returns, and a block cut off from
contextlib's exit ends at the stack's next close or the object's next entry.

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
import gc
import inspect
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
    """Whether ``stack`` still holds contextlib's exit of a block of ``obj`` (bound to the
    object; not a block's second exit, which names its first: ownership.StackExit)."""
    return any(
        getattr(cb, "__self__", None) is obj and getattr(cb.__func__, "first", None) is None
        for _, cb in stack._exit_callbacks
    )


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
    past the thread's next ``with``. Each exit the stack pops ends the block it belongs to:
    the cut one's own second exit (pushed as it entered), then the by-hand one."""
    obj = Lock(NAME, ttl=5, wait=0)
    stack = contextlib.ExitStack()
    obj.__enter__()
    stack.push(obj)
    by_hand = obj._blocks[0]
    kept: list[BaseException] = []
    _left_on(stack, obj, kept)
    cut = obj._blocks[-1]
    assert cut is not by_hand and cut.open
    stack.close()
    assert not by_hand.open and not cut.open and not obj._blocks, (
        "the stack's close left a block open"
    )
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


def _entering_in_window(
    stack: contextlib.ExitStack, obj: Lock | Semaphore
) -> tuple[threading.Thread, threading.Event]:
    """A thread entering ``obj`` through ``stack``, held in contextlib's window (its
    ``__enter__`` returned, contextlib's push not made) until the returned event is set."""
    in_window, go_on = threading.Event(), threading.Event()

    def enter() -> None:
        sys.settrace(_held_at("contextlib", "_push_cm_exit", in_window, go_on))
        try:
            stack.enter_context(obj)
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=enter)
    thread.start()
    assert in_window.wait(10)
    return thread, go_on


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
    first, go_on = _entering_in_window(stack, obj)
    second = threading.Thread(target=lambda: stack.enter_context(obj))
    second.start()
    second.join(10)
    go_on.set()
    first.join(10)
    assert len(obj._blocks) == 2
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
    the other one. Each exit now is its own block's: the close ends the first block, and
    runs the entering one's second exit (pushed before the close emptied the stack), which
    leaves it to contextlib's, about to be pushed; the stack's next close ends it."""
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
    assert not raised, raised
    assert not first.open and len(obj._blocks) == 1 and obj._blocks[0].open
    stack.close()  # the entering (now ended) thread's block
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


@pytest.mark.timeout(30)
def test_a_stack_handed_on_between_a_blocks_two_exits_leaves_it_to_contextlibs(
    r: redis.Redis,
) -> None:
    """A block entered through a stack puts its second exit on the stack as ``__enter__``
    returns, and contextlib pushes its own just after. A ``pop_all()`` by another thread
    between the two hands the second on with the callbacks, while contextlib's lands on the
    stack's new ones: closing the handed-on stack runs the second, which must leave the
    block to contextlib's exit -- still on a stack, to be run there -- not end it as its
    body begins."""
    obj = Lock(NAME, ttl=5, wait=0)
    stack = contextlib.ExitStack()
    thread, go_on = _entering_in_window(stack, obj)
    handed = stack.pop_all()  # (the second exit goes with it)
    go_on.set()
    thread.join(10)
    assert len(handed._exit_callbacks) == 1 and _exit_on(stack, obj)
    handed.close()  # runs the block's second exit: contextlib's is on `stack`
    assert obj._blocks and obj._blocks[0].open and r.exists(obj.key), "the block was given up"
    assert not _takes(lambda: Lock(NAME, ttl=5, wait=0)), "another thread got in"
    stack.close()  # contextlib's exit: the block ends
    assert not obj._blocks
    _nothing_left(r, "a stack handed on between a block's two exits")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_cut_before_contextlibs_push_is_ended_by_the_stack_that_unwinds(
    r: redis.Redis, kind: str
) -> None:
    """An interrupt after ``__enter__`` returned and before contextlib pushed the exit, the
    exception kept: the ``with ExitStack()`` it unwinds through ends the block at once (its
    second exit was on the stack), not when the exception goes."""
    obj = Lock(NAME, ttl=5, wait=0) if kind == "lock" else Semaphore(NAME, limit=1, ttl=5, wait=0)
    kept: list[BaseException] = []
    sys.settrace(_cut_as("_push_cm_exit"))
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(obj)
    except Cut as exc:
        kept.append(exc)
    finally:
        sys.settrace(None)
    assert kept, "the cut was not reached"
    assert not obj._blocks, "the block outlived the stack it was entered through"
    assert _takes(lambda: Lock(NAME, ttl=5, wait=0) if kind == "lock" else Semaphore(
        NAME, limit=1, ttl=5, wait=0)), "another thread could not get in"  # fmt: skip
    _nothing_left(r, "a cut before contextlib's push, the exception kept")
    kept.clear()


class _LoggedLock(Lock):
    """A subclass with an ``__exit__`` of its own, reaching the base's through super()."""

    exits = 0

    def __exit__(self, *exc: Any) -> None:
        type(self).exits += 1
        super().__exit__(*exc)


class _LoggedAsyncSemaphore(AsyncSemaphore):
    async def __aexit__(self, *exc: Any) -> None:
        await super().__aexit__(*exc)


@pytest.mark.timeout(30)
def test_a_subclass_with_its_own_exit_keeps_each_stack_entrys_exit_its_own(
    r: redis.Redis,
) -> None:
    """A subclass's own ``__exit__`` calls the base's through ``super()``, which reads it off
    the object: the exit the stack runs must still end exactly its own block. A stack handed
    on (pop_all) from inside a ``with`` block on the object, closed there: its exit ended the
    newest block of the frame -- the ``with`` block's own -- which then ran on unprotected."""
    obj = _LoggedLock(NAME, ttl=5, wait=0)
    exits = _LoggedLock.exits
    with obj:
        statement = obj._blocks[-1]
        with contextlib.ExitStack() as stack:
            stack.enter_context(obj)
            handed = stack.pop_all()
        entered = obj._blocks[-1]
        assert entered is not statement and entered.exit is not None
        handed.close()
        assert not entered.open and statement.open, "the stack's exit ended the wrong block"
        assert r.exists(obj.key)
    # (the hook once per block: not again for the stack entry's second exit, review 86a, F3)
    assert not obj._blocks and _LoggedLock.exits - exits == 2
    _nothing_left(r, "a subclass's own exit")


@pytest.mark.timeout(30)
def test_an_asyncio_subclass_with_its_own_exit_keeps_each_stack_entrys_exit_its_own(
    r: redis.Redis,
) -> None:
    """The asyncio twin of the test above, with a semaphore."""

    async def scenario() -> None:
        sem = _LoggedAsyncSemaphore(NAME, limit=2, ttl=5, wait=0)
        async with sem:
            statement = sem._blocks[-1]
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(sem)
                handed = stack.pop_all()
            await handed.aclose()
            assert statement.open and len(sem._blocks) == 1, "the wrong block was ended"
        assert not sem._blocks

    asyncio.run(scenario())
    _nothing_left(r, "an asyncio subclass's own exit")


class _ExplicitLock(Lock):
    """A subclass whose exit names the base's exit off the class (as ``type(cm).__exit__``
    does), not through super()."""

    def __exit__(self, *exc: Any) -> None:
        Lock.__exit__(self, *exc)


class _ExplicitAsyncSemaphore(AsyncSemaphore):
    async def __aexit__(self, *exc: Any) -> None:
        await AsyncSemaphore.__aexit__(self, *exc)


@pytest.mark.timeout(30)
def test_an_exit_read_off_the_class_by_hand_is_a_plain_exit(r: redis.Redis) -> None:
    """Review 74a, F1: reading the exit off the class gives an exit made for a stack's entry;
    called by hand (a subclass naming ``Lock.__exit__``), it was taken for an exit pushed on
    a stack by hand, and a nested block's exit raised LockError and left the block held.
    It is a plain exit: nested blocks end in order, and so do two tasks' blocks on one
    semaphore object."""
    obj = _ExplicitLock(NAME, ttl=5, wait=0)
    with obj:
        with obj:
            pass
        assert len(obj._blocks) == 1 and r.exists(obj.key)
    assert not obj._blocks
    _nothing_left(r, "a nested block of a subclass naming the base's exit")

    async def scenario() -> None:
        sem = _ExplicitAsyncSemaphore(NAME, limit=2, ttl=5, wait=0)
        entered = asyncio.Event()

        async def hold() -> None:
            async with sem:
                entered.set()
                await asyncio.sleep(0.05)

        first = asyncio.create_task(hold())
        await entered.wait()
        async with sem:
            await first
        assert not sem._blocks

    asyncio.run(scenario())
    _nothing_left(r, "two tasks on a semaphore subclass naming the base's exit")


class _OwnEnterSemaphore(Semaphore):
    def __enter__(self) -> _OwnEnterSemaphore:
        return super().__enter__()


class _OwnEnterLock(Lock):
    def __enter__(self) -> _OwnEnterLock:
        return super().__enter__()


class _TwoLevelLock(_LoggedLock):
    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)


@pytest.mark.timeout(30)
def test_a_subclass_with_its_own_enter_is_placed_where_its_with_statement_runs(
    r: redis.Redis,
) -> None:
    """Review 75a, F1 (a second holder): a subclass's own ``__enter__`` was taken for the frame
    running the ``with`` statement -- a frame that ends at once. A generator's block, closed
    by another thread inside that thread's own block on the object, then ended that thread's
    block: its slot went while its body ran. F2: entered through an ExitStack, the entry took
    no exit of its own, and the stack's exit raised LockError, leaving the lock held."""
    sem = _OwnEnterSemaphore(NAME, limit=2, ttl=5, wait=0)

    def generator() -> Any:
        with sem:
            yield

    suspended = generator()
    next(suspended)  # (this thread's block, in the generator)
    seen: list[Any] = []

    def other() -> None:
        with sem:
            mine = current_lease()
            suspended.close()  # the generator leaves its own block, here
            seen.append(r.zscore(sem.key, mine.token) is not None)
        seen.append(not sem._blocks)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(10)
    assert seen == [True, True], "another block's exit gave this thread's slot back"
    _nothing_left(r, "a generator's block of a subclass with its own enter")
    lock = _OwnEnterLock(NAME, ttl=5, wait=0)
    with lock, contextlib.ExitStack() as stack:
        stack.enter_context(lock)
        assert len(lock._blocks) == 2
    with contextlib.ExitStack() as stack:
        stack.enter_context(lock)
        stack.enter_context(lock)
    assert not lock._blocks
    _nothing_left(r, "a subclass with its own enter, through a stack")


@pytest.mark.timeout(30)
def test_two_levels_of_subclass_exits_keep_a_stack_entrys_exit_its_own(r: redis.Redis) -> None:
    """Review 75a, F3: with two levels of subclasses each with an exit of its own (through
    super()), the inner one's wrapper hid the exit the outer one was run as: a stack's exit
    inside a ``with`` on the object ended the ``with`` block's own, whose body ran on."""
    obj = _TwoLevelLock(NAME, ttl=5, wait=0)
    with obj:
        statement = obj._blocks[-1]
        with contextlib.ExitStack() as stack:
            stack.enter_context(obj)
        assert statement.open and obj._blocks == [statement], "the stack ended the wrong block"
        assert not _takes(lambda: Lock(NAME, ttl=5, wait=0)), "another thread got in"
    assert not obj._blocks
    _nothing_left(r, "two levels of subclass exits")


class _Flushing(Lock):
    """A subclass whose own exit re-enters the object (a last write under the lock)."""

    flushing = False

    def __exit__(self, *exc: Any) -> None:
        if not self.flushing:
            self.flushing = True
            try:
                with self:
                    pass
            finally:
                self.flushing = False
        super().__exit__(*exc)


class _FollowedUp(AsyncLock):
    """An asyncio subclass whose own exit starts a task that enters the object later."""

    follow_up: asyncio.Task[None] | None = None

    async def __aexit__(self, *exc: Any) -> None:
        if self.follow_up is None:
            self.follow_up = asyncio.create_task(self._later())
        await super().__aexit__(*exc)

    async def _later(self) -> None:
        await asyncio.sleep(0.05)
        async with self:
            pass


@pytest.mark.timeout(30)
def test_blocks_entered_inside_a_subclasss_own_exit_keep_their_own_exits(
    r: redis.Redis,
) -> None:
    """Review 76a: what a subclass's own exit was run as (its stack entry's exit) was taken
    for the exit of any block of the object it ran: F1, a ``with self:`` inside the exit;
    F2, a task started there (it copies the context). Each such exit ended the stack's block
    -- already ended -- and its own block stayed held and renewed for good."""
    lock = _Flushing(NAME, ttl=5, wait=0)
    with contextlib.ExitStack() as stack:
        stack.enter_context(lock)
    assert not lock._blocks, "a block entered inside the subclass's exit was left open"
    _nothing_left(r, "a with block inside a subclass's own exit")

    async def scenario() -> None:
        alock = _FollowedUp(NAME, ttl=5, wait=1)
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(alock)
        assert alock.follow_up is not None
        await alock.follow_up
        assert not alock._blocks, "the task's block was left open"

    asyncio.run(scenario())
    _nothing_left(r, "a task started inside an asyncio subclass's own exit")


class _LogExit:
    """A mixin with an exit of its own, before the primitive in the class's bases."""

    def __exit__(self, *exc: Any) -> Any:
        return super().__exit__(*exc)  # type: ignore[misc]


class _MixedSemaphore(_LogExit, Semaphore):
    pass


class _Guarded(Semaphore):
    """A composite: its own enter and exit also enter and leave another primitive by hand."""

    def __init__(self, name: str, other: Lock, **options: Any) -> None:
        super().__init__(name, **options)
        self.other = other

    def __enter__(self) -> _Guarded:
        self.other.__enter__()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self.other.__exit__(*exc)


@pytest.mark.timeout(30)
def test_a_mixins_exit_and_a_composites_enter_keep_each_stack_entrys_exit(
    r: redis.Redis,
) -> None:
    """Review 77a, F2: a mixin's exit (not the subclass's own) was left as it was, and a
    composite's own enter, entering another primitive by hand, made that one take the
    stack's exit read for the composite: in both, a stack's exit inside a ``with`` on the
    object raised LockError and left a block held and renewed."""
    mixed = _MixedSemaphore(NAME, limit=2, ttl=5, wait=0)
    with mixed, contextlib.ExitStack() as stack:
        stack.enter_context(mixed)
    assert not mixed._blocks
    _nothing_left(r, "a mixin's exit")
    audit = Lock(NAME + "-audit", ttl=5)
    guarded = _Guarded(NAME, audit, limit=2, ttl=5, wait=0)
    with guarded, contextlib.ExitStack() as stack:
        stack.enter_context(guarded)
        assert len(guarded._blocks) == 2 and len(audit._blocks) == 2
    assert not guarded._blocks and not audit._blocks
    _nothing_left(r, "a composite entered through a stack inside a with on it")


def _side_by_side(*targets: Callable[[], None]) -> None:
    """Run each target on a thread of its own, started in this order, each joined within 20 s."""
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)


def _b_leaves_its_own_while_a_holds(
    r: redis.Redis,
    sem: Semaphore,
    enter: Callable[[], None],
    leave: Callable[[Callable[[], None]], None],
    what: str,
) -> None:
    """Thread A enters ``sem`` by hand through ``enter`` (a helper whose frame then ends) and
    holds on; thread B enters its own block by hand and leaves it through ``leave``, whose
    helper first calls the function it is given from its own frame. That function sets the
    frame id A's block recorded to that frame's, as the allocator does when it gives a new
    frame the memory an ended one left. (A search for a real reuse found one without a
    tracer; under coverage's, which gives every call a frame object, A's waits included, it
    often found none: CI, stop 41.) B's exit must end B's block, and A's slot stay."""
    a_in, b_done = threading.Event(), threading.Event()
    seen: list[bool] = []
    mine = None

    def pose() -> None:
        frame = sys._getframe(1)
        for section in sem._blocks:
            if section.lease is not mine:
                section.frame = id(frame)

    def a() -> None:
        enter()
        token = sem.lease.token  # type: ignore[union-attr]
        a_in.set()
        assert b_done.wait(20)
        seen.append(r.zscore(sem.key, token) is not None)
        sem.__exit__(None, None, None)

    def b() -> None:
        nonlocal mine
        sem.__enter__()  # B's own by-hand block
        mine = sem.lease
        assert a_in.wait(10)
        leave(pose)
        seen.append(mine is not None and r.zscore(sem.key, mine.token) is None)
        b_done.set()

    _side_by_side(b, a)
    assert seen == [True, True], "B's exit ended A's block (A's slot went while it held)"
    assert not sem._blocks
    _nothing_left(r, what)


@pytest.mark.timeout(60)
def test_an_exit_by_hand_never_ends_another_owners_block_by_a_reused_frame_id(
    r: redis.Redis,
) -> None:
    """Review 77a, F1 (a second holder): a by-hand exit was matched to any owner's block
    entered from a frame with the same id -- but a block entered by hand in a helper
    outlives the helper's frame, and another thread's frame may get that id. Thread B,
    leaving its own by-hand block from such a frame, ended thread A's block."""
    sem = Semaphore(NAME, limit=2, ttl=10, wait=0)

    def step(pose: Callable[[], None] | None) -> None:
        # (one code object for both, as with a reused frame: the rule compares the code too)
        if pose is None:
            sem.__enter__()
        else:
            pose()
            sem.__exit__(None, None, None)

    _b_leaves_its_own_while_a_holds(
        r, sem, lambda: step(None), step, "a by-hand exit from a frame with a reused id"
    )


@pytest.mark.timeout(60)
def test_an_exit_by_hand_in_a_generator_never_ends_a_block_of_an_ended_one(
    r: redis.Redis,
) -> None:
    """Review 78a, F1 (a second holder): the same as the test above, in a generator: thread A
    enters by hand in a generator that then ends; thread B leaves its own by-hand block from
    a generator of the same code whose frame got the ended one's id, and ended A's block.
    (The frame that entered an open block by hand is now held, so that no frame gets its
    id: the id is set.)"""
    sem = Semaphore(NAME, limit=2, ttl=10, wait=0)

    def step(pose: Callable[[], None] | None) -> Iterator[None]:
        if pose is None:
            sem.__enter__()
        else:
            pose()
            sem.__exit__(None, None, None)
        yield

    def enter() -> None:
        helper = step(None)
        next(helper)
        next(helper, None)  # (ended: its frame goes, the block stays open)

    _b_leaves_its_own_while_a_holds(
        r, sem, enter, lambda pose: next(step(pose)), "a by-hand exit in a generator"
    )


@pytest.mark.timeout(60)
def test_an_exit_by_hand_in_an_async_generator_never_ends_a_block_of_an_ended_one(
    r: redis.Redis,
) -> None:
    """The test above with tasks and an async generator: task A enters by hand in an async
    generator that then ends; task B leaves its own by-hand block from an async generator of
    the same code whose frame got the ended one's id. An async generator's blocks were all
    matched by their frame (an ``async with`` entry was not told from a by-hand one), and
    B's exit ended A's block while A's body ran."""

    async def scenario() -> list[bool]:
        sem = AsyncSemaphore(NAME, limit=2, ttl=10, wait=0)
        mine = None

        async def step(enter: bool) -> Any:
            if enter:
                await sem.__aenter__()
            else:
                for section in sem._blocks:
                    if section.lease is not mine:
                        section.frame = id(sys._getframe())
                await sem.__aexit__(None, None, None)
            yield

        a_in, b_done = asyncio.Event(), asyncio.Event()
        seen: list[bool] = []

        async def a() -> None:
            helper = step(True)
            await anext(helper)
            await anext(helper, None)  # (ended: its frame goes, the block stays open)
            del helper
            token = sem.lease.token  # type: ignore[union-attr]
            a_in.set()
            await b_done.wait()
            seen.append(r.zscore(sem.key, token) is not None)
            await sem.__aexit__(None, None, None)

        async def b() -> None:
            nonlocal mine
            await sem.__aenter__()
            mine = sem.lease
            await a_in.wait()
            await anext(step(False))
            seen.append(mine is not None and r.zscore(sem.key, mine.token) is None)
            b_done.set()

        task_b = asyncio.create_task(b())
        await asyncio.sleep(0.05)
        await asyncio.wait_for(asyncio.gather(task_b, a()), 20)
        assert not sem._blocks
        return seen

    seen = asyncio.run(scenario())
    assert seen == [True, True], "B's exit ended A's block (A's slot went while it held)"
    _nothing_left(r, "a by-hand exit in an async generator reusing an ended one's frame id")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("own", ["with", "by hand"])
def test_a_generator_closed_by_another_thread_leaves_its_own_block(
    r: redis.Redis, own: str
) -> None:
    """Review 79a, F1b (a second holder): thread A enters by hand in a generator, takes a
    step and ends; thread B, inside its own block on the object, closes the generator. Its
    exit ran in the frame that entered A's block, but only a ``with`` statement's block was
    matched by its frame for another owner, so the exit took B's own: B's slot went while
    its body ran, with no signal, and A's block stayed open."""
    sem = Semaphore(NAME, limit=2, ttl=10, wait=0)

    def steps() -> Iterator[None]:
        sem.__enter__()
        try:
            yield
        finally:
            sem.__exit__(None, None, None)

    gen = steps()
    elsewhere = threading.Thread(target=next, args=(gen,))
    elsewhere.start()
    elsewhere.join(10)
    assert len(sem._blocks) == 1
    theirs = sem._blocks[0].lease

    def body() -> None:
        mine = sem.lease
        assert mine is not theirs and mine is not None
        gen.close()
        assert r.zscore(sem.key, mine.token) is not None, "B's slot went while its body ran"
        assert r.zscore(sem.key, theirs.token) is None, "the generator's block stayed open"

    if own == "with":
        with sem:
            body()
    else:
        sem.__enter__()
        body()
        sem.__exit__(None, None, None)
    assert not sem._blocks
    _nothing_left(r, "a generator's by-hand block closed by another thread")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("own", ["async with", "by hand"])
def test_a_dropped_tasks_block_closed_by_the_collector_in_another_task_is_its_own(
    r: redis.Redis, own: str
) -> None:
    """Review 79a, F1a (a second holder): task A waits inside ``async with sem:`` and is
    dropped (no reference kept: "Task was destroyed but it is pending!"); the collector
    closes its coroutine while task B is inside its own block on the object. The exit ran in
    A's frame, but a coroutine's block was not matched by its frame for another owner: it
    took B's block, whose slot went while its body ran (3 holders of a limit-2 semaphore)."""

    async def scenario() -> None:
        sem = AsyncSemaphore(NAME, limit=2, ttl=10, wait=0)

        async def a() -> None:
            async with sem:
                await asyncio.get_running_loop().create_future()  # (nobody keeps it)

        task: Any = asyncio.ensure_future(a())
        await asyncio.sleep(0.05)
        assert len(sem._blocks) == 1
        theirs = sem._blocks[0].lease
        del task

        async def body() -> None:
            mine = sem.lease
            assert mine is not theirs and mine is not None
            gc.collect()  # (closes A's coroutine, in this task)
            assert r.zscore(sem.key, mine.token) is not None, "B's slot went while it ran"
            for _ in range(500):  # (A's is given up in the background)
                if r.zscore(sem.key, theirs.token) is None:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the dropped task's block stayed open")

        if own == "async with":
            async with sem:
                await body()
        else:
            await sem.__aenter__()
            await body()
            await sem.__aexit__(None, None, None)
        assert not sem._blocks

    asyncio.run(scenario())
    _nothing_left(r, "a dropped task's block closed by the collector in another task")


@pytest.mark.timeout(30)
def test_a_generator_exit_passing_through_a_running_coroutines_block_reports_a_lost_lease(
    r: redis.Redis,
) -> None:
    """Review 80a, F3: a GeneratorExit leaving an ``async with`` body in a coroutine its task
    runs (not one being closed: ``athrow(GeneratorExit)`` on an async generator) was taken
    for a closed coroutine's: the release went to the background and the lost lease went
    unreported. It is reported as for any other error (LockLost, the GeneratorExit its
    context), and released in the exit."""

    async def inner() -> Any:
        yield 1

    async def body(lock: AsyncLock) -> None:  # (awaited: not the task's own coroutine)
        async with lock:
            r.delete(lock.key)  # (the lease lost behind its back)
            steps = inner()
            await anext(steps)
            await steps.athrow(GeneratorExit)

    async def scenario() -> None:
        lock = AsyncLock(NAME, ttl=5, wait=0)
        with pytest.raises(LockLost) as raised:
            await body(lock)
        assert isinstance(raised.value.__context__, GeneratorExit)
        assert not lock._blocks

    asyncio.run(scenario())
    _nothing_left(r, "a GeneratorExit through a running coroutine's block")


@pytest.mark.timeout(30)
def test_an_async_generator_closed_by_asyncios_finalizer_reports_a_lost_lease(
    r: redis.Redis,
) -> None:
    """An async generator suspended inside ``async with``, collected: asyncio's finalizer
    closes it in a task of its own (``aclose()``, no coroutine of the task's own around the
    generator's frame), where its exit may await -- taken for a coroutine being closed, its
    release went to the background and its lost lease went unreported. It is reported (to
    the loop's exception handler, as asyncio reports a generator's failed close), and the
    block is left."""
    reported: list[BaseException] = []

    async def steps(lock: AsyncLock) -> Any:
        async with lock:
            r.delete(lock.key)  # (the lease lost behind its back)
            yield 1

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: reported.append(context["exception"])
        )
        lock = AsyncLock(NAME, ttl=5, wait=0)
        generator = steps(lock)
        await anext(generator)
        del generator
        gc.collect()
        for _ in range(50):
            if reported:
                break
            await asyncio.sleep(0.01)
        assert [type(error) for error in reported] == [LockLost]
        assert not lock._blocks

    asyncio.run(scenario())
    _nothing_left(r, "an async generator closed by asyncio's finalizer")


def test_an_async_with_statement_is_told_from_an_entry_by_hand_on_this_python() -> None:
    """Which block an exit ends rests on knowing an ``async with`` statement's entry from a
    by-hand ``await obj.__aenter__()`` (see _ownership._with_offsets). Python 3.12 reports a
    frame waiting at a ``SEND`` by its inline cache entry, not the ``SEND``: every ``async
    with`` there was taken for an entry by hand (its frame held, its exit matched by the
    by-hand rules), and a coroutine its task awaits for one being closed, whose lost lease
    went unreported. Every CI Python runs this."""

    async def scenario() -> None:
        lock = AsyncLock(NAME, ttl=5)
        async with lock:
            assert [block.at >= 0 for block in lock._blocks] == [True]
            assert lock._blocks[0].inside is None
        await lock.__aenter__()
        try:
            assert [block.at >= 0 for block in lock._blocks] == [False]
        finally:
            await lock.__aexit__(None, None, None)

    asyncio.run(scenario())

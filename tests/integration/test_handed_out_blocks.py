"""Blocks handed out of the frame that entered them, and left elsewhere.

``ExitStack.pop_all()`` (and ``AsyncExitStack``'s) hands the blocks entered through a stack to
another frame, thread or task, which closes them later. A ``with`` protocol exit carries no
identity of its block, so an exit through a stack is matched by the stack's own list of
callbacks, which ``pop_all()`` moves intact: guessing by frame or owner ended the closer's own
block on the same semaphore object (review 22, 06 and 07: a third holder got in while its
body ran) and refused two handed-out blocks on one object (review 22, 01).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from support.samples import wait_until

import redlock_deco
import redlock_deco.asyncio
from redlock_deco import LockError
from redlock_deco._lifecycle import Lease
from redlock_deco._renewal import renewer

TTL = 30  # far longer than any test here: a key gone at once was released, not expired


def _at_every_line(run: Callable[[int], int], more_than: int) -> None:
    """``run(0)``, nothing switched in, counts the lines; then ``run(at)`` at each."""
    lines = run(0)
    assert lines > more_than
    for at in range(1, lines + 1):
        run(at)


def _given_back(r: redis.Redis, name: str, at: int) -> None:
    """The lock on ``name`` is free within a moment (its ttl is TTL: given back)."""
    assert wait_until(lambda: not r.exists(f"lock:{name}"), 2), f"line {at}: still held"


def _listed(r: redis.Redis, key: str) -> set[bytes]:
    return set(r.zrange(key, 0, -1))


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_block_handed_out_by_an_ended_owner_is_released_by_its_exit_anywhere(
    r: redis.Redis, flavour: str
) -> None:
    """Review 19, 04: a block entered through an ExitStack and handed out (pop_all()) by a
    thread or task that then ended, closed by another: that exit's frame and owner were
    neither the block's, so it found no block -- nothing released, nothing raised, and the
    key stayed held (for good while the object lived)."""
    import contextlib
    import threading

    if flavour == "sync":
        lock = redlock_deco.Lock("handed", ttl=TTL)
        out: list[Any] = []

        def hand_out() -> None:
            with contextlib.ExitStack() as stack:
                stack.enter_context(lock)
                out.append(stack.pop_all())

        entering = threading.Thread(target=hand_out)
        entering.start()
        entering.join(10)  # its owner has ended
        assert r.exists("lock:handed")
        out[0].close()  # left by this thread
        assert not r.exists("lock:handed"), "the handed-out block's exit released nothing"
        return

    async def scenario() -> None:
        lock = redlock_deco.asyncio.Lock("handed", ttl=TTL)

        async def hand_out() -> Any:
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(lock)
                return stack.pop_all()

        handed = await asyncio.create_task(hand_out())  # its owner has ended
        assert r.exists("lock:handed")
        await handed.aclose()  # left by this task
        assert not r.exists("lock:handed"), "the handed-out block's exit released nothing"

    asyncio.run(scenario())


def test_a_handed_out_exit_never_takes_a_suspended_generators_block(r: redis.Redis) -> None:
    """Review 21, 01: a generator suspended in its semaphore block (its first step run by a
    thread that ended) and a block handed out by a live thread: the handed-out block's exit,
    matching neither by frame nor by owner, took the generator's slot, and a third holder got
    in while the generator's body ran on. The stack's exit leaves exactly its own block."""
    import contextlib
    import threading

    sem = redlock_deco.Semaphore("gen-sem", limit=2, ttl=TTL)

    def steps() -> Any:
        with sem:
            yield 1
            yield 2

    gen = steps()
    first = threading.Thread(target=lambda: next(gen))
    first.start()
    first.join(10)  # the generator's entering thread has ended
    generators = set(r.zrange("sem:gen-sem", 0, -1))
    with contextlib.ExitStack() as stack:
        stack.enter_context(sem)
        handed = stack.pop_all()  # this thread lives on
    assert len(set(r.zrange("sem:gen-sem", 0, -1)) - generators) == 1
    closer = threading.Thread(target=handed.close)
    closer.start()
    closer.join(10)
    assert set(r.zrange("sem:gen-sem", 0, -1)) == generators  # the generator's slot is kept
    assert next(gen) == 2
    gen.close()  # the generator's own exit gives its slot back
    assert not r.exists("sem:gen-sem")


def test_a_handed_out_block_never_takes_another_owners_live_block(r: redis.Redis) -> None:
    """Review 20, 04: the exit of a handed-out block (its frame and owner elsewhere) took the
    newest open block of its object -- another thread's live semaphore slot -- and that
    thread's body ran on without a slot. It takes the block whose owner has ended, and with
    several live ones it raises, releasing nothing."""
    import contextlib
    import threading

    sem = redlock_deco.Semaphore("handed-sem", limit=2, ttl=TTL)
    handed: list[Any] = []

    def enter_and_hand_out() -> None:
        with contextlib.ExitStack() as stack:
            stack.enter_context(sem)
            handed.append(stack.pop_all())

    first = threading.Thread(target=enter_and_hand_out)
    first.start()
    first.join(10)  # its owner has ended; its slot is held
    inside, leave = threading.Event(), threading.Event()
    live: list[str] = []

    def live_block() -> None:
        with sem:
            live.append(redlock_deco.current_lease().token)
            inside.set()
            leave.wait(10)

    second = threading.Thread(target=live_block)
    second.start()
    assert inside.wait(10)
    assert len(r.zrange("sem:handed-sem", 0, -1)) == 2
    closer = threading.Thread(target=handed[0].close)
    closer.start()
    closer.join(10)
    assert r.zrange("sem:handed-sem", 0, -1) == [live[0].encode()]  # the live block's slot
    third = redlock_deco.Semaphore("handed-sem", limit=2, ttl=TTL)
    assert third.acquire(blocking=False)  # the freed slot
    assert not redlock_deco.Semaphore("handed-sem", limit=2, ttl=TTL).acquire(blocking=False)
    third.release()
    leave.set()
    second.join(10)
    assert r.keys("*") == []


@pytest.mark.parametrize("shared", [False, True], ids=["semaphore", "reader"])
def test_closing_a_handed_out_stack_inside_ones_own_block_leaves_only_the_handed_out_one(
    r: redis.Redis, shared: bool
) -> None:
    """Review 22, 06 and 07: a thread closing, inside its own block on the same object, a
    stack another thread entered and handed out ended its own block instead (same owner,
    another frame): its body ran on without a slot, and a third holder got in."""
    if shared:
        obj: Any = redlock_deco.Lock("own-and-handed", ttl=TTL, shared=True)
        key = "{lock:own-and-handed}:readers"
    else:
        obj = redlock_deco.Semaphore("own-and-handed", limit=2, ttl=TTL)
        key = "sem:own-and-handed"
    handed: list[Any] = []

    def enter_and_hand_out() -> None:
        with contextlib.ExitStack() as stack:
            stack.enter_context(obj)
            handed.append(stack.pop_all())

    first = threading.Thread(target=enter_and_hand_out)
    first.start()
    first.join(10)
    theirs = _listed(r, key)
    with obj:
        mine = redlock_deco.current_lease()
        handed[0].close()
        assert redlock_deco.current_lease(None) is mine  # still inside its own block
        assert _listed(r, key) - theirs == _listed(r, key) != set()  # only theirs went
        assert not mine.lost
    assert not r.exists(key)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_two_blocks_handed_out_on_one_object_each_leave_their_own(
    r: redis.Redis, flavour: str
) -> None:
    """Review 22, 01: two blocks on one semaphore object, each handed out by a thread or
    task that then ended: each exit raised LockError (which of the two?) and released
    nothing. Each stack leaves the block entered through it."""
    if flavour == "sync":
        sem = redlock_deco.Semaphore("two-handed", limit=3, ttl=TTL)
        stacks: list[Any] = []
        tokens: list[str] = []

        def enter_and_hand_out() -> None:
            with contextlib.ExitStack() as stack:
                stack.enter_context(sem)
                tokens.append(redlock_deco.current_lease().token)
                stacks.append(stack.pop_all())

        for _ in range(2):
            thread = threading.Thread(target=enter_and_hand_out)
            thread.start()
            thread.join(10)
        stacks[0].close()
        assert _listed(r, "sem:two-handed") == {tokens[1].encode()}
        stacks[1].close()
        assert not r.exists("sem:two-handed")
        return

    async def scenario() -> None:
        sem = redlock_deco.asyncio.Semaphore("two-handed", limit=3, ttl=TTL)
        tokens: list[str] = []

        async def enter_and_hand_out() -> Any:
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(sem)
                tokens.append(redlock_deco.current_lease().token)
                return stack.pop_all()

        stacks = [await asyncio.create_task(enter_and_hand_out()) for _ in range(2)]
        await stacks[1].aclose()  # out of order
        assert _listed(r, "sem:two-handed") == {tokens[0].encode()}
        await stacks[0].aclose()
        assert not r.exists("sem:two-handed")

    asyncio.run(scenario())


def test_a_direct_exit_matching_no_block_raises_and_releases_nothing(r: redis.Redis) -> None:
    """An exit called by hand, from a frame and a thread that entered nothing, while the
    thread that entered the block is still inside it: which block it means cannot be told,
    and taking the live one let a third holder in (review 20, 04). LockError, nothing
    released."""
    sem = redlock_deco.Semaphore("direct-exit", limit=2, ttl=TTL)
    inside, leave = threading.Event(), threading.Event()

    def live_block() -> None:
        with sem:
            inside.set()
            leave.wait(10)

    holder = threading.Thread(target=live_block)
    holder.start()
    assert inside.wait(10)
    held = _listed(r, "sem:direct-exit")
    with pytest.raises(LockError, match="matches none"):
        sem.__exit__(None, None, None)
    assert _listed(r, "sem:direct-exit") == held
    leave.set()
    holder.join(10)
    assert not r.exists("sem:direct-exit")


@pytest.mark.parametrize("push", ["push", "callback"])
def test_an_exit_pushed_by_hand_never_takes_the_closers_own_block(
    r: redis.Redis, push: str
) -> None:
    """Review 23, 02: a block entered by hand (``sem.__enter__()``) by a thread that pushed
    its exit onto a stack (``stack.push(sem)`` or ``stack.callback(sem.__exit__, ...)``),
    handed the stack out and ended; closed inside the closer's own block on the object, the
    frame rules took the closer's block, whose body ran on without a slot while two more
    holders got in. Which block the exit means cannot be told: LockError, nothing released."""
    sem = redlock_deco.Semaphore("pushed", limit=2, ttl=TTL)
    handed: list[Any] = []

    def enter_by_hand(sem: redlock_deco.Semaphore) -> None:
        stack = contextlib.ExitStack()
        sem.__enter__()
        if push == "push":
            stack.push(sem)
        else:
            stack.callback(sem.__exit__, None, None, None)
        handed.append(stack)

    first = threading.Thread(target=enter_by_hand, args=(sem,))
    first.start()
    first.join(10)
    with sem:
        mine = redlock_deco.current_lease()
        with pytest.raises(LockError, match="an exit pushed onto it by hand"):
            handed[0].close()
        assert redlock_deco.current_lease(None) is mine
        assert mine.token.encode() in _listed(r, "sem:pushed")
        assert len(_listed(r, "sem:pushed")) == 2  # the pushed one's too: nothing released
    assert len(_listed(r, "sem:pushed")) == 1
    # The ended thread's block is the object's while the object lives (its exit, called
    # anywhere, leaves it); it goes with the object, given back -- not left renewed into
    # the next test of this worker until a collection came (CI failed a later test on it).
    handed.clear()
    del sem
    gc.collect()
    assert wait_until(lambda: not r.exists("sem:pushed") and len(renewer()) == 0, 5)


def test_an_exit_pushed_by_hand_for_the_only_block_releases_it(r: redis.Redis) -> None:
    """The unambiguous case of the same: the object's only block, entered by hand and its
    exit pushed onto a stack, is left when the stack closes."""
    sem = redlock_deco.Semaphore("pushed-only", limit=2, ttl=TTL)
    with contextlib.ExitStack() as stack:
        sem.__enter__()
        stack.push(sem)
        assert len(_listed(r, "sem:pushed-only")) == 1
    assert not r.exists("sem:pushed-only")


def test_an_exit_pushed_by_hand_inside_a_block_on_the_object_raises(r: redis.Redis) -> None:
    """Review 25, 04 and 26, 04: inside ``with sem:``, a block entered by hand whose exit was
    pushed onto a stack (``sem.__enter__(); stack.push(sem)``): the exit cannot tell the
    block entered by hand from a ``with`` block (ending the newest took a ``with`` block
    entered after it, still running), so it raises LockError and releases nothing, as
    concepts.md says; the ``with`` block around it then ends the block entered by hand."""
    sem = redlock_deco.Semaphore("nested-pushed", limit=3, ttl=TTL)
    with sem:
        outer = redlock_deco.current_lease()
        stack = contextlib.ExitStack()
        sem.__enter__()
        inner = redlock_deco.current_lease()
        stack.push(sem)
        with sem:
            innermost = redlock_deco.current_lease()
            with pytest.raises(LockError, match="an exit pushed onto it by hand"):
                stack.close()
            assert redlock_deco.current_lease() is innermost
            assert len(_listed(r, "sem:nested-pushed")) == 3
        assert _listed(r, "sem:nested-pushed") == {outer.token.encode(), inner.token.encode()}
    assert _listed(r, "sem:nested-pushed") == {outer.token.encode()}  # as documented
    r.delete("sem:nested-pushed", "{sem:nested-pushed}:limit")
    # (that block goes with its object: here, not in whichever later test of this thread the
    # collector happens to run -- its section stayed in the thread's tables until then)
    del sem, stack
    gc.collect()
    assert redlock_deco.current_lease(None) is None


def test_a_dropped_tasks_async_with_block_never_blocks_a_pushed_exit(r: redis.Redis) -> None:
    """Review 80a (LOW): a task dropped while pending, iterating an async generator that
    waits inside ``async with sem:``, is collected without its generator's block ever
    ending (CPython cannot close a generator that is running: "aclose(): asynchronous
    generator is already running"); the dead block stays on the object. A later block entered
    by hand, its exit pushed onto a stack, raised LockError (which of two?) and stayed held.
    A ``with`` statement's block is only ever left by its own statement, never by an exit
    pushed onto a stack, and this one's task is gone: the pushed exit leaves its own block."""

    async def scenario() -> None:
        sem = redlock_deco.asyncio.Semaphore("dead-block", limit=2, ttl=TTL)

        async def inside() -> Any:
            async with sem:
                await asyncio.get_running_loop().create_future()  # nobody keeps it
                yield

        async def iterate() -> None:
            async for _ in inside():
                pass

        task = asyncio.ensure_future(iterate())
        assert await _eventually(lambda: len(_listed(r, "sem:dead-block")) == 1)
        dead = set(_listed(r, "sem:dead-block"))
        del task
        gc.collect()
        async with contextlib.AsyncExitStack() as stack:
            await sem.__aenter__()
            stack.push_async_exit(sem)
            mine = redlock_deco.current_lease().token.encode()
            assert mine in _listed(r, "sem:dead-block")
        # its own released; the dead one lapses (3.10-3.12), or went with its frame (3.13
        # closes the generator with the task's coroutine)
        assert _listed(r, "sem:dead-block") <= dead
        if sys.version_info >= (3, 13):  # (given back in the background, not awaited there)
            assert await _eventually(lambda: not r.exists("sem:dead-block"))

    asyncio.run(scenario())


async def _eventually(check: Callable[[], object], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


@pytest.mark.timeout(30)
@pytest.mark.parametrize("dropper", ["its loop", "another thread"])
def test_an_async_stack_never_closed_gives_its_lease_back_at_once(
    r: redis.Redis, dropper: str
) -> None:
    """Found by test_async_hook_shapes: a task closing a handed-out AsyncExitStack, cancelled
    before its first step, never runs ``aclose()`` (asyncio throws the cancel into a
    coroutine not yet started), and the stack goes unclosed. Its block's lease was only
    orphaned: held by nobody for its ttl, where a sync block dropped open is given back at
    once. It is given back on its own loop, whichever thread drops the stack, once (review
    89a, F2: closed twice, it was given back twice, and the second release reported the
    lease lost to the listeners)."""
    kinds: list[str] = []

    def listener(event: Any) -> None:
        kinds.append(event.kind)

    async def scenario() -> None:
        lock = redlock_deco.asyncio.Lock("never-closed", ttl=TTL)
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(lock)
            handed = [stack.pop_all()]
        closing = asyncio.ensure_future(handed[0].aclose())
        closing.cancel()  # (before its first step)
        with contextlib.suppress(asyncio.CancelledError):
            await closing
        del closing
        assert r.exists("lock:never-closed")  # (aclose() never ran)
        if dropper == "its loop":
            handed.clear()
        else:
            await asyncio.to_thread(handed.clear)  # (the finalizer runs in that thread)
        assert await _eventually(lambda: not r.exists("lock:never-closed"), within=2)
        await asyncio.sleep(0.1)  # (a second give-back would be out by now)
        assert kinds == ["acquired", "released"], kinds
        async with redlock_deco.asyncio.Lock("never-closed", ttl=TTL, wait=0):
            pass

    gc.disable()  # (given back as the stack goes, not when the cyclic collector runs)
    redlock_deco.add_listener(listener)
    try:
        asyncio.run(scenario())
    finally:
        redlock_deco.remove_listener(listener)
        gc.enable()


@pytest.mark.timeout(120)
def test_a_handed_out_block_closed_at_each_line_of_its_owners_reentry(r: redis.Redis) -> None:
    """Review 89a, F1 (HIGH): another thread closing the owner's last section (a handed-out
    stack) came between the owner's re-entry check and its count: the nested block opened
    on a lease being given back, and another holder got in beside its body (LockLost only at
    its exit). Here the close starts in its own thread at each line of the re-entry, and is
    given a moment there: either the nested block re-enters a lease it keeps, or it takes
    the name anew -- never a lease on its way back -- and the close raises nothing."""
    from support.elsewhere import AtLine, another_gets_in

    from redlock_deco import _guard as guard
    from redlock_deco import _lifecycle as lifecycle
    from redlock_deco import _ownership as ownership

    watched = {
        guard.open_section.__code__,
        guard._reentry.__code__,
        ownership.reentered.__code__,
        ownership.open_section.__code__,
        lifecycle.Lease._reenter.__code__,
    }

    def run(at: int) -> int:
        name = f"reentry-race-{at}"
        with contextlib.ExitStack() as stack:
            stack.enter_context(redlock_deco.Lock(name, ttl=TTL))
            handed = stack.pop_all()
        raised: list[BaseException] = []

        def close() -> None:
            try:
                handed.close()
            except BaseException as exc:
                raised.append(exc)

        closer = threading.Thread(target=close)

        def switched_in() -> None:
            closer.start()
            closer.join(0.2)  # (blocked on the lease's gate: it goes on after)

        inner = redlock_deco.Lock(name, ttl=TTL, wait=5)
        with AtLine(watched, at, switched_in) as reentry, inner:
            sys.settrace(None)
            if at:
                closer.join(10)
            lease = inner.lease
            assert lease is not None and lease.held, f"line {at}: {lease!r} not held"
            assert not another_gets_in(name), f"line {at}: another holder got in"
        if not at:
            closer.start()
        closer.join(10)
        assert not raised, f"line {at}: the handed-out stack's close raised {raised[0]!r}"
        _given_back(r, name, at)
        return reentry.lines

    _at_every_line(run, more_than=10)


def _handed_out(name: str, shared: bool = False) -> contextlib.ExitStack:
    """A stack holding a block of this thread's on ``name``, handed out (``pop_all()``)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(redlock_deco.Lock(name, ttl=TTL, shared=shared))
        return stack.pop_all()


@pytest.mark.timeout(120)
def test_a_reentry_cut_after_its_outer_block_closed_elsewhere_gives_the_lease_back(
    r: redis.Redis,
) -> None:
    """Review 90a, F1 (MEDIUM): the owner re-enters a name while another thread closes its
    handed-out outer block -- not the last, the re-entry counted -- and a KeyboardInterrupt
    then lands in the re-entry's recording: its clean-up closed the lease's last section and
    dropped that verdict, and the lease stayed held and renewed by nobody while the thread
    lived. Cut at each line of the recording: given back at once (its ttl is 30 s)."""
    from support.elsewhere import AtLine

    from redlock_deco import _ownership as ownership

    def run(at: int) -> int:
        name = f"reentry-cut-{at}"
        handed = _handed_out(name)

        def closed_elsewhere_then_cut() -> None:
            closer = threading.Thread(target=handed.close)
            closer.start()
            closer.join(10)
            raise KeyboardInterrupt

        cut = AtLine({ownership.open_section.__code__}, at, closed_elsewhere_then_cut)
        with contextlib.suppress(KeyboardInterrupt), cut, redlock_deco.Lock(name, ttl=TTL):
            pass
        handed.close()  # (done already, unless nothing was cut)
        _given_back(r, name, at)
        renewed = [job for job in renewer()._table.jobs.values() if isinstance(job, Lease)]
        assert not [lease for lease in renewed if lease.name == name], f"line {at}: renewed"
        return cut.lines

    _at_every_line(run, more_than=10)


@pytest.mark.timeout(60)
def test_a_handler_closing_the_outer_block_inside_a_reentry_leaves_it_protected(
    r: redis.Redis,
) -> None:
    """Review 90a, N1: code of the same thread (a signal handler) run inside the re-entry's
    check closes the owner's handed-out outer block: checked before it was counted, the
    nested block then ran on the lease that close gave back, another holder beside it. At
    each line of the re-entry: the nested block holds a lease of its own thread's, kept."""
    from support.elsewhere import AtLine, another_gets_in

    from redlock_deco import _lifecycle as lifecycle

    def run(at: int) -> int:
        name = f"reentry-handler-{at}"
        handed = _handed_out(name)
        inside = AtLine({lifecycle.Lease._reenter.__code__}, at, handed.close)
        with inside, redlock_deco.Lock(name, ttl=TTL, wait=2) as inner:
            sys.settrace(None)
            lease = inner.lease
            assert lease is not None and lease.held, f"line {at}: {lease!r} not held"
            assert not another_gets_in(name), f"line {at}: another holder got in"
        handed.close()
        _given_back(r, name, at)
        return inside.lines

    _at_every_line(run, more_than=3)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("loop", ["fresh", "used"])
def test_an_async_block_handed_to_another_threads_loop_is_released_there(
    r: redis.Redis, loop: str
) -> None:
    """Review 90a, F2 (LOW): an asyncio block handed out with ``AsyncExitStack.pop_all()`` to
    a task of another thread's event loop, closed there: with no state in that loop the
    release was taken for one the loop's shutdown had done (a false LockLost, the key held
    until its ttl); with one, it was sent on a client of the other loop ("attached to a
    different loop"). It goes to the block's own loop, and the close raises nothing."""

    async def warm() -> None:
        if loop == "used":
            async with redlock_deco.asyncio.Lock("other-loop-warm", ttl=TTL):
                pass

    assert _closed_in_another_loop(r, "other-loop", warm) == ["closed"]


def _closed_in_another_loop(
    r: redis.Redis,
    name: str,
    first: Callable[[], Any] | None = None,
    around: Callable[[], Any] = contextlib.nullcontext,
) -> list[str]:
    """An asyncio block on ``name`` handed out (``pop_all()``) to a task of another thread's
    loop, which runs ``first()`` and closes it inside ``around()``: what the close did
    ("closed", or its exception), once the name is given back."""
    box: list[contextlib.AsyncExitStack] = []
    outcome: list[str] = []

    def closer() -> None:
        async def close() -> None:
            if first is not None:
                await first()
            while not box:
                await asyncio.sleep(0.01)
            try:
                with around():
                    await box[0].aclose()
                outcome.append("closed")
            except BaseException as exc:
                outcome.append(repr(exc))

        asyncio.run(close())

    async def scenario() -> None:
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(redlock_deco.asyncio.Lock(name, ttl=TTL))
        thread = threading.Thread(target=closer)
        thread.start()
        box.append(stack.pop_all())
        await asyncio.to_thread(thread.join, 10)
        assert await _eventually(lambda: not r.exists(f"lock:{name}"), within=2), outcome

    asyncio.run(scenario())
    return outcome


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shared", [False, True], ids=["exclusive", "shared"])
def test_a_reentry_at_each_line_of_a_last_exit_elsewhere_is_never_given_back_under_it(
    r: redis.Redis, shared: bool
) -> None:
    """The other side of review 89a's F1: the owner re-enters at each line of another
    thread's close of its handed-out outer block -- between that exit's "no section left"
    and its verdict, the re-entry counted itself on a lease the close then gave back. The
    nested block keeps a lease of its own thread's, or takes the name anew, and that lease
    is the one its owner re-enters: a reader lease, taken anew at once beside the old one,
    was removed from the owner's table by the close's pop of its own (review 92a, F3), and
    the next nested block took a second lease or refused to wait for itself."""
    from support.elsewhere import AtLine, another_gets_in

    from redlock_deco import _lifecycle as lifecycle
    from redlock_deco import _ownership as ownership

    def run(at: int) -> int:
        name = f"reentry-in-exit-{'shared-' if shared else ''}{at}"
        handed = _handed_out(name, shared)
        go, entered, lines = threading.Event(), threading.Event(), []

        def reenter_now() -> None:
            go.set()
            entered.wait(0.2)  # (the re-entry waits for the lease's gate: it goes on after)

        def close() -> None:
            try:
                codes = {lifecycle.Lease._exit.__code__, ownership.close.__code__}
                with AtLine(codes, at, reenter_now) as inside:
                    handed.close()
                lines.append(inside.lines)
            finally:
                go.set()

        closer = threading.Thread(target=close)
        closer.start()
        assert go.wait(10)
        with redlock_deco.Lock(name, ttl=TTL, wait=5, shared=shared) as inner:
            entered.set()
            closer.join(10)
            lease = inner.lease
            assert lease is not None and lease.held, f"line {at}: {lease!r} not held"
            assert not another_gets_in(name), f"line {at}: another holder got in"
            with redlock_deco.Lock(name, ttl=TTL, wait=0, shared=shared) as nested:
                assert nested.lease is lease, f"line {at}: the nested block took a lease anew"
        _given_back(r, name, at)
        return lines[0]

    _at_every_line(run, more_than=10)


def _in_another_loop(coro: Callable[[], Any]) -> Any:
    """Run ``coro()`` in an event loop of another thread: its result, or its exception."""
    from support.elsewhere import in_thread

    return in_thread(lambda: asyncio.run(coro()))


@pytest.mark.timeout(120)
def test_a_block_closed_from_another_loop_with_its_home_loop_run_at_each_line(
    r: redis.Redis,
) -> None:
    """The window a loaded CI run found in the other-loop close (review 92a's round): its
    home loop, running in its own thread, released the lease between the close's hand-over
    and its verdict, and a released lease has no time left -- a false LockLost. Here the
    home loop gets the CPU at each line of that close (the closing thread sleeps there): the
    close raises nothing, and the name is given back."""
    from support.elsewhere import AtLine

    from redlock_deco import _guard as guard

    codes = {guard._give_back_async.__code__}

    def run(at: int) -> int:
        tracing: list[AtLine] = []

        def around() -> AtLine:
            tracing.append(AtLine(codes, at, lambda: time.sleep(0.1)))
            return tracing[0]

        outcome = _closed_in_another_loop(r, f"other-loop-at-{at}", around=around)
        assert outcome == ["closed"], f"line {at}: {outcome}"
        return tracing[0].lines

    _at_every_line(run, more_than=5)


@pytest.mark.timeout(30)
def test_an_asyncio_lease_is_extended_and_checked_only_from_its_own_loop(r: redis.Redis) -> None:
    """Review 91a, F2 (MEDIUM): ``extend()`` and ``owned()`` of an asyncio object's lease
    from a task of another loop sent on the home loop's clients: RuntimeError ("attached to a
    different loop"), a connection of the other loop left in the home loop's pool, and the
    object's release then failed and the name stayed held for its ttl. Refused before
    anything is sent; the home loop releases it as ever."""
    loop = asyncio.new_event_loop()
    try:
        lock = redlock_deco.asyncio.Lock("home-loop", ttl=TTL)
        assert loop.run_until_complete(lock.acquire())

        async def from_elsewhere() -> list[str]:
            refused = []
            for call in (lock.owned, lambda: lock.extend(to=TTL)):
                try:
                    await call()
                except LockError as exc:
                    refused.append(str(exc))
            return refused

        refused = _in_another_loop(from_elsewhere)
        assert len(refused) == 2 and all("another one" in text for text in refused), refused
        assert loop.run_until_complete(lock.owned())
        loop.run_until_complete(lock.release())
        assert not r.exists("lock:home-loop")
    finally:
        loop.run_until_complete(redlock_deco.aclose())  # (a loop driven by hand: see Shutdown)
        loop.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("held_by", ["object", "handed-out block"])
def test_a_lease_whose_stopped_loop_let_it_lapse_is_reported_lost_from_another_loop(
    r: redis.Redis, held_by: str
) -> None:
    """Review 91a, F1: a lease taken in a loop driven by ``run_until_complete()``, then used
    from a task of another loop while the first one is stopped: nothing renews it (stated,
    docs/asyncio.md, Event loops), and its release or exit from the other loop returned
    normally after the lease had lapsed and another holder had got in. Its end passed by the
    holder's clock, that release or exit reports it lost."""
    loop = asyncio.new_event_loop()
    try:
        lock = redlock_deco.asyncio.Lock("stopped-loop", ttl=1)
        handed: list[contextlib.AsyncExitStack] = []

        async def take() -> None:
            if held_by == "object":
                assert await lock.acquire()
                return
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(lock)
                handed.append(stack.pop_all())

        loop.run_until_complete(take())  # (then stopped: nothing of it runs)
        assert wait_until(lambda: not r.exists("lock:stopped-loop"), 3)  # lapsed

        async def end_elsewhere() -> str:
            try:
                if handed:
                    await handed[0].aclose()
                else:
                    await lock.release()
            except redlock_deco.LockNotOwned:
                return "not owned"
            except redlock_deco.LockLost:
                return "lost"
            return "returned"

        ended = _in_another_loop(end_elsewhere)
        assert ended == ("not owned" if held_by == "object" else "lost"), ended
        loop.run_until_complete(asyncio.sleep(0.1))  # (the release queued there runs)
        assert not lock._held and not lock._blocks
    finally:
        loop.run_until_complete(redlock_deco.aclose())  # (a loop driven by hand: see Shutdown)
        loop.close()

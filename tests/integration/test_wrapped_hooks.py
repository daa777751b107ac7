"""A subclass's own ``__enter__``/``__exit__`` (and the async ones) that reach the base's
through frames of the user's: a decorator's wrapper (logging, tracing), a helper function.

Which block an exit leaves is read off the frame running the ``with`` statement. Such frames
in between were once taken for that frame (review 81a, F1): a generator's block left by a
step another thread ran raised LockError and stayed held, and an older block's exit ended a
generator's block, its own staying held. overriding() now wraps every hook of a subclass in a
frame of the package, and what runs between it and the base's is passed through. A fix that
looked for the generator's frame up the calling stack instead let a nested block's exit end
the generator's (review 82a, F1): the first test here.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import wrapt
from support.elsewhere import another_gets_in, in_thread
from support.interrupts import signal_cannot_land
from support.user_decorators import Traced, awrapped, passthrough, wrapped, wrapt_logged

from redlock_deco import Lock, LockNotAcquired, Semaphore
from redlock_deco import _ownership as ownership
from redlock_deco import _renewal as renewal
from redlock_deco.asyncio import Lock as AsyncLock
from redlock_deco.asyncio import Semaphore as AsyncSemaphore

NAME = "wrapped-hooks"


class _WrappedExitLock(Lock):
    @wrapped
    def __exit__(self, *exc: Any) -> Any:
        return super().__exit__(*exc)


class _WrappedEnterLock(Lock):
    @wrapped
    def __enter__(self) -> Any:
        return super().__enter__()


def _leave(lock: Lock, *exc: Any) -> Any:
    return Lock.__exit__(lock, *exc)  # (read off the class: a plain exit, see run_as)


class _HelperExitLock(Lock):
    def __exit__(self, *exc: Any) -> Any:
        return _leave(self, *exc)


class _TwoLevelLock(_WrappedExitLock):
    @wrapped
    def __exit__(self, *exc: Any) -> Any:
        return super().__exit__(*exc)


class _ReenteringExitLock(Lock):
    flushing = False

    @wrapped
    def __exit__(self, *exc: Any) -> Any:
        if not self.flushing:  # (a last step under the lock, in a block of its own: 76a's)
            self.flushing = True
            try:
                with self:
                    pass
            finally:
                self.flushing = False
        return super().__exit__(*exc)


class _ClassDecoratedExitLock(Lock):
    @Traced
    def __exit__(self, *exc: Any) -> Any:
        return super().__exit__(*exc)


class _WraptDecoratedExitLock(Lock):
    @wrapt_logged
    def __exit__(self, *exc: Any) -> Any:
        return super().__exit__(*exc)


class _PatchedExitLock(Lock):  # its own exit, instrumented once the class exists
    def __exit__(self, *exc: Any) -> Any:
        return super().__exit__(*exc)


class _PatchedBaseExitLock(Lock):  # the base's exit, instrumented on the subclass
    pass


class _AssignedExitLock(Lock):  # its own exit, wrapped by hand once the class exists
    def __exit__(self, *exc: Any) -> Any:
        return super().__exit__(*exc)


for _patched in (_PatchedExitLock, _PatchedBaseExitLock):
    wrapt.wrap_function_wrapper(_patched, "__exit__", passthrough)
_AssignedExitLock.__exit__ = wrapped(_AssignedExitLock.__dict__["__exit__"])  # type: ignore[method-assign]


class _WrappedAsyncExitLock(AsyncLock):
    @awrapped
    async def __aexit__(self, *exc: Any) -> Any:
        return await super().__aexit__(*exc)


class _WrappedAsyncEnterLock(AsyncLock):
    @awrapped
    async def __aenter__(self) -> Any:
        return await super().__aenter__()


SYNC = [
    _WrappedExitLock,
    _WrappedEnterLock,
    _HelperExitLock,
    _TwoLevelLock,
    _ClassDecoratedExitLock,  # review 83a, F3: hooks that are no plain function,
    _WraptDecoratedExitLock,
    _PatchedExitLock,  # or put on the class once it exists
    _PatchedBaseExitLock,
    _AssignedExitLock,
]
ASYNC = [_WrappedAsyncExitLock, _WrappedAsyncEnterLock]


def _nothing_left(r: redis.Redis, what: str) -> None:
    deadline = time.monotonic() + 2
    while r.dbsize() and time.monotonic() < deadline:
        time.sleep(0.02)  # (a give-back handed to the background: within a moment)
    assert r.dbsize() == 0, f"held after {what}: {r.keys('*')}"
    assert len(renewal.renewer()) == 0, f"still renewed after {what}"


def _in_thread(fn: Callable[[], Any]) -> Any:
    return in_thread(fn)


def _another_gets_in() -> bool:
    return another_gets_in(NAME)


@pytest.mark.timeout(30)
def test_an_exit_through_a_wrapper_of_a_block_nested_in_a_generators_leaves_its_own(
    r: redis.Redis,
) -> None:
    """Review 82a, F1 (HIGH, against a fix of 81a's that found a generator's block up the
    calling stack): a generator inside ``with lock:`` (a subclass whose exit goes through a
    decorator's wrapper) calls a function that nests ``with lock:``; that inner exit ended
    the generator's block, kept its own, and the thread's next ``with`` gave the kept one
    up: another thread took the lock while the generator's body ran inside its block, and
    nothing was reported. The inner exit leaves the inner block."""
    lock = _WrappedExitLock(NAME, ttl=5, wait=0)

    def nested() -> None:
        with lock:
            pass

    def steps() -> Any:
        with lock:
            nested()
            yield 1
            yield 2

    generator = steps()
    assert next(generator) == 1
    with lock:  # (elsewhere: a block left over on the object would be closed here)
        pass
    assert len(lock._blocks) == 1
    assert not _another_gets_in(), "a second holder got in"
    assert next(generator) == 2
    with contextlib.suppress(StopIteration):
        next(generator)
    assert not lock._blocks
    _nothing_left(r, "a wrapped exit of a block nested in a generator's")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("cls", SYNC, ids=lambda cls: cls.__name__)
def test_a_generators_block_is_left_by_a_step_another_thread_runs(
    r: redis.Redis, cls: type[Lock]
) -> None:
    """Review 81a, F1: the generator's ``with`` block, entered in this thread, ends when
    another thread runs the step that leaves it (it raised LockError there, and the block
    stayed held and renewed while this thread lived)."""
    lock = cls(NAME, ttl=5, wait=0)

    def steps() -> Any:
        with lock:
            yield 1

    generator = steps()
    assert next(generator) == 1
    assert not _another_gets_in(), "a second holder got in"
    assert _in_thread(lambda: next(generator, "done")) == "done"
    assert not lock._blocks
    _nothing_left(r, f"a generator's block of a {cls.__name__} left by another thread")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("cls", [*SYNC, _ReenteringExitLock], ids=lambda cls: cls.__name__)
def test_an_older_blocks_exit_leaves_its_own_not_a_generators(
    r: redis.Redis, cls: type[Lock]
) -> None:
    """Review 81a, F1: a generator enters the object inside an older ``with`` block of the
    same thread, and stays suspended in it as that block ends. The older block's exit ended
    the generator's block (its own staying held): the generator's body then ran on with its
    block given up. Each exit leaves its own."""
    lock = cls(NAME, ttl=5, wait=0)

    def steps() -> Any:
        with lock:
            yield 1
            yield 2

    with lock:
        generator = steps()
        assert next(generator) == 1
    assert [block.generator for block in lock._blocks] == [True], "the older block is left"
    assert not _another_gets_in(), "the generator's block was given up"
    assert next(generator) == 2
    assert next(generator, "done") == "done"
    assert not lock._blocks
    _nothing_left(r, f"an older block of a {cls.__name__} around a generator's")


@pytest.mark.timeout(30)
def test_an_entry_through_a_stack_and_a_wrapped_enter_takes_an_exit_of_its_own(
    r: redis.Redis,
) -> None:
    """An ExitStack's entry made through a wrapped ``__enter__`` is a stack's entry (its own
    exit, which leaves it whoever closes the stack): the wrapper's frame once hid the stack."""
    lock = _WrappedEnterLock(NAME, ttl=5, wait=0)
    stack = contextlib.ExitStack()
    stack.enter_context(lock)
    assert [block.exit is not None for block in lock._blocks] == [True]
    _in_thread(stack.close)
    assert not lock._blocks
    _nothing_left(r, "a stack's entry through a wrapped __enter__, closed by another thread")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("cls", ASYNC, ids=lambda cls: cls.__name__)
def test_an_async_generators_block_is_left_by_a_step_another_task_runs(
    r: redis.Redis, cls: type[AsyncLock]
) -> None:
    """:func:`test_a_generators_block_is_left_by_a_step_another_thread_runs` for asyncio: an
    async generator's ``async with`` block, entered in one task, left by another's step; and
    an older block's exit around it leaves its own."""

    async def scenario() -> None:
        lock = cls(NAME, ttl=5, wait=0)

        async def steps() -> Any:
            async with lock:
                yield 1
                yield 2

        async def step(generator: Any) -> Any:
            return await anext(generator, "done")

        generator = steps()
        async with lock:
            assert await step(generator) == 1
        assert len(lock._blocks) == 1, "the older block is left"
        assert not _another_gets_in(), "the generator's block was given up"
        assert await asyncio.create_task(step(generator)) == 2
        assert await asyncio.create_task(step(generator)) == "done"
        assert not lock._blocks

    asyncio.run(scenario())
    _nothing_left(r, "an async generator's block left by another task")


class _CheckingLock(Lock):
    checking = False

    @wrapped
    def __enter__(self) -> Any:
        entered = super().__enter__()
        if not self.checking:  # (a protected step in a block of its own, as 76a's exit)
            self.checking = True
            try:
                with self:
                    pass
            finally:
                self.checking = False
        return entered


class _TwoSlots(Semaphore):
    """A weighted entry: two slots for each block."""

    def __enter__(self) -> Any:
        super().__enter__()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        try:
            super().__exit__(*exc)
        finally:
            super().__exit__(*exc)


@pytest.mark.timeout(30)
def test_blocks_an_entry_hook_enters_itself_are_its_own_not_leftovers(r: redis.Redis) -> None:
    """Review 83a, F1 and F2 (HIGH): an entry hook that enters the object again -- a
    ``with self:`` inside it, ``super().__enter__()`` twice -- reached the base's from the
    very ``with`` statement's place, and the second entry took the first block for a
    leftover of that statement (one left open by an interrupt) and gave it up: the body ran
    holding nothing, or one slot of two."""
    lock = _CheckingLock(NAME, ttl=5, wait=0)
    with lock:
        assert len(lock._blocks) == 1
        assert not _another_gets_in(), "the lock was given up before its body ran"
    assert not lock._blocks
    slots = _TwoSlots(NAME, limit=2, ttl=5, wait=0)
    with slots:
        assert slots.holders() == 2, "a slot was given up before the body ran"
    assert not slots._blocks
    _nothing_left(r, "entry hooks that enter their object again")


@pytest.mark.timeout(30)
def test_an_async_entry_hook_entering_itself_keeps_its_blocks(r: redis.Redis) -> None:
    """:func:`test_blocks_an_entry_hook_enters_itself_are_its_own_not_leftovers` for asyncio."""

    class Checking(AsyncLock):
        checking = False

        @awrapped
        async def __aenter__(self) -> Any:
            entered = await super().__aenter__()
            if not self.checking:
                self.checking = True
                try:
                    async with self:
                        pass
                finally:
                    self.checking = False
            return entered

    async def scenario() -> None:
        lock = Checking(NAME, ttl=5, wait=0)
        async with lock:
            assert len(lock._blocks) == 1
            assert not _another_gets_in(), "the lock was given up before its body ran"
        assert not lock._blocks

    asyncio.run(scenario())
    _nothing_left(r, "an async entry hook that enters its object again")


class _Partnered(Lock):
    """Each object's entry does a protected step on a partner of its class (guarded against
    recursion): A's entry enters B, whose entry enters A again."""

    partner: _Partnered
    stepping = False

    def __enter__(self) -> Any:
        entered = super().__enter__()
        if not self.stepping:
            self.stepping = True
            try:
                with self.partner:
                    pass
            finally:
                self.stepping = False
        return entered


@pytest.mark.timeout(30)
def test_an_object_entered_again_inside_a_partners_entry_hook_keeps_its_block(
    r: redis.Redis,
) -> None:
    """Review 84a, F1 (HIGH): the mark of a running entry hook was one per thread, so A's
    entry hook, entering B, whose hook entered A again, lost A's mark to B's: A's inner entry
    took A's first block for a leftover of the statement and gave it up -- the body of
    ``with A:`` ran holding nothing, silently. Each object keeps its own mark."""
    a, b = _Partnered(NAME, ttl=5, wait=0), _Partnered(NAME + "-b", ttl=5, wait=0)
    a.partner, b.partner = b, a
    with a:
        assert len(a._blocks) == 1 and not b._blocks
        assert not _another_gets_in(), "A was given up before its body ran"
    assert not a._blocks
    _nothing_left(r, "partners entering each other in their entry hooks")


def test_a_lock_cannot_be_copied() -> None:
    """Review 84a, F3 (MEDIUM): a copy shared the original's leases and blocks, and renewed
    its own only while the original lived (a deep copy's lease was lost a ttl after the
    original was collected). As threading.Lock, it refuses."""
    for obj in (Lock(NAME), Semaphore(NAME, limit=2), AsyncLock(NAME)):
        with pytest.raises(TypeError, match="cannot be copied"):
            copy.copy(obj)
        with pytest.raises(TypeError, match="cannot be copied"):
            copy.deepcopy({"settings": [obj]})


def _hook_lines(run: Callable[[], Any], hook: str = "__enter__") -> list[tuple[Any, int]]:
    """The line events, in order, of the frames of overriding()'s wrappers that ``run``
    passes through, and of the user's hooks (named ``hook``) inside them."""
    seen: list[tuple[Any, int]] = []

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            seen.append((frame.f_code, frame.f_lineno))
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code in ownership._HOOK_CODES or frame.f_code.co_name == hook:
            return local
        return None

    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    return seen


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls", [_WrappedEnterLock, _TwoSlots], ids=lambda cls: cls.__name__)
def test_an_interrupt_at_every_line_of_an_entry_hook_leaves_nothing_held(
    r: redis.Redis, cls: type[Any]
) -> None:
    """Review 84a, F2 (MEDIUM) and F4: a signal raised as a call returned in overriding()'s
    entry wrapper -- the hook's own, the ContextVar's set or reset -- after the base's
    entry had taken the lock, raised out of ``__enter__``: no ``__exit__`` came, and the
    block stayed held and renewed (a real SIGALRM did it, 3 runs in 4000); one as the mark
    was set left it set for good. A KeyboardInterrupt at every line of the wrappers and the
    hook (where a real signal can land) leaves nothing held, renewed or marked."""

    def make() -> Any:
        return cls(NAME, limit=2, ttl=5, wait=0) if cls is _TwoSlots else cls(NAME, ttl=5, wait=0)

    def enter_and_leave() -> None:
        with make():
            pass

    lines = _hook_lines(enter_and_leave)
    assert len(lines) > 3
    cut = 0
    for line in lines:
        obj = make()
        cut += _entered_cut_at(obj, line)
        assert ownership._ENTERING.get() == (), f"the mark stayed set after a cut at {line}"
        assert not [block for block in obj._blocks if block.open], f"left open: {line}"
        _nothing_left(r, f"a cut at {line[0].co_name}:{line[1]}")
    assert cut > 3


def _entered_cut_at(obj: Any, line: tuple[Any, int], through_exit: bool = False) -> bool:
    """``with obj: pass``, a KeyboardInterrupt raised at the first line event of ``line``
    (unless no real signal can land there) in its entry, or ``through_exit`` in its exit
    too; whether it was cut."""
    fired: list[bool] = []

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and not fired and (frame.f_code, frame.f_lineno) == line:
            fired.append(True)
            if not signal_cannot_land(frame.f_code, frame.f_lineno, frame.f_lasti):
                raise KeyboardInterrupt
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if not fired else None

    sys.settrace(tracer)
    try:
        with obj:
            if not through_exit:
                sys.settrace(None)
    except KeyboardInterrupt:
        return True
    finally:
        sys.settrace(None)
    return False


class _AuditedLock(Lock):
    """An exit hook that does something of its own before the base's (a metric, a log)."""

    left = 0

    @wrapped
    def __exit__(self, *exc: Any) -> Any:
        type(self).left += 1
        return super().__exit__(*exc)


@pytest.mark.timeout(120)
def test_an_interrupt_at_every_line_of_an_exit_hook_leaves_nothing_held(r: redis.Redis) -> None:
    """Review 85a, F1 (MEDIUM): an exit hook cut before it reached ``super().__exit__()`` --
    a signal as its own log call returned, or in overriding()'s wrapper -- left its block
    open, held and renewed after the statement was over (21 of 30 cuts). The wrapper now gives
    that block up. Not the exit's very first instruction, before any code runs: stated in
    GUARANTEES, that block is closed by the statement's next entry."""

    def enter_and_leave() -> None:
        with _AuditedLock(NAME, ttl=5, wait=0):
            pass

    lines = [
        line
        for line in _hook_lines(enter_and_leave, "__exit__")
        # (the exit's first instruction, stated: the wrapper's lines up to its try -- 3.10
        # runs no signal handler before a SETUP_FINALLY, 3.11+ none at a NOP)
        if not (line[0] in ownership._HOOK_CODES and line[1] <= line[0].co_firstlineno + 2)
    ]
    assert len(lines) > 3
    cut = 0
    for line in lines:
        obj = _AuditedLock(NAME, ttl=5, wait=0)
        cut += _entered_cut_at(obj, line, through_exit=True)
        assert not [block for block in obj._blocks if block.open], f"left open: {line}"
        _nothing_left(r, f"a cut at {line[0].co_name}:{line[1]}")
    assert cut > 3


@pytest.mark.timeout(30)
def test_a_cancel_inside_an_async_exit_hook_before_the_base_leaves_nothing_held(
    r: redis.Redis,
) -> None:
    """Review 85a, F1: a cancel (a timeout) landing in an ``await`` of the subclass's own
    ``__aexit__`` before ``super().__aexit__()`` left the lock held for as long as the task
    lived."""

    class Flushing(AsyncLock):
        async def __aexit__(self, *exc: Any) -> Any:
            await asyncio.sleep(0.2)  # (a flush before letting go)
            return await super().__aexit__(*exc)

    async def scenario() -> None:
        lock = Flushing(NAME, ttl=5, wait=0)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.1):
                async with lock:
                    pass
        assert not [block for block in lock._blocks if block.open]
        assert _another_gets_in(), "the lock stayed held after its block"

    if sys.version_info < (3, 11):
        pytest.skip("asyncio.timeout() is 3.11's")
    asyncio.run(scenario())
    _nothing_left(r, "a cancel inside an async exit hook")


class _FlushingLock(Lock):
    """An exit hook whose own work before the base's fails (a flush to a remote store)."""

    def __exit__(self, *exc: Any) -> Any:
        raise OSError("flush failed")


class _FlushingSemaphore(Semaphore):
    def __exit__(self, *exc: Any) -> Any:
        raise OSError("flush failed")


@pytest.mark.timeout(30)
def test_an_exit_hook_raising_before_the_base_gives_a_stack_entrys_block_up(
    r: redis.Redis,
) -> None:
    """Review 86a, F1 (MEDIUM): 85a F1's fix covered a ``with`` statement's block only. Entered
    through an ExitStack, the exit runs as the stack's exit, whose path gave nothing up: the
    block stayed held and renewed until the collector freed the error's traceback -- for good
    while the error was kept (a retry library's last outcome). Collection is off here, and
    the errors are kept."""
    kept = []
    gc.disable()
    try:
        for obj in (_FlushingLock(NAME, ttl=5, wait=0), _FlushingSemaphore(NAME, limit=1, ttl=5)):
            with (
                pytest.raises(OSError, match="flush failed") as raised,
                contextlib.ExitStack() as stack,
            ):
                stack.enter_context(obj)
            kept.append(raised.value)
            assert not [block for block in obj._blocks if block.open], f"{obj!r}: left open"
            _nothing_left(r, f"{type(obj).__name__}'s exit hook raising through a stack")
    finally:
        gc.enable()


@pytest.mark.timeout(30)
def test_an_async_exit_hook_raising_before_the_base_gives_a_stack_entrys_block_up(
    r: redis.Redis,
) -> None:
    """:func:`test_an_exit_hook_raising_before_the_base_gives_a_stack_entrys_block_up` for an
    AsyncExitStack."""

    class Flushing(AsyncLock):
        async def __aexit__(self, *exc: Any) -> Any:
            raise OSError("flush failed")

    async def scenario() -> OSError:
        obj = Flushing(NAME, ttl=5, wait=0)
        with pytest.raises(OSError, match="flush failed") as raised:
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(obj)
        assert not [block for block in obj._blocks if block.open], "left open"
        return raised.value

    gc.disable()
    try:
        kept = asyncio.run(scenario())
        _nothing_left(r, "an async exit hook raising through a stack")
    finally:
        gc.enable()
    assert isinstance(kept, OSError)


@pytest.mark.timeout(30)
def test_an_async_adapter_on_a_sync_subclass_raises_its_own_errors(r: redis.Redis) -> None:
    """Review 86a, F2 (LOW): ``async def __aenter__(self): return self.__enter__()`` on a sync
    Lock's subclass is wrapped as an async entry hook, whose clean-up awaited the sync
    object's (None): a busy lock raised ``TypeError: object NoneType can't be used in 'await'
    expression``, not LockNotAcquired, and an exit hook's own error was replaced the same
    way."""

    class AsyncCompat(Lock):
        async def __aenter__(self) -> Any:
            return self.__enter__()

        async def __aexit__(self, *exc: Any) -> Any:
            return self.__exit__(*exc)

    class Flushing(Lock):
        async def __aenter__(self) -> Any:
            return self.__enter__()

        async def __aexit__(self, *exc: Any) -> Any:
            raise OSError("flush failed")

    async def scenario() -> None:
        holder = Lock(NAME, ttl=5, wait=0)
        assert holder.acquire()
        try:
            with pytest.raises(LockNotAcquired):
                async with AsyncCompat(NAME, ttl=5, wait=0):
                    pass
        finally:
            holder.release()
        async with AsyncCompat(NAME, ttl=5, wait=0):
            assert not _another_gets_in()
        flushing = Flushing(NAME, ttl=5, wait=0)
        with pytest.raises(OSError, match="flush failed"):
            async with flushing:
                pass
        assert not flushing._blocks

    asyncio.run(scenario())
    _nothing_left(r, "an async adapter on a sync subclass")


class _Counted(Lock):
    exits = 0

    def __exit__(self, *exc: Any) -> Any:
        type(self).exits += 1
        return super().__exit__(*exc)


class _Validating(_Counted):
    """An entry hook that refuses after entering (a check of its own)."""

    def __enter__(self) -> Any:
        super().__enter__()
        raise ValueError("refused")


@pytest.mark.timeout(30)
def test_a_subclass_exit_hook_runs_once_per_stack_entry_and_never_for_a_refused_one(
    r: redis.Redis,
) -> None:
    """Review 86a, F3 (LOW): a block entered through an ExitStack has two exits on the stack
    (the second for an interrupt in contextlib's window), and each ran the subclass's own
    exit hook: twice per entry -- a hook pairing the block with a local lock released it
    twice, the second time another thread's -- and once for an entry its hook refused, which
    Python never exits."""
    before = _Counted.exits
    with contextlib.ExitStack() as stack:
        stack.enter_context(_Counted(NAME, ttl=5, wait=0))
    assert _Counted.exits - before == 1
    before = _Counted.exits
    with contextlib.ExitStack() as stack, pytest.raises(ValueError, match="refused"):
        stack.enter_context(_Validating(NAME, ttl=5, wait=0))
    assert _Counted.exits == before, "an exit hook ran for an entry its hook refused"
    _nothing_left(r, "exit hooks through a stack")


@pytest.mark.timeout(30)
def test_a_weighted_entry_through_a_stack_leaves_both_blocks_at_its_close(
    r: redis.Redis,
) -> None:
    """Review 85a, F2 (stated as a limit until found again by test_hook_shapes): an entry
    hook that enters twice, entered through an ExitStack -- the second block had no exit of
    its own, and the hook's two ``super().__exit__()`` ended the first twice: the second
    slot stayed held and renewed while the thread lived. It now shares the first's exits."""
    slots = _TwoSlots(NAME, limit=2, ttl=5, wait=0)
    with contextlib.ExitStack() as stack:
        stack.enter_context(slots)
        assert slots.holders() == 2
    assert not slots._blocks
    handed_out = _TwoSlots(NAME, limit=2, ttl=5, wait=0)
    with contextlib.ExitStack() as stack:
        stack.enter_context(handed_out)
        handed = stack.pop_all()
    _in_thread(handed.close)
    assert not handed_out._blocks
    _nothing_left(r, "a weighted entry through a stack")


def _step(obj: Any) -> None:
    """A protected step of an entry hook's own: a ``with obj:`` inside it (not recursing)."""
    if not obj.stepping:
        obj.stepping = True
        try:
            with obj:
                pass
        finally:
            obj.stepping = False


class _Stepping:
    """A mixin whose entry hook has a protected step of its own (a ``with self:`` inside it)."""

    stepping = False

    def __enter__(self) -> Any:
        entered = super().__enter__()  # type: ignore[misc]
        _step(self)
        return entered


class _SteppingLock(_Stepping, Lock):
    pass


@pytest.mark.timeout(30)
def test_a_stack_dropped_unclosed_is_given_up_without_the_cyclic_collector(
    r: redis.Redis,
) -> None:
    """Found by test_hook_shapes: the check of whether a stack's exit can still run looked
    at the running frames, this thread's from its own -- which its locals then held: a cycle
    that kept every frame above it, and the stack a caller dropped unclosed, until the
    cyclic collector ran; the block stayed held and renewed meanwhile."""

    def hand_out() -> None:
        stack = contextlib.ExitStack()
        stack.enter_context(_SteppingLock(NAME, ttl=5, wait=0))  # (its step asks that check)
        # the stack is dropped here, unclosed: the block goes with it

    gc.disable()
    try:
        hand_out()
        _nothing_left(r, "a stack dropped unclosed")
    finally:
        gc.enable()


@pytest.mark.timeout(30)
def test_a_stack_dropped_unclosed_under_a_tracer_is_given_up_without_the_cyclic_collector(
    r: redis.Redis,
) -> None:
    """The same under a Python trace function (a debugger's): Python 3.10 then copies each
    traced frame's locals into a dict it keeps, and that check's loop over the exit's
    referrers took the dict itself as one, a dict holding itself and the frames above: the
    block stayed held until the cyclic collector ran (CI's 3.10 leg, test_hook_shapes)."""

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return tracer

    def hand_out() -> None:
        stack = contextlib.ExitStack()
        stack.enter_context(_SteppingLock(NAME, ttl=5, wait=0))

    gc.disable()
    sys.settrace(tracer)
    try:
        hand_out()
    finally:
        sys.settrace(None)
    try:
        _nothing_left(r, "a stack dropped unclosed under a tracer")
    finally:
        gc.enable()


class _TwoSlotsStepping(_Stepping, _TwoSlots):
    """A weighted entry with a protected step of its own inside it."""


@pytest.mark.timeout(30)
def test_a_weighted_entry_through_a_stack_leaves_no_block_without_an_exit(r: redis.Redis) -> None:
    """The second block of a weighted entry through an ExitStack has the first's exits
    (test_hook_shapes found the step): without, the entry hook's own ``with self:`` step
    inside it could not tell its block from that one, and raised LockError."""
    slots = _TwoSlotsStepping(NAME, limit=4, ttl=5, wait=0)
    with contextlib.ExitStack() as stack:
        stack.enter_context(slots)
        assert slots.holders() == 2
    assert not slots._blocks
    _nothing_left(r, "a weighted entry with a step through a stack")


@pytest.mark.timeout(30)
def test_a_base_exit_shielded_in_a_task_of_its_own_ends_the_statements_block(
    r: redis.Redis,
) -> None:
    """Review 87a, F2 (MEDIUM): ``await asyncio.shield(super().__aexit__(*exc))`` runs the
    base's exit in a task of its own, where no frame of the statement is: it raised
    LockError in place of a cancel that came in the body (the CancelledError lost), or, with
    a block on the semaphore entered by hand by a task that had ended, silently ended that
    block -- its work going on without its slot -- and kept its own. The block the
    subclass's exit is leaving now reaches the base's exit through the task's context."""

    class Shielded(AsyncSemaphore):
        async def __aexit__(self, *exc: Any) -> Any:
            return await asyncio.shield(super().__aexit__(*exc))

    async def scenario() -> None:
        sem = Shielded(NAME, limit=2, ttl=5, wait=0)

        async def cancelled_inside() -> None:
            async with sem:
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                await asyncio.sleep(0.01)

        with pytest.raises(asyncio.CancelledError):
            await cancelled_inside()
        assert not sem._blocks and await sem.holders() == 0

        async def hand_entry() -> None:
            await sem.__aenter__()  # (by hand, in a task that ends: a handed-out block)

        await asyncio.create_task(hand_entry())
        handed = sem._blocks[0]
        async with sem:
            pass
        assert sem._blocks == [handed] and handed.open, "the handed-out block was ended"
        await asyncio.create_task(sem.__aexit__(None, None, None))  # (its by-hand exit)
        assert not sem._blocks

    asyncio.run(scenario())
    _nothing_left(r, "a shielded base exit")


class _ClosingExitLock(Lock):
    """An exit hook that closes a generator suspended in an older block of the object."""

    pending: Any = None

    def __exit__(self, *exc: Any) -> Any:
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.close()
        return super().__exit__(*exc)


@pytest.mark.timeout(30)
def test_an_older_blocks_exit_inside_an_exit_hook_ends_its_own_block(r: redis.Redis) -> None:
    """Review 88a, F1 (MEDIUM): every subclass exit passes the block it leaves to the base's
    exit (for one run in a task of its own, 87a F2); another exit of the object inside the
    hook -- a generator suspended in an older block, closed (or collected) there -- took it:
    the statement's block ended twice over, and the generator's stayed held for good."""
    obj = _ClosingExitLock(NAME, ttl=5, wait=0)

    def suspended() -> Iterator[None]:
        with obj:
            yield

    gen = suspended()
    next(gen)
    obj.pending = gen
    with obj:
        pass
    assert not obj._blocks, "the generator's block stayed open"
    _nothing_left(r, "a generator closed inside an exit hook")


class _AdvancingLock(Lock):
    """An entry hook that advances a generator entering the object, and an exit hook that
    raises after the base's (an audit that fails)."""

    gen: Any = None
    fail = False

    def __enter__(self) -> Any:
        entered = super().__enter__()
        gen, self.gen = self.gen, None
        if gen is not None:
            next(gen)  # (it enters `with self:` and stays there)
        return entered

    def __exit__(self, *exc: Any) -> Any:
        left = super().__exit__(*exc)
        if self.fail:
            raise OSError("audit failed")
        return left


@pytest.mark.timeout(30)
def test_a_generators_block_started_inside_an_entry_hook_is_its_own(r: redis.Redis) -> None:
    """Review 88a, F2 (HIGH): a generator advanced inside an entry hook, entering the object,
    was taken for the hook's helper -- its block for the statement's: when the exit hook
    raised, it was given up with the statement's, and another thread got in while the
    generator ran on inside its block, told nothing."""
    obj = _AdvancingLock(NAME, ttl=5, wait=0)
    inside: list[bool] = []

    def steps() -> Iterator[None]:
        with obj:
            yield
            inside.append(_another_gets_in())
            yield

    gen = steps()
    obj.gen, obj.fail = gen, True
    with pytest.raises(OSError, match="audit failed"), obj:
        pass
    obj.fail = False
    next(gen)
    assert inside == [False], "another thread got in beside the generator's block"
    gen.close()
    _nothing_left(r, "a generator's block started inside an entry hook")


class _ProbingExitLock(Lock):
    """An exit hook with a protected step of its own through the base's hooks by hand."""

    def __exit__(self, *exc: Any) -> Any:
        Lock.__enter__(self)
        Lock.__exit__(self, None, None, None)
        return super().__exit__(*exc)


@pytest.mark.timeout(30)
def test_a_step_inside_a_stack_exits_hook_leaves_its_own_block(r: redis.Redis) -> None:
    """Review 76a, F1, by the base's hooks called by hand: the stack's exit the hook runs as
    is for the base's exit of its own block, not for that of a block entered inside the
    hook (which it ended in place of the stack's, the step's staying held)."""
    obj = _ProbingExitLock(NAME, ttl=5, wait=0)
    with contextlib.ExitStack() as stack:
        stack.enter_context(obj)
        handed = stack.pop_all()
    handed.close()
    assert not obj._blocks
    _nothing_left(r, "a step inside a stack exit's hook")

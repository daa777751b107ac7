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
import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import wrapt
from support.interrupts import signal_cannot_land

from redlock_deco import Lock, LockNotAcquired, Semaphore
from redlock_deco import _ownership as ownership
from redlock_deco import _renewal as renewal
from redlock_deco.asyncio import Lock as AsyncLock

NAME = "wrapped-hooks"


def _wrapped(method: Any) -> Any:
    """A decorator of the kind users put on methods (logging, tracing): its own frame."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    return wrapper


def _awrapped(method: Any) -> Any:
    """:func:`_wrapped` for a coroutine function."""

    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await method(*args, **kwargs)

    return wrapper


class _WrappedExitLock(Lock):
    @_wrapped
    def __exit__(self, *exc: Any) -> Any:
        return super().__exit__(*exc)


class _WrappedEnterLock(Lock):
    @_wrapped
    def __enter__(self) -> Any:
        return super().__enter__()


def _leave(lock: Lock, *exc: Any) -> Any:
    return Lock.__exit__(lock, *exc)  # (read off the class: a plain exit, see run_as)


class _HelperExitLock(Lock):
    def __exit__(self, *exc: Any) -> Any:
        return _leave(self, *exc)


class _TwoLevelLock(_WrappedExitLock):
    @_wrapped
    def __exit__(self, *exc: Any) -> Any:
        return super().__exit__(*exc)


class _ReenteringExitLock(Lock):
    flushing = False

    @_wrapped
    def __exit__(self, *exc: Any) -> Any:
        if not self.flushing:  # (a last step under the lock, in a block of its own: 76a's)
            self.flushing = True
            try:
                with self:
                    pass
            finally:
                self.flushing = False
        return super().__exit__(*exc)


class _Traced:
    """A method decorator written as a class (a descriptor), as some tracing libraries do."""

    def __init__(self, method: Any) -> None:
        functools.update_wrapper(self, method)
        self.method = method

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        return self if obj is None else functools.partial(self.method, obj)


class _ClassDecoratedExitLock(Lock):
    @_Traced
    def __exit__(self, *exc: Any) -> Any:
        return super().__exit__(*exc)


@wrapt.decorator
def _wrapt_logged(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return wrapped(*args, **kwargs)


class _WraptDecoratedExitLock(Lock):
    @_wrapt_logged
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
    wrapt.wrap_function_wrapper(_patched, "__exit__", lambda call, _, args, kw: call(*args, **kw))
_AssignedExitLock.__exit__ = _wrapped(_AssignedExitLock.__dict__["__exit__"])  # type: ignore[method-assign]


class _WrappedAsyncExitLock(AsyncLock):
    @_awrapped
    async def __aexit__(self, *exc: Any) -> Any:
        return await super().__aexit__(*exc)


class _WrappedAsyncEnterLock(AsyncLock):
    @_awrapped
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
    """Run ``fn`` in another thread: its result, or its exception raised here."""
    out: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            out.append((True, fn()))
        except BaseException as exc:  # (a LockError is what the test looks for)
            out.append((False, exc))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(10)
    assert out, "the thread did not finish"
    ok, value = out[0]
    if not ok:
        raise value
    return value


def _another_gets_in() -> bool:
    def attempt() -> bool:
        try:
            with Lock(NAME, ttl=5, wait=0):
                return True
        except LockNotAcquired:
            return False

    return bool(_in_thread(attempt))


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

    @_wrapped
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

        @_awrapped
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

    @_wrapped
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

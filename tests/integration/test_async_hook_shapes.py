"""test_hook_shapes.py for asyncio: subclass ``__aenter__``/``__aexit__`` hooks of drawn shapes,
entered by ``async with`` (nested, by hand, an AsyncExitStack handed out, an async generator),
ended by this task or another, and cancelled at a drawn turn of the event loop -- a cancel lands
where the statement awaits, so each turn of the loop is one place it can land.

Whatever the draw: without a fault or a cancel, the body runs holding what the hook entered;
a hook's own exception comes out of the statement; a cancel that reached the task is never
lost (the statement raises CancelledError, or the hook's own exception); and once the
statement is over, while its loop still runs, nothing of it is held, open or marked. (Checked
inside the loop: a loop's shutdown gives back what its tasks held, which would hide a block
left open.)

The hooks reach the base's directly, through a decorator's wrapper, a helper of their own or
a mixin, or are an ``async with`` adapter on a sync primitive's subclass (review 86a, F2).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from hypothesis import example, settings
from support import hook_grammar as grammar
from support.elsewhere import another_gets_in
from support.hook_grammar import LIMIT, HookError, Shape, entry_raises, fault
from support.user_decorators import awrapped

from redlock_deco import Lock, Semaphore, current_lease
from redlock_deco import _ownership as ownership
from redlock_deco.asyncio import Lock as AsyncLock
from redlock_deco.asyncio import Semaphore as AsyncSemaphore

VIAS = ("direct", "decorator", "helper", "mixin", "adapter")


async def _step(obj: Any, step: str) -> None:
    """A protected step of an entry hook's own (not recursing)."""
    if step != "none" and not obj.stepping:
        obj.stepping = True
        try:
            async with obj if step == "self" else obj.partner:
                pass
        finally:
            obj.stepping = False


async def _enter_base(obj: Any, cls: type[Any]) -> Any:
    """A helper of the user's between the hook and the base's."""
    return await super(cls, obj).__aenter__()


async def _exit_base(obj: Any, cls: type[Any], exc: tuple[Any, ...]) -> Any:
    return await super(cls, obj).__aexit__(*exc)


def _direct(shape: Shape, base: type[Any]) -> type[Any]:
    class Direct(base):  # type: ignore[valid-type,misc]
        stepping = False
        partner: Any = None

        async def __aenter__(self) -> Any:
            fault(shape.enter_fault, "before", "entry")
            for _ in range(shape.times):
                entered = await super().__aenter__()
            if shape.step != "none" and not self.stepping:
                self.stepping = True
                try:
                    async with self if shape.step == "self" else self.partner:
                        pass
                finally:
                    self.stepping = False
            fault(shape.enter_fault, "after", "entry")
            return entered

        async def __aexit__(self, *exc: Any) -> Any:
            fault(shape.exit_fault, "before", "exit")
            try:
                left = await super().__aexit__(*exc)
            finally:
                if shape.times == 2:
                    await super().__aexit__(*exc)
            fault(shape.exit_fault, "after", "exit")
            return left

    return Direct


def _through(shape: Shape, enter_base: Any, exit_base: Any) -> tuple[Any, Any]:
    """Hooks that reach the base's through ``enter_base(self)`` / ``exit_base(self, exc)``."""

    async def aenter(self: Any) -> Any:
        fault(shape.enter_fault, "before", "entry")
        for _ in range(shape.times):
            entered = await enter_base(self)
        await _step(self, shape.step)
        fault(shape.enter_fault, "after", "entry")
        return entered

    async def aexit(self: Any, *exc: Any) -> Any:
        fault(shape.exit_fault, "before", "exit")
        try:
            left = await exit_base(self, exc)
        finally:
            if shape.times == 2:
                await exit_base(self, exc)
        fault(shape.exit_fault, "after", "exit")
        return left

    aenter.__name__, aexit.__name__ = "__aenter__", "__aexit__"
    return aenter, aexit


async def _adapted_enter(obj: Any) -> Any:
    return obj.__enter__()  # (an ``async with`` adapter on a sync primitive's subclass)


async def _adapted_exit(obj: Any, exc: tuple[Any, ...]) -> Any:
    return obj.__exit__(*exc)


@functools.cache
def build(shape: Shape) -> type[Any]:
    if shape.via == "adapter":
        base: type[Any] = Lock if shape.kind == "lock" else Semaphore
        aenter, aexit = _through(shape, _adapted_enter, _adapted_exit)
        body = {"stepping": False, "partner": None, "__aenter__": aenter, "__aexit__": aexit}
        cls: type[Any] = type("Adapted", (base,), body)
    elif shape.via == "direct":
        cls = _direct(shape, AsyncLock if shape.kind == "lock" else AsyncSemaphore)
    else:
        base = AsyncLock if shape.kind == "lock" else AsyncSemaphore
        made: list[type[Any]] = []
        aenter, aexit = _through(
            shape,
            lambda obj: _enter_base(obj, made[0]),
            lambda obj, exc: _exit_base(obj, made[0], exc),
        )
        if shape.via == "decorator":
            aenter, aexit = awrapped(aenter), awrapped(aexit)
        hooks = {"__aenter__": aenter, "__aexit__": aexit}
        cls = grammar.subclass(base, hooks, shape.via, made)
    cls.__name__ = cls.__qualname__ = f"async-{shape.kind}-{shape.via}"
    return cls


# -- one statement, observed, in a loop that outlives it ----------------------------------

_names = itertools.count()


@dataclass
class Run(grammar.Run):
    cancelled: bool = False  # a cancel reached the task (Task.cancel() said so)
    turns: int = 0  # the loop's turns the statement took


async def _inside(obj: Any) -> AsyncIterator[None]:
    async with obj:
        yield


async def _ended(run: Run, step: Callable[[], Awaitable[Any]]) -> Any:
    if run.end == "elsewhere":  # (a task of its own)
        return await asyncio.ensure_future(step())
    return await step()


async def _statement(run: Run, obj: Any, observe: Callable[[int], Awaitable[None]]) -> None:
    if run.entry == "with":
        async with obj:
            await observe(1)
    elif run.entry == "nested":
        async with obj:
            async with obj:
                await observe(2)
            await observe(1)
    elif run.entry == "by hand":
        await obj.__aenter__()
        try:
            await observe(1)
        finally:
            await obj.__aexit__(None, None, None)
    elif run.entry == "stack":
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(obj)
            handed = stack.pop_all()
        try:
            await observe(1)
        finally:
            await _ended(run, handed.aclose)
    else:
        gen = _inside(obj)
        await gen.__anext__()
        try:
            await observe(1)
        finally:
            if run.end == "leave":
                await anext(gen, None)
            await _ended(run, gen.aclose)


def _held(admin: redis.Redis, run: Run) -> int:
    """How many slots (a semaphore) or holders (a lock) the server has for ``run``'s name."""
    if run.shape.kind == "sem":
        return int(admin.zcard(f"sem:{run.name}"))
    return int(admin.exists(f"lock:{run.name}"))


async def run_statement(url: str, shape: Shape, entry: str, end: str, at: int | None) -> Run:
    """The statement in a task of its own, cancelled at the ``at``-th turn of the loop (None:
    not cancelled, and ``turns`` counted); then what is left, while the loop runs."""
    run = Run(shape, entry, end, f"async-hook-shapes-{next(_names)}")
    cls = build(shape)
    args: dict[str, Any] = {"ttl": 5, "wait": 0}
    if shape.kind == "sem":
        args["limit"] = LIMIT
    obj, partner = cls(run.name, **args), cls(run.name + "-partner", **args)
    obj.partner, partner.partner = partner, obj
    admin = redis.Redis.from_url(url)
    try:

        async def observe(depth: int) -> None:
            assert current_lease(None) is not None, f"{run}: no current lease in the body"
            if shape.kind == "lock":
                assert not another_gets_in(run.name), f"{run}: another holder got in"
            else:
                held = _held(admin, run)
                assert held == depth * shape.times, f"{run}: {held} slots held in the body"
            run.observed.append(depth)

        task = asyncio.ensure_future(_statement(run, obj, observe))
        while not task.done():
            await asyncio.sleep(0)  # (one turn of the loop)
            run.turns += 1
            if run.turns == at:
                run.cancelled = task.cancel()
        try:
            task.result()
        except (HookError, asyncio.CancelledError) as exc:
            run.raised = exc
        del task  # (it keeps its exception, whose frames keep what the statement dropped)
        chained = run.raised
        while chained is not None:
            chained.__traceback__ = None
            chained = chained.__context__
        await _left(admin, run, [obj, partner])
    finally:
        admin.close()
    return run


async def _left(admin: redis.Redis, run: Run, objs: list[Any]) -> None:
    what = f"{run} (left)"
    assert ownership._ENTERING.get() == (), f"{what}: the entering mark stayed set"
    deadline = time.monotonic() + 2
    while _held(admin, run) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)  # (a give-back handed to a task of its own: a moment)
    assert not _held(admin, run), f"{what}: still held"
    for obj in objs:
        assert not [block for block in obj._blocks if block.open], f"{what}: a block left open"


def _expected(run: Run) -> None:
    shape = run.shape
    faults = shape.enter_fault != "none" or shape.exit_fault != "none"
    if run.cancelled:
        # (3.10 has no Task.cancelling(): a cancel redis-py drops as it sends a command is
        # lost -- stated in docs/asyncio.md, "Cancellation"; what it left is checked all the
        # same)
        lost = run.raised is None and sys.version_info < (3, 11)
        # (Before 3.13, CPython itself loses a cancel that reaches a task running an async
        # generator's aclose() before its first step, whatever the generator's context
        # manager: test_cancellation's test_a_cancel_lost_by_aclose_is_pythons_own)
        lost = lost or (
            run.raised is None
            and (run.entry, run.end) == ("generator", "elsewhere")
            and sys.version_info < (3, 13)
        )
        assert lost or isinstance(run.raised, (asyncio.CancelledError, HookError)), (
            f"{run}: the cancel was lost"
        )
        return
    assert not isinstance(run.raised, asyncio.CancelledError), f"{run}: cancelled by nobody"
    if not faults:
        assert run.raised is None and run.observed, f"{run}: raised, or the body never ran"
        return
    assert isinstance(run.raised, HookError), f"{run}: the hook's exception was lost"
    assert bool(run.observed) != entry_raises(shape), f"{run}: the body ran {run.observed}"


def check(url: str, shape: Shape, entry: str, end: str, fraction: float) -> None:
    async def scenario() -> None:
        counted = await run_statement(url, shape, entry, end, None)
        _expected(counted)
        cut = await run_statement(url, shape, entry, end, 1 + int(fraction * counted.turns))
        _expected(cut)

    with grammar.hook_errors_unreported():
        asyncio.run(scenario())


DRAWS = grammar.draws(VIAS)


@pytest.mark.timeout(300)
@settings(max_examples=100, **grammar.SETTINGS)  # type: ignore[arg-type]
@DRAWS
@example(Shape("lock", "direct", 1, "none", "none", "before"), ("stack", "here"), 0.0)
@example(Shape("lock", "adapter", 1, "none", "none", "none"), ("with", "here"), 0.5)
def test_async_hook_shapes(
    server: Any, shape: Shape, statement: tuple[str, str], fraction: float
) -> None:
    check(server.url, shape, *statement, fraction)


@pytest.mark.slow
@pytest.mark.timeout(900)
@settings(max_examples=1000, **grammar.SETTINGS)  # type: ignore[arg-type]
@DRAWS
def test_async_hook_shapes_long(
    server: Any, shape: Shape, statement: tuple[str, str], fraction: float
) -> None:
    check(server.url, shape, *statement, fraction)

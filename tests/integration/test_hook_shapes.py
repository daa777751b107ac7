"""Subclass hooks of every shape, searched rather than imagined.

Reviews 81a to 85a each found, by hand, one more shape of a subclass's own ``__enter__`` or
``__exit__`` that the ownership rules got wrong: a decorator's wrapper between the hook and the
base's, a helper, a decorator object, a hook patched on later, an entry hook entering its own
object again or a partner's, a hook that raises or is cut before or after the base's. Here the
shape is drawn from a small grammar (how the hook reaches the base's, how many times, what it
steps into, where it raises), and so is how the object is entered (a ``with``, nested, by hand,
an ExitStack handed out, a generator), who ends the block (this thread, another, a generator
step), and the line event (in the hooks, the package's wrappers and the primitive's code)
where a KeyboardInterrupt lands. Whatever the draw:

- without a fault or a cut, the body runs holding what the hook entered, no other holder gets
  in, and the statement ends with nothing raised;
- a hook's own exception comes out of the statement, and the body runs only if the entry
  returned;
- afterwards nothing of it is held, renewed, open on the objects or marked as entering.

Left out, as stated limits (docs/concepts.md, GUARANTEES.md): an interrupt at the first
instruction of an exit, before any code of the package runs (the next ``with`` of the
statement closes that block); a hook entering twice, entered through an ExitStack (85a, F2);
an interrupt while an entry hook's own exception is cleaned up (85a, F3: the object's
collection gives that up, which is checked instead).
"""

from __future__ import annotations

import contextlib
import dis
import functools
import gc
import itertools
import linecache
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import wrapt
from hypothesis import example, settings
from support import hook_grammar as grammar
from support import user_decorators
from support.elsewhere import another_gets_in, in_thread
from support.hook_grammar import LIMIT, HookError, Run, Shape, entry_raises, fault
from support.interrupts import signal_cannot_land
from support.user_decorators import Traced, passthrough, wrapped, wrapt_logged

from redlock_deco import Lock, Semaphore, current_lease
from redlock_deco import _ownership as ownership
from redlock_deco import _primitive as primitive
from redlock_deco import _renewal as renewal
from redlock_deco._lifecycle import Lease

VIAS = (
    "direct",  # super().__enter__() in the hook
    "decorator",  # the hook through a decorator's wrapper (logging, tracing)
    "helper",  # the hook calls a helper of its own that calls the base's
    "wrapt",  # a decorator object (wrapt's)
    "descriptor",  # a decorator written as a class
    "patched",  # instrumented once the class exists (wrapt.wrap_function_wrapper)
    "assigned",  # wrapped by hand once the class exists
    "mixin",  # the hooks are a plain mixin's, before the primitive
    "two levels",  # a subclass of the shape whose own hooks go through a wrapper
    "base patched",  # no hooks of its own: the base's, instrumented on the subclass
)


def _enter_base(obj: Any, cls: type[Any]) -> Any:
    """A helper of the user's between the hook and the base's."""
    return super(cls, obj).__enter__()


def _exit_base(obj: Any, cls: type[Any], exc: tuple[Any, ...]) -> Any:
    return super(cls, obj).__exit__(*exc)


def _step(obj: Any, step: str) -> None:
    """A protected step of an entry hook's own (not recursing): ``with`` the object itself or
    its partner."""
    if step != "none" and not obj.stepping:
        obj.stepping = True
        try:
            with obj if step == "self" else obj.partner:
                pass
        finally:
            obj.stepping = False


def _hooks(shape: Shape, owner: Callable[[], type[Any]]) -> tuple[Any, Any]:
    """The shape's ``__enter__`` and ``__exit__``; ``owner()`` is the class they are found on
    (for the helper's ``super()``)."""

    def enter(self: Any) -> Any:
        fault(shape.enter_fault, "before", "entry")
        for _ in range(shape.times):
            entered = _enter_base(self, owner())
        _step(self, shape.step)  # (in a helper: _direct_hooks has its step in the hook)
        fault(shape.enter_fault, "after", "entry")
        return entered

    def exit_(self: Any, *exc: Any) -> Any:
        fault(shape.exit_fault, "before", "exit")
        try:
            left = _exit_base(self, owner(), exc)
        finally:
            if shape.times == 2:
                _exit_base(self, owner(), exc)
        fault(shape.exit_fault, "after", "exit")
        return left

    enter.__name__, exit_.__name__ = "__enter__", "__exit__"
    return enter, exit_


def _direct_hooks(shape: Shape, base: type[Any]) -> type[Any]:
    """The shape with ``super()`` written in the hooks themselves (no helper frame)."""

    class Direct(base):  # type: ignore[valid-type,misc]
        stepping = False
        partner: Any = None

        def __enter__(self) -> Any:
            fault(shape.enter_fault, "before", "entry")
            for _ in range(shape.times):
                entered = super().__enter__()
            if shape.step != "none" and not self.stepping:
                self.stepping = True
                try:
                    with self if shape.step == "self" else self.partner:
                        pass
                finally:
                    self.stepping = False
            fault(shape.enter_fault, "after", "entry")
            return entered

        def __exit__(self, *exc: Any) -> Any:
            fault(shape.exit_fault, "before", "exit")
            try:
                left = super().__exit__(*exc)
            finally:
                if shape.times == 2:
                    super().__exit__(*exc)
            fault(shape.exit_fault, "after", "exit")
            return left

    return Direct


@functools.cache
def build(shape: Shape) -> type[Any]:
    """The subclass of Lock or Semaphore of ``shape``."""
    base: type[Any] = Lock if shape.kind == "lock" else Semaphore
    made: list[type[Any]] = []
    if shape.via == "base patched":
        cls: type[Any] = type("BasePatched", (base,), {"stepping": False, "partner": None})
        for hook in ("__enter__", "__exit__"):
            wrapt.wrap_function_wrapper(cls, hook, passthrough)
        return cls
    if shape.via in ("direct", "two levels"):
        cls = _direct_hooks(shape, base)
    else:
        enter, exit_ = _hooks(shape, lambda: made[0])
        decorate = {"decorator": wrapped, "wrapt": wrapt_logged, "descriptor": Traced}.get(
            shape.via, lambda hook: hook
        )
        hooks = {"__enter__": decorate(enter), "__exit__": decorate(exit_)}
        cls = grammar.subclass(base, hooks, shape.via, made)
    if shape.via == "patched":
        for hook in ("__enter__", "__exit__"):
            wrapt.wrap_function_wrapper(cls, hook, passthrough)
    elif shape.via == "assigned":
        for hook in ("__enter__", "__exit__"):
            setattr(cls, hook, wrapped(cls.__dict__[hook]))
    elif shape.via == "two levels":
        outer = cls

        class TwoLevels(outer):  # type: ignore[valid-type,misc]
            @wrapped
            def __enter__(self) -> Any:
                return super().__enter__()

            @wrapped
            def __exit__(self, *exc: Any) -> Any:
                return super().__exit__(*exc)

        cls = TwoLevels
    cls.__name__ = cls.__qualname__ = f"{shape.kind}-{shape.via}"
    return cls


# -- one statement, observed --------------------------------------------------------------

_names = itertools.count()


def _inside(obj: Any) -> Iterator[None]:
    with obj:
        yield


def _make(shape: Shape, name: str) -> tuple[Any, Any]:
    cls = build(shape)
    args: dict[str, Any] = {"ttl": 5, "wait": 0}
    if shape.kind == "sem":
        args["limit"] = LIMIT
    obj, partner = cls(name, **args), cls(name + "-partner", **args)
    obj.partner, partner.partner = partner, obj
    return obj, partner


def _observe(run: Run, obj: Any, depth: int) -> None:
    """Inside the body: the statement holds what its hook entered, and nobody else gets in."""
    __tracebackhide__ = True
    lease = current_lease(None)
    assert lease is not None, f"{run}: no current lease inside the body"
    if run.shape.kind == "lock":
        assert not another_gets_in(run.name), f"{run}: another holder got in beside the body"
    else:
        held = obj.holders()
        expected = depth * run.shape.times
        assert held == expected, f"{run}: {held} slots held inside the body, not {expected}"
    run.observed.append(depth)


def _ended(run: Run, step: Callable[[], Any]) -> Any:
    return in_thread(step) if run.end == "elsewhere" else step()


def _statement(run: Run, obj: Any, observe: Callable[[int], None]) -> None:
    """Enter ``obj`` as ``run.entry`` says, run the body, and end the block."""
    if run.entry == "with":
        with obj:
            observe(1)
    elif run.entry == "nested":
        with obj:
            with obj:
                observe(2)
            observe(1)
    elif run.entry == "by hand":
        obj.__enter__()
        try:
            observe(1)
        finally:
            obj.__exit__(None, None, None)
    elif run.entry == "stack":
        with contextlib.ExitStack() as stack:
            stack.enter_context(obj)
            handed = stack.pop_all()
        try:
            observe(1)
        finally:
            _ended(run, handed.close)
    else:
        gen = _inside(obj)
        next(gen)
        try:
            observe(1)
        finally:
            if run.end == "leave":
                next(gen, None)
            _ended(run, gen.close)


# The frames a cut may land in: the hooks and their helpers here, and the package's code that
# runs them (overriding()'s wrappers, the primitive's hooks, the ownership rules).
_HERE = {
    "__enter__",
    "__exit__",
    "enter",
    "exit_",
    "wrapper",
    "wrapt_logged",
    "passthrough",
    "_enter_base",
    "_exit_base",
    "_fault",
    "_step",
    "_inside",
    "_statement",
    "_ended",
}
_PACKAGE = {os.path.abspath(module.__file__ or "") for module in (ownership, primitive)}


def _watched(code: Any) -> bool:
    if code.co_filename in (__file__, user_decorators.__file__):
        return code.co_name in _HERE
    # (not a finalizer or a weakref's callback: Python reports what they raise, and goes on)
    return os.path.abspath(code.co_filename) in _PACKAGE and code.co_name not in _FINALIZERS


_FINALIZERS = {"__del__", "gone", "_collected_holding"}


def _first_of_an_exit(code: Any, line: int) -> bool:
    """An exit's first lines, before any code of the package runs (stated: the statement's
    next ``with`` closes the block): overriding()'s exit wrapper up to its ``try`` -- 3.10
    runs no signal handler before a SETUP_FINALLY, 3.11+ none at a NOP. (Every shape's exit,
    the base's patched on the subclass included, is reached through that wrapper.) And the
    lookup of ``obj.__exit__`` for an exit called by hand (ExitHook.__get__): cut there, the
    call never began, as a ``lock.release()`` cut before it in a ``finally``."""
    if code is ownership.ExitHook.__get__.__code__:
        return True
    return (
        code in ownership._HOOK_CODES
        and code.co_name == "exit_sync"
        and (line <= code.co_firstlineno + 2)
    )


def _setup_finally(code: Any, lasti: int) -> bool:
    """Python 3.10 runs no signal handler before a SETUP_FINALLY (a ``try:`` line there)."""
    return sys.version_info < (3, 11) and dis.opname[code.co_code[lasti]] == "SETUP_FINALLY"


def _handler_begins(code: Any, line: int) -> bool:
    """Whether ``line`` of ``code`` is where one of overriding()'s wrappers catches its hook's
    exception, before its clean-up begins: a signal landing there, as a hook's own exception
    is handled, leaves what the hook entered or left open until the object is collected
    (stated, docs/concepts.md)."""
    text = linecache.getline(code.co_filename, line).strip()
    return code in ownership._HOOK_CODES and text.startswith("except BaseException")


class Cut:
    """A KeyboardInterrupt at the ``at``-th line event of a watched frame (None: count them),
    unless no real signal can land there or a stated limit covers it."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.events = 0
        self.fired = False
        self.faulted = False  # a hook raised HookError (see _handler_begins)
        self.in_limit = False
        self.where = ""  # (where it fired, for the failure's message)

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "exception" and arg[0] is HookError:
            self.faulted = True
        if event != "line" or self.fired:
            return self.local
        self.events += 1
        if self.at is not None and self.events > self.at:
            self.fired = True
            code, line = frame.f_code, frame.f_lineno
            self.where = f"{os.path.basename(code.co_filename)}:{code.co_name}:{line}"
            if (
                signal_cannot_land(code, line, frame.f_lasti)
                or _first_of_an_exit(code, line)
                or _setup_finally(code, frame.f_lasti)
            ):
                return None
            self.in_limit = self.faulted and _handler_begins(code, line)
            raise KeyboardInterrupt
        return self.local

    def tracer(self, frame: Any, event: str, arg: Any) -> Any:
        if self.fired or not _watched(frame.f_code):
            return None
        return self.local


def run_statement(shape: Shape, entry: str, end: str, at: int | None) -> tuple[Run, Cut]:
    name = f"hook-shapes-{next(_names)}"
    run = Run(shape, entry, end, name)
    obj, partner = _make(shape, name)
    cut = Cut(at)

    def observe(depth: int) -> None:
        sys.settrace(None)  # (the checks are not cut)
        try:
            _observe(run, obj, depth)
        finally:
            sys.settrace(cut.tracer)

    sys.settrace(cut.tracer)
    try:
        _statement(run, obj, observe)
    except (HookError, KeyboardInterrupt) as exc:
        run.raised = exc
    finally:
        sys.settrace(None)
    chained = run.raised
    while chained is not None:  # (their frames keep the objects)
        chained.__traceback__ = None
        chained = chained.__context__
    objs = [obj, partner]
    if cut.in_limit:  # (stated: given up when the object is collected)
        del obj, partner, observe
        objs.clear()
        gc.collect()
        ownership._ENTERING.set(())  # (an entry hook's mark stays, for that object alone)
    _left(run, cut, objs)
    return run, cut


def _left(run: Run, cut: Cut, objs: list[Any]) -> None:
    """Nothing of the statement held, renewed, open or marked."""
    what = f"{run} (cut: {cut.fired and (cut.at, cut.where)})"
    assert ownership._ENTERING.get() == (), f"{what}: the entering mark stayed set"
    for obj in objs:
        assert not [block for block in obj._blocks if block.open], f"{what}: a block left open"
    admin = redis.Redis.from_url(SERVER_URL[0])
    try:
        deadline = time.monotonic() + 2
        while admin.keys(f"*{run.name}*") and time.monotonic() < deadline:
            time.sleep(0.02)  # (a give-back handed to the background: within a moment)
        assert not admin.keys(f"*{run.name}*"), f"{what}: still held"
    finally:
        admin.close()
    # (a Lease: a Cleanup left is a give-back whose release landed -- the key is gone -- and
    # whose round has not yet put it away: CI's interrupts leg, loaded)
    jobs = [job for job in renewal.renewer()._table.jobs.values() if isinstance(job, Lease)]
    assert not [job for job in jobs if run.name in job.key], f"{what}: still renewed"


def _expected(run: Run, cut: Cut) -> None:
    """What the statement should have raised, and whether its body ran."""
    what = f"{run} (cut: {cut.fired and (cut.at, cut.where)})"
    shape = run.shape
    faults = shape.enter_fault != "none" or shape.exit_fault != "none"
    if cut.fired and isinstance(run.raised, (KeyboardInterrupt, HookError)):
        return  # (an exit hook raising as the interrupt unwinds replaces it)
    assert not isinstance(run.raised, KeyboardInterrupt), f"{what}: raised, and nobody cut"
    if not faults:
        assert run.raised is None, f"{what}: raised {run.raised!r}"
        assert run.observed, f"{what}: the body never ran"
        return
    assert isinstance(run.raised, HookError), f"{what}: the hook's exception was lost"
    assert bool(run.observed) != entry_raises(shape), f"{what}: the body ran {run.observed}"


SERVER_URL: list[str] = []


@pytest.fixture(autouse=True)
def _server_url(server: Any) -> None:
    SERVER_URL[:] = [server.url]


def check(shape: Shape, entry: str, end: str, fraction: float) -> None:
    with grammar.hook_errors_unreported():
        run, count = run_statement(shape, entry, end, None)
        _expected(run, count)
        if count.events:
            run, cut = run_statement(shape, entry, end, int(fraction * count.events))
            _expected(run, cut)


DRAWS = grammar.draws(VIAS, bare="base patched")


@pytest.mark.timeout(300)
@settings(max_examples=150, **grammar.SETTINGS)  # type: ignore[arg-type]
@DRAWS
@example(Shape("sem", "decorator", 2, "partner", "after", "none"), ("with", "here"), 0.5)
@example(Shape("lock", "helper", 1, "self", "none", "before"), ("generator", "elsewhere"), 0.3)
@example(Shape("sem", "direct", 2, "none", "none", "before"), ("with", "here"), 0.0)
def test_hook_shapes(shape: Shape, statement: tuple[str, str], fraction: float) -> None:
    check(shape, *statement, fraction)


@pytest.mark.slow
@pytest.mark.timeout(900)
@settings(max_examples=1500, **grammar.SETTINGS)  # type: ignore[arg-type]
@DRAWS
def test_hook_shapes_long(shape: Shape, statement: tuple[str, str], fraction: float) -> None:
    check(shape, *statement, fraction)


# Shapes whose hooks raise, swept line by line: the clean-up of a hook's own exception,
# where a signal landing once left what the hook entered held (85a, F3), is cut at each line.
SWEPT = [
    (Shape("lock", "decorator", 1, "none", "after", "none"), "with"),
    (Shape("sem", "direct", 2, "none", "none", "before"), "with"),
    (Shape("lock", "helper", 1, "none", "none", "before"), "stack"),
]


@pytest.mark.interrupts
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("shape", "entry"), SWEPT, ids=lambda value: str(value)[:40])
def test_an_interrupt_at_every_line_of_a_raising_hooks_statement(shape: Shape, entry: str) -> None:
    with grammar.hook_errors_unreported():
        _, count = run_statement(shape, entry, "here", None)
        assert count.events > 100
        for at in range(count.events):
            run, cut = run_statement(shape, entry, "here", at)
            _expected(run, cut)

"""What a decorator was handed: the callable as its caller calls it.

``@locked`` takes functions and methods in a class body, but also bound methods
(``locked(...)(obj.meth)``), ``functools.partial`` objects, callable objects and functions under
other decorators. Three things differ between them, each decided once at decoration time:

- Whether wrapt's ``instance`` is a parameter of the signature the name is built from. It is
  for a function bound by wrapt in a class body; it is not for a bound method, whose ``self``
  wrapt still passes as ``instance`` although the caller never names it (prepending it shifted
  every field by one: ``order:{order_id}`` rendered the object's repr, so two callers with the
  same order id never excluded each other).
- Whether a call returns a coroutine: an ``async def`` inside a callable object, a partial or
  a sync ``functools.wraps`` decorator must take the async path, or the lease would be given
  back before the body ran.
- Whether a call returns its body unrun in another form -- a generator, an async generator,
  or the context manager of a ``@contextmanager`` function -- behind any of these: refused at
  decoration where ``__wrapped__`` shows it, else at the call, before the body can run.
- The ``name=None`` lock name, which must be the same in every process (never a repr).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NoReturn

# Layers followed at most: a ``__wrapped__`` cycle must not hang decoration.
_MAX_LAYERS = 64


def binds_instance(func: Callable[..., Any]) -> bool:
    """True when wrapt's ``instance`` is the first parameter of ``func``'s signature.

    Only a plain function (a method or the function of a classmethod, bound by wrapt as a
    descriptor) lists ``self``/``cls`` in its signature; for anything else, wrapt's
    ``instance`` is either None or the ``__self__`` of a bound method, already bound.
    """
    return inspect.isfunction(func)


def is_async(func: Callable[..., Any]) -> bool:
    """Does calling ``func`` return a coroutine?

    Sees through partials, bound methods, callable objects (``async def __call__``) and
    ``__wrapped__`` chains (an ``async def`` under a sync ``functools.wraps`` decorator, which
    returns the coroutine it is handed). A sync wrapper that instead runs the coroutine to
    completion itself (``asyncio.run``) but keeps ``__wrapped__`` is taken for a pass-through
    one, and its decorated form becomes async: decorate beneath such a wrapper instead.
    """
    return any(inspect.iscoroutinefunction(layer) for layer in _layers(func, wrapped=True))


def is_generator(func: Callable[..., Any]) -> bool:
    """Does calling ``func`` (or a function it delegates to) return a generator (sync or async)?

    ``__wrapped__`` is followed, as :func:`is_async` does: a generator function under any
    ``functools.wraps`` decorator -- ``contextlib.contextmanager`` and ``asynccontextmanager``
    included -- returns its generator (or a context manager driving it) unrun, and the lease
    would be given back before its body ran. A wrapper that instead consumes the generator
    itself (``return list(f())``) but keeps ``__wrapped__`` is refused too: decorate a plain
    function that calls it.
    """
    return _generator_layer(func) is not None


def _generator_layer(func: Callable[..., Any]) -> Any:
    """The outermost generator function ``func`` is or delegates to, or None."""
    for layer in _layers(func, wrapped=True):
        if inspect.isgeneratorfunction(layer) or inspect.isasyncgenfunction(layer):
            return layer
    return None


def _helper_code(make: Callable[[Any], Any], body: Any) -> Any:
    return make(body).__code__  # every function contextlib makes shares its helper's code


def _gen() -> Iterator[None]:
    yield


async def _agen() -> AsyncIterator[None]:
    yield


# contextlib's helpers, recognised by their code (their name and module are the wrapped
# function's, copied by functools.wraps): only to say "context manager" in the refusal.
_CONTEXT_MANAGER_HELPERS = frozenset(
    {
        _helper_code(contextlib.contextmanager, _gen),
        _helper_code(contextlib.asynccontextmanager, _agen),
    }
)
# What a @contextmanager/@asynccontextmanager function returns: its generator not started.
_CONTEXT_MANAGERS = (contextlib._GeneratorContextManager, contextlib._AsyncGeneratorContextManager)


def makes_context_manager(func: Callable[..., Any]) -> bool:
    """Is ``func``, or a function it delegates to, made by ``@contextmanager`` (or async)?"""
    return any(
        getattr(layer, "__code__", None) in _CONTEXT_MANAGER_HELPERS
        for layer in _layers(func, wrapped=True)
    )


def refuse_generator(decorator: str, func: Callable[..., Any]) -> NoReturn:
    """``func`` returns its body unrun (a generator, or a context manager around one)."""
    if makes_context_manager(func):
        raise TypeError(
            f"@{decorator} cannot protect context-manager function {describe(func)} "
            "(@contextmanager/@asynccontextmanager): the lease would be given back when the "
            "context manager is returned, before its with-block runs; take the lock inside it "
            "(`with Lock(...):` around the `yield`) or where it is used "
            f"(`with Lock(...), {getattr(func, '__name__', 'it')}():`)"
        )
    found = _generator_layer(func)
    behind = "" if found is func else " (a generator function under its decorators)"
    if decorator == "throttled":  # no lease: what it limits would be the making, not the work
        raise TypeError(
            f"@throttled cannot throttle generator {describe(func)}{behind}: a call returns "
            "the generator before its body runs, so the rate would limit making generators, "
            "not the work they do; call Throttle(...).acquire() inside the generator instead"
        )
    raise TypeError(
        f"@{decorator} cannot protect generator {describe(func)}{behind}: the lease would be "
        "given back when the generator is returned, before its body runs, not when iteration "
        "ends; hold it inside the generator with a `with Lock(...)` block instead (if a "
        "wrapper in between consumes the generator itself, decorate a plain function that "
        "calls it)"
    )


def default_name(func: Callable[..., Any]) -> str:
    """The ``name=None`` lock name: ``"<module>.<qualname>"`` of the code the call runs.

    A function, or a method bound or not: its own (``mod.Class.method``, one lock shared by
    every instance, as when the method is decorated in the class body). A partial: the
    function it wraps (pre-filled arguments are not part of the name). A callable object:
    its class's ``__call__`` (``mod.Class.__call__``). Raises TypeError when there is no
    qualified name to use.
    """
    target = _named_target(func)
    qualname = getattr(target, "__qualname__", None)
    if not isinstance(qualname, str):
        raise TypeError(
            f"cannot derive a lock name from {type(func).__name__} object {func!r}: it has "
            "no __qualname__; pass name='...' (a template) or a name callable"
        )
    module = getattr(target, "__module__", None)
    return f"{module}.{qualname}" if isinstance(module, str) else qualname


def describe(func: Callable[..., Any]) -> str:
    """``func`` for messages: its qualified name where it has one, else its repr."""
    try:
        return default_name(func)
    except TypeError:
        return repr(func)


# Results a sync call commonly returns, known not to be awaitable: checked first, so the
# per-call test costs a set lookup rather than an ABC check (~0.3 us) for them.
_PLAIN_RESULTS = frozenset({type(None), bool, int, float, str, bytes, list, tuple, dict, set})


def returned_awaitable(result: object) -> bool:
    """Is a sync fallback's ``result`` awaitable (a sync call cannot await it)?"""
    return type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result)


def returned_unrun(result: object, *, awaitable: bool) -> bool:
    """Is a call's ``result`` its body not yet run: a generator (sync or async) not started, a
    ``@contextmanager``/``@asynccontextmanager`` context manager not entered, or (on the sync
    path, ``awaitable=True``) an awaitable? The lease would not cover that body. A generator
    the call started itself (and suspended inside its own ``with Lock(...)``) is its business.
    """
    if type(result) in _PLAIN_RESULTS:
        return False
    if isinstance(result, _CONTEXT_MANAGERS):
        return _not_started(result.gen)
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        return _not_started(result)
    return awaitable and inspect.isawaitable(result)


def _not_started(gen: Any) -> bool:
    """Is the generator or async generator ``gen`` created and never resumed?"""
    if inspect.isgenerator(gen):
        return inspect.getgeneratorstate(gen) == inspect.GEN_CREATED
    frame = gen.ag_frame
    if frame is None or gen.ag_running:
        return False  # finished, or running (a call cannot return it running, but be exact)
    suspended = getattr(gen, "ag_suspended", None)  # Python 3.12+
    if suspended is not None:
        return not suspended
    # 3.10/3.11: a frame not started is still on its ``def`` line (a one-line async
    # generator already suspended is taken for one not started: refused, loudly).
    return bool(frame.f_lineno == gen.ag_code.co_firstlineno)


def refuse_unrun(decorator: str, func: Callable[..., Any], result: object) -> NoReturn:
    """A call returned its body unrun (see :func:`returned_unrun`): close it and say what to do.

    Run by the caller, that body would run after the lease was given back: unprotected, while
    another caller holds the lock. Closing a coroutine or generator makes sure it never runs
    (an async generator not started never runs once dropped; a Future or Task, already
    scheduled, cannot be recalled: the caller still hears of it). The caller closes the lease
    before this error reaches its own caller.
    """
    kind = type(result).__name__
    if isinstance(result, _CONTEXT_MANAGERS):
        result = result.gen  # the generator the context manager would have started
    close = getattr(result, "close", None)
    if callable(close):
        close()
    if inspect.isawaitable(result):
        raise TypeError(
            f"@{decorator}: {describe(func)} returned {kind}, an awaitable, although it looked "
            "like a sync function: the lock would have been released before its body ran, so "
            "it was closed unrun. Decorate the `async def` itself, make the wrapper around it "
            "`async def`, or keep its __wrapped__ (functools.wraps) so the coroutine function "
            "can be seen"
        )
    raise TypeError(
        f"@{decorator}: {describe(func)} returned {kind}, whose body runs only when it is "
        "iterated or entered: the lock would have been released before that body ran, so it "
        "was closed unrun. Take the lock inside the generator (`with Lock(...):` around the "
        "`yield`) or around its use (`with Lock(...):`), or keep the wrappers' __wrapped__ "
        "(functools.wraps) so decoration can refuse it at once"
    )


def _named_target(func: Any) -> Any:
    """What ``name=None`` names: the innermost function behind partials, bound methods and
    wrappers, or the ``__call__`` of a callable object's class."""
    for layer in _layers(func, wrapped=True):
        func = layer
    return func


def _layers(func: Any, *, wrapped: bool) -> Iterator[Any]:
    """``func``, then each callable it delegates to, outermost first."""
    seen: set[int] = set()
    current = func
    while current is not None and id(current) not in seen and len(seen) < _MAX_LAYERS:
        seen.add(id(current))
        yield current
        current = _inner(current, wrapped)


def _inner(func: Any, wrapped: bool) -> Any:
    """The callable ``func`` delegates to, or None."""
    if isinstance(func, functools.partial):
        return func.func
    if inspect.ismethod(func) or isinstance(func, (classmethod, staticmethod)):
        return func.__func__
    if wrapped and callable(inner := getattr(func, "__wrapped__", None)):
        return inner
    if inspect.isroutine(func) or inspect.isclass(func):
        return None
    return _call_method(func)


def _call_method(obj: Any) -> Any:
    """A callable object's ``__call__`` as its class defines it (None for a plain object)."""
    try:
        # ``__class__``, not type(): it sees through a proxy (a wrapt wrapper of the object).
        call = obj.__class__.__call__
    except AttributeError:
        return None
    return call if inspect.isfunction(call) or inspect.ismethod(call) else None


def refuse_class(decorator: str, obj: object) -> None:
    """Decorating a class would lock only the building of its instances: say what to do."""
    if inspect.isclass(obj):
        raise TypeError(
            f"@{decorator} cannot decorate class {obj.__qualname__}: the lock would cover only "
            f"the building of each instance, not what its methods do; decorate the methods "
            f"that need it instead (@{decorator}(...) above `def method(self, ...)`)"
        )


def check_fallback(
    decorator: str, fallback: Callable[..., Any], func: Callable[..., Any], run_async: bool
) -> None:
    """``on_busy=fallback`` must be callable as ``func`` is called (``self``/``cls`` included for
    a method), and a sync function's fallback must be sync: a sync call cannot await."""
    if not run_async and is_async(fallback):
        raise TypeError(
            f"@{decorator}(on_busy={describe(fallback)}): the fallback is async but "
            f"{describe(func)} is sync, and a sync call cannot await it; give a sync fallback "
            "(or make the function async def)"
        )
    try:
        wanted = inspect.signature(func)
        offered = inspect.signature(fallback)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
        return
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for param in wanted.parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            args.append(None)
        elif param.kind == param.KEYWORD_ONLY:
            kwargs[param.name] = None
    try:
        offered.bind(*args, **kwargs)
    except TypeError as wrong:
        raise TypeError(
            f"@{decorator}(on_busy={describe(fallback)}): a fallback taking {offered} cannot "
            f"take the arguments of {describe(func)}{wanted} ({wrong}); it is called with the "
            "call's own arguments (self or cls included for methods), so give it the same "
            "parameters, or *args, **kwargs"
        ) from None

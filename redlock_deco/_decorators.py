"""What ``@locked`` and ``@limited`` do: compile once at decoration time, do little per call.

Their signatures, as users and type checkers see them, are in ``_decorator_api.py``.

At decoration time: options are validated, the name template is compiled against the
function's signature, and the wrapper flavour is chosen once. Per call: render the name,
take the lease, call, give it back, and raise LockLost if the lease ended meanwhile.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from . import _callables as callables
from . import _guard as guard
from ._errors import LockNotAcquired
from ._naming import (
    Renderer,
    check_name,
    compile_name,
    describe,
    full_args,
    own_args,
    source_of,
)
from ._options import LeaseOptions, OnBusyArg, check_options, lease_options
from ._protected import Protected
from ._protected import _by_reference as _by_reference  # what pickles made before 0.3 name
from ._protocol import LOCK, SEMAPHORE, SHARED, Kind
from ._throttle import ThrottleOptions


class _Unset:
    def __repr__(self) -> str:
        return "<not given>"


#: ``locked(name=...)`` not given (None is a name too: one lock per function).
UNSET: Any = _Unset()


def _is_bare_target(name: object) -> bool:
    """True for ``@locked`` without parentheses: the name slot holds the decorated function.

    A lambda (or any non-``def`` callable) in that slot is a name callable instead; pass a
    ``def`` name function as ``name=`` to make the intent explicit.
    """
    if isinstance(name, (classmethod, staticmethod)):
        return True
    return inspect.isfunction(name) and name.__name__ != "<lambda>"


def _not_callable(decorator: str, func: object, names: tuple[Any, ...]) -> str:
    message = f"@{decorator} decorates functions and methods, got {func!r:.80}"
    if callable(names[0]):
        # locked(obj.meth)(42): the callable in the name slot was taken as the name function.
        message += (
            f"; {describe(names[0])}, given first, was taken as the lock name callable: to "
            f"decorate it with the default name, write {decorator}()(it)"
        )
    return message


#: What a call that was not let in raises, built only then (``on_busy="raise"``).
Refusal = Callable[[], BaseException]


def busy_handlers(
    decorator: str, on_busy: OnBusyArg, underlying: Any, run_async: bool
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The sync and async handlers of a call that was not let in (``wait`` ran out, or a
    throttle had no slot): the fallback's result (awaited where it may be), None for
    ``"skip"``, else the refusal raised. Checked once, here: a fallback that does not fit."""
    skip = on_busy == "skip"
    fallback = None if isinstance(on_busy, str) else on_busy
    if fallback is not None:
        callables.check_fallback(decorator, fallback, underlying, run_async)
    # The fallback gets the arguments as the function would: self/cls put back for methods.
    call_args = full_args if callables.binds_instance(underlying) else own_args

    def busy(refusal: Refusal, instance: Any, args: tuple[Any, ...], kw: Any) -> Any:
        if fallback is not None:
            return fallback(*call_args(instance, args), **kw)
        if not skip:
            raise refusal()
        return None

    def busy_sync(refusal: Refusal, instance: Any, args: tuple[Any, ...], kw: Any) -> Any:
        result = busy(refusal, instance, args, kw)
        if fallback is not None and callables.returned_awaitable(result):
            callables.refuse_unrun(f"{decorator}(on_busy=...)", fallback, result)
        return result

    async def busy_async(refusal: Refusal, instance: Any, args: tuple[Any, ...], kw: Any) -> Any:
        result = busy(refusal, instance, args, kw)
        if fallback is not None and inspect.isawaitable(result):
            result = await result  # an async fallback, or a sync one returning an awaitable
        return result

    return busy_sync, busy_async


Opts = TypeVar("Opts", LeaseOptions, ThrottleOptions)


def prepare(
    decorator: str, names: tuple[Any, ...], options: Opts, func: Any
) -> tuple[Any, list[Renderer], Opts, bool]:
    """What every decorator works out once: the function under ``classmethod``/
    ``staticmethod`` (refused if it cannot be protected), a renderer per name, the options
    with their events' labels, and whether calls take the async path."""
    underlying = func.__func__ if isinstance(func, (classmethod, staticmethod)) else func
    callables.refuse_class(decorator, underlying)
    if not callable(underlying):
        raise TypeError(_not_callable(decorator, func, names))
    # Seen through __wrapped__ too: a generator under functools.wraps (or @contextmanager)
    # returns its body unrun, and two callers ran the "protected" body at once (b02).
    if callables.is_generator(underlying):
        callables.refuse_generator(decorator, underlying)
    renders = [compile_name(name, underlying) for name in names]
    # Event labels, worked out once here: a template and a function name, never per call;
    # label= replaces the template (a name for the dashboards, where one is wanted).
    source = source_of(names, underlying, options.provider)
    if options.label is not None:
        source = replace(source, template=options.label)
    # Seen through partials, callable objects and __wrapped__: an async def in disguise on the
    # sync path would get its lease back before its body ran, leaving the body unprotected.
    return underlying, renders, replace(options, source=source), callables.is_async(underlying)


def _decorate(
    decorator: str,
    kind: Kind,
    names: tuple[Any, ...],
    options: LeaseOptions,
    on_busy: OnBusyArg,
    func: Any,
) -> Any:
    underlying, renders, options, run_async = prepare(decorator, names, options, func)
    render = renders[0]
    prefix = options.prefix
    busy_sync, busy_async = busy_handlers(decorator, on_busy, underlying, run_async)

    def busy(lock_name: str, key: str, started: float) -> Refusal:
        return lambda: LockNotAcquired(name=lock_name, key=key, waited=time.monotonic() - started)

    # Each call opens its section inside the try that closes it, and closes it in one
    # `finally` statement: a KeyboardInterrupt at any line between taking the lease and
    # giving it back still gives it back (see _guard.py), never leaving it held and renewed
    # for this thread's later calls to walk into.
    def call_locked(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
        lock_name = render(instance, args, kwargs)
        key = prefix + lock_name
        started = time.monotonic()
        section = error = None
        try:
            section = guard.open_section(kind, options, lock_name, key, options.wait)
            if section is None:
                return busy_sync(busy(lock_name, key, started), instance, args, kwargs)
            result = wrapped(*args, **kwargs)
            if callables.returned_unrun(result, awaitable=True):  # closed unrun, raised once
                callables.refuse_unrun(decorator, underlying, result)  # the lease is given back
        except BaseException as exc:
            error = exc
            raise
        finally:  # no line can come before the exit begins
            try:
                guard.close_section(section, error)
            except BaseException as exc:  # (cut short as it began: see guard.abort_open)
                guard.abort_open(section, exc)
                raise
            finally:
                error = None  # the exception's traceback holds this frame: no cycle through it
        return result

    async def call_locked_async(
        wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        lock_name = render(instance, args, kwargs)
        key = prefix + lock_name
        started = time.monotonic()
        section = error = None
        try:
            section = await guard.open_section_async(kind, options, lock_name, key, options.wait)
            if section is None:
                return await busy_async(busy(lock_name, key, started), instance, args, kwargs)
            result = await wrapped(*args, **kwargs)
            if callables.returned_unrun(result, awaitable=False):  # an async generator behind
                callables.refuse_unrun(decorator, underlying, result)  # a wrapper without wraps
        except BaseException as exc:  # CancelledError too: release (shielded), then propagate
            error = exc
            raise
        finally:
            try:
                await guard.close_section_async(section, error)
            except BaseException as exc:  # (see call_locked)
                await guard.abort_open_async(section, exc)
                raise
            finally:
                error = None
        return result

    def rendered(instance: Any, args: tuple[Any, ...], kwargs: Any) -> dict[str, str]:
        found = {}
        for one in renders:
            lock_name = one(instance, args, kwargs)
            found[prefix + lock_name] = lock_name
        return found

    def call_all(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
        names_by_key = rendered(instance, args, kwargs)
        started = time.monotonic()
        sections = error = None
        try:
            sections = guard.open_sections(kind, options, names_by_key, options.wait)
            if sections is None:
                key = ", ".join(sorted(names_by_key))
                names = ", ".join(names_by_key.values())
                return busy_sync(busy(names, key, started), instance, args, kwargs)
            result = wrapped(*args, **kwargs)
            if callables.returned_unrun(result, awaitable=True):  # closed unrun, raised once
                callables.refuse_unrun(decorator, underlying, result)  # the lease is given back
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                guard.close_sections(sections, error)
            except BaseException as exc:  # (see call_locked)
                guard.abort_open(sections, exc)
                raise
            finally:
                error = None
        return result

    async def call_all_async(
        wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        names_by_key = rendered(instance, args, kwargs)
        started = time.monotonic()
        sections = error = None
        try:
            sections = await guard.open_sections_async(kind, options, names_by_key, options.wait)
            if sections is None:
                key = ", ".join(sorted(names_by_key))
                names = ", ".join(names_by_key.values())
                return await busy_async(busy(names, key, started), instance, args, kwargs)
            result = await wrapped(*args, **kwargs)
            if callables.returned_unrun(result, awaitable=False):  # an async generator behind
                callables.refuse_unrun(decorator, underlying, result)  # a wrapper without wraps
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                await guard.close_sections_async(sections, error)
            except BaseException as exc:  # (see call_locked)
                await guard.abort_open_async(sections, exc)
                raise
            finally:
                error = None
        return result

    # The flavour (and single or several names) is chosen once, here, not per call.
    if run_async:
        return Protected(func, call_all_async if len(renders) > 1 else call_locked_async)
    if options.on_lost == "cancel":
        raise ValueError(
            f"on_lost='cancel' needs an async function ({describe(underlying)} is sync): only "
            "a task can be cancelled; pass a callback instead"
        )
    return Protected(func, call_all if len(renders) > 1 else call_locked)


def decorate_locked(templates: tuple[Any, ...], name: Any, given: dict[str, Any]) -> Any:
    """``locked(*templates, name=..., **given)``: the decorator (or, bare, the function)."""
    values = check_options("locked", given)
    options = lease_options(values)
    kind = SHARED if values["shared"] else LOCK
    busy = values["on_busy"]
    if name is not UNSET:
        if templates:
            raise TypeError("give the lock name once: positionally or as name=, not both")
        templates = (name,)
    elif len(templates) == 1 and inspect.isclass(templates[0]):
        callables.refuse_class("locked", templates[0])  # bare @locked on a class
    elif len(templates) == 1 and _is_bare_target(templates[0]):
        return _decorate("locked", kind, (None,), options, busy, templates[0])
    names = templates or (None,)
    if len(names) > 1 and any(n is None for n in names):
        raise TypeError("with several lock names, every one must be a template or a callable")
    for one in names:
        check_name(one)
    return lambda func: _decorate("locked", kind, names, options, busy, func)


def decorate_limited(name: Any, limit: Any, given: dict[str, Any]) -> Any:
    """``limited(name, limit, **given)``: the decorator."""
    if inspect.isclass(name):
        callables.refuse_class("limited", name)  # @limited on a class
    values = check_options("limited", {**given, "limit": limit})
    check_name(name)
    options, busy = lease_options(values), values["on_busy"]
    return lambda func: _decorate("limited", SEMAPHORE, (name,), options, busy, func)

"""``@locked`` and ``@limited``: compile once at decoration time, do little per call.

At decoration time: options are validated, the name template is compiled against the
function's signature, and the wrapper flavour is chosen once. Per call: render the name,
take the lease, call, give it back, and raise LockLost if the lease ended meanwhile.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pickle
import time
import types
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Literal, TypeVar, overload

import wrapt

from . import _guard as guard
from . import _targets as targets
from ._errors import LockNotAcquired
from ._naming import check_name, compile_name, describe, full_args, own_args, source_of
from ._options import (
    LeaseOptions,
    OnBusy,
    OnBusyArg,
    OnLost,
    build_options,
    check_on_busy,
    check_shared,
    explains_bad_arguments,
)
from ._protocol import LOCK, SEMAPHORE, SHARED, Kind
from ._signatures import AsyncBusyDecorator, BusyDecorator, F, NameArg

#: What an ``on_busy`` fallback returns (awaited first if it is awaitable, on the async path).
B = TypeVar("B")


def _is_bare_target(name: object) -> bool:
    """True for ``@locked`` without parentheses: the name slot holds the decorated function.

    A lambda (or any non-``def`` callable) in that slot is a name callable instead; pass a
    ``def`` name function as ``name=`` to make the intent explicit.
    """
    if isinstance(name, (classmethod, staticmethod)):
        return True
    return inspect.isfunction(name) and name.__name__ != "<lambda>"


def _not_callable(decorator: str, func: object, names: tuple[NameArg, ...]) -> str:
    message = f"@{decorator} decorates functions and methods, got {func!r:.80}"
    if callable(names[0]):
        # locked(obj.meth)(42): the callable in the name slot was taken as the name function.
        message += (
            f"; {describe(names[0])}, given first, was taken as the lock name callable: to "
            f"decorate it with the default name, write {decorator}()(it)"
        )
    return message


def _decorate(
    decorator: str,
    kind: Kind,
    names: tuple[NameArg, ...],
    options: LeaseOptions,
    on_busy: OnBusyArg,
    func: Any,
) -> Any:
    underlying = func.__func__ if isinstance(func, (classmethod, staticmethod)) else func
    targets.refuse_class(decorator, underlying)
    if not callable(underlying):
        raise TypeError(_not_callable(decorator, func, names))
    # Seen through __wrapped__ too: a generator under functools.wraps (or @contextmanager)
    # returns its body unrun, and two callers ran the "protected" body at once (b02).
    if targets.is_generator(underlying):
        targets.refuse_generator(decorator, underlying)
    renders = [compile_name(name, underlying) for name in names]
    render = renders[0]
    # Event labels, worked out once here: a template and a function name, never per call.
    options = replace(options, source=source_of(names, underlying, options.provider))
    # Seen through partials, callable objects and __wrapped__: an async def in disguise on the
    # sync path would get its lease back before its body ran, leaving the body unprotected.
    run_async = targets.is_async(underlying)
    prefix = options.prefix
    skip = on_busy == "skip"
    fallback = None if isinstance(on_busy, str) else on_busy
    if fallback is not None:
        targets.check_fallback(decorator, fallback, underlying, run_async)
    # The fallback gets the arguments as the function would: self/cls put back for methods.
    call_args = full_args if targets.binds_instance(underlying) else own_args

    def busy(
        lock_name: str, key: str, started: float, instance: Any, args: tuple[Any, ...], kw: Any
    ) -> Any:
        if fallback is not None:
            return fallback(*call_args(instance, args), **kw)
        if not skip:
            raise LockNotAcquired(name=lock_name, key=key, waited=time.monotonic() - started)
        return None

    def busy_sync(
        lock_name: str, key: str, started: float, instance: Any, args: tuple[Any, ...], kw: Any
    ) -> Any:
        result = busy(lock_name, key, started, instance, args, kw)
        if fallback is not None and targets.returned_awaitable(result):
            targets.refuse_unrun(f"{decorator}(on_busy=...)", fallback, result)
        return result

    async def busy_async(
        lock_name: str, key: str, started: float, instance: Any, args: tuple[Any, ...], kw: Any
    ) -> Any:
        result = busy(lock_name, key, started, instance, args, kw)
        if fallback is not None and inspect.isawaitable(result):
            result = await result  # an async fallback, or a sync one returning an awaitable
        return result

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
                return busy_sync(lock_name, key, started, instance, args, kwargs)
            result = wrapped(*args, **kwargs)
            if targets.returned_unrun(result, awaitable=True):  # closed unrun, raised once
                targets.refuse_unrun(decorator, underlying, result)  # the lease is given back
        except BaseException as exc:
            error = exc
            raise
        finally:  # one statement: no line can come before the exit begins
            guard.close_section(section, error)
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
                return await busy_async(lock_name, key, started, instance, args, kwargs)
            result = await wrapped(*args, **kwargs)
            if targets.returned_unrun(result, awaitable=False):  # an async generator behind
                targets.refuse_unrun(decorator, underlying, result)  # a wrapper without wraps
        except BaseException as exc:  # CancelledError too: release (shielded), then propagate
            error = exc
            raise
        finally:
            await guard.close_section_async(section, error)
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
                return busy_sync(names, key, started, instance, args, kwargs)
            result = wrapped(*args, **kwargs)
            if targets.returned_unrun(result, awaitable=True):  # closed unrun, raised once
                targets.refuse_unrun(decorator, underlying, result)  # the lease is given back
        except BaseException as exc:
            error = exc
            raise
        finally:
            guard.close_sections(sections, error)
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
                return await busy_async(names, key, started, instance, args, kwargs)
            result = await wrapped(*args, **kwargs)
            if targets.returned_unrun(result, awaitable=False):  # an async generator behind
                targets.refuse_unrun(decorator, underlying, result)  # a wrapper without wraps
        except BaseException as exc:
            error = exc
            raise
        finally:
            await guard.close_sections_async(sections, error)
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


def _by_reference(module: str, qualname: str) -> Any:
    """What ``module.qualname`` names now (unpickling a decorated function)."""
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


class _ByValueRefused:
    """Kept in a decorated function's ``__dict__``; refuses to be pickled.

    Pickling by reference never pickles a function's ``__dict__``. cloudpickle (joblib/loky,
    Dask, Ray) and dill pickle functions of ``__main__`` -- a script, a notebook -- *by
    value*: they rebuild the plain function from its code and ``__dict__``, so the other
    process would run it with no lock at all. This makes that a clear error instead.
    """

    __slots__ = ("qualname",)

    def __init__(self, qualname: str) -> None:
        self.qualname = qualname

    def __reduce__(self) -> tuple[Any, ...]:
        raise pickle.PicklingError(
            f"{self.qualname} is decorated by redlock-deco and is being pickled by value "
            "(cloudpickle and dill do that for functions of __main__, e.g. a script or a "
            "notebook), which would drop its lock in the other process; define it in an "
            "importable module so it pickles by reference"
        )


class ProtectedMethod(wrapt.BoundFunctionWrapper):  # type: ignore[type-arg]  # as below
    """A decorated method as seen through its class or an instance: pickles as that
    attribute of that object (an instance pickles itself), the way a bound method does.
    Copies as a bound method does too (wrapt's proxies refuse to be copied)."""

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        instance = self._self_instance
        if instance is None or isinstance(instance, type):
            return self
        return getattr(copy.deepcopy(instance, memo), self.__name__)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        instance = self._self_instance
        if instance is None:  # through the class: the function itself
            reduced: tuple[Any, ...] = self._self_parent.__reduce_ex__(protocol)
            return reduced
        return getattr, (instance, self.__name__)


class Protected(wrapt.FunctionWrapper):  # type: ignore[type-arg]  # wrapt declares it generic only in its stubs
    """A decorated function or method. Pickles by reference, as the plain function would, so
    ``ProcessPoolExecutor``, ``multiprocessing`` (spawn) and Celery can take it: the other
    process imports the module and finds the same decorated function there."""

    __bound_function_wrapper__ = ProtectedMethod

    def __init__(self, wrapped: Any, wrapper: Any) -> None:
        super().__init__(wrapped, wrapper)
        # Stored on the wrapped function (a proxy shares its __dict__): see _ByValueRefused.
        # Only a plain function can be pickled by value (nor has a __dict__ to store it in).
        if isinstance(wrapped, types.FunctionType):
            self._redlock_deco_by_value = _ByValueRefused(wrapped.__qualname__)

    def __copy__(self) -> Protected:
        return self  # a function copies as itself; wrapt's proxy would raise

    def __deepcopy__(self, memo: dict[int, Any]) -> Protected:
        return self

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, tuple[str, str]]:
        module = getattr(self, "__module__", None)
        qualname = getattr(self, "__qualname__", None)
        try:
            found = _by_reference(module, qualname) if module and qualname else None
        except (ImportError, AttributeError):
            found = None
        if found is not self and getattr(found, "_self_parent", None) is not self:
            raise pickle.PicklingError(
                f"cannot pickle {module}.{qualname}: a decorated function pickles by reference, "
                "so it must be reachable by that name at module level (not a local function, "
                "nor decorated without being assigned to its name)"
            )
        return _by_reference, (str(module), str(qualname))


_UNSET: Any = object()


# One overload per kind of on_busy: "raise" keeps the function's type; "skip" -- or a value
# only known to be one of the two -- adds None to its result; a fallback adds its own result
# (an async one's awaited result, and then only async functions may be decorated: a sync call
# cannot await it).
@overload
def locked(func: F, /) -> F: ...  # bare @locked: a def function in the name slot is decorated


@overload
def locked(
    *templates: NameArg,
    name: NameArg = None,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: Literal["raise"] = "raise",
    provider: str = "default",
    prefix: str = "lock:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
    fencing: bool = False,
    shared: bool = False,
) -> Callable[[F], F]: ...


@overload
def locked(
    *templates: NameArg,
    name: NameArg = None,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: OnBusy,
    provider: str = "default",
    prefix: str = "lock:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
    fencing: bool = False,
    shared: bool = False,
) -> BusyDecorator[None]: ...


@overload
def locked(  # type: ignore[overload-overlap]  # an async fallback first: its result is awaited
    *templates: NameArg,
    name: NameArg = None,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: Callable[..., Awaitable[B]],
    provider: str = "default",
    prefix: str = "lock:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
    fencing: bool = False,
    shared: bool = False,
) -> AsyncBusyDecorator[B]: ...


@overload
def locked(
    *templates: NameArg,
    name: NameArg = None,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: Callable[..., B],
    provider: str = "default",
    prefix: str = "lock:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
    fencing: bool = False,
    shared: bool = False,
) -> BusyDecorator[B]: ...


@explains_bad_arguments
def locked(
    *templates: Any,
    name: Any = _UNSET,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: OnBusyArg = "raise",
    provider: str = "default",
    prefix: str = "lock:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
    fencing: bool = False,
    shared: bool = False,
) -> Any:
    """Let one caller at a time run the function, per rendered name, across all processes.

    ``name`` (first positional argument, or keyword) is a ``str.format`` template filled from
    the call's arguments (``"order:{id}"``, ``"acct:{self.id}"``), a callable taking the same
    arguments and returning the name, or None for one lock per function
    (``"<module>.<qualname>"``). The Redis key is ``prefix + name``. ``ttl`` is the lease in
    seconds (renewed in the background while the call runs if ``auto_renew``); ``wait`` bounds
    the wait (0: try once, None: forever), after which ``on_busy="raise"`` raises
    LockNotAcquired and ``"skip"`` returns None without calling (so a function returning ``T``
    is typed as returning ``T | None``); a callable (a *fallback*) is called instead with the
    call's arguments (``self``/``cls`` included for methods) and its result returned (awaited
    if it is awaitable, for an ``async def``; a sync function needs a sync fallback).
    Re-entrant per owner -- the asyncio task running the call, else its thread: a nested
    call or ``with`` block of the same owner on the same name only counts (a bare
    ``Lock.acquire()`` is its object's and re-enters nothing). Raises LockLost at exit if
    the lease ended meanwhile.
    ``replicas=N`` waits (WAIT) until N replicas have the lock after each acquisition, and
    counts the attempt as failed (releasing it) if fewer acknowledge in time. ``on_lost`` is
    called with the lease as soon as renewal finds it gone (``"cancel"``, for async functions,
    cancels the call instead); ``max_hold`` stops renewal after that many seconds, so a stuck
    call cannot hold the lock forever (it then ends in LockLost). ``fencing=True`` gives each
    acquisition a token strictly greater than every earlier one of that name
    (``current_lease().fencing_token``), for a downstream store to reject stale writers.

    Bare ``@locked`` works. A ``def`` function given positionally is taken as the function to
    decorate; pass a name function as ``name=`` (a positional lambda works at run time, but
    type checkers take it for bare ``@locked``).

    Bound methods (``locked("order:{order_id}")(obj.charge)``), ``functools.partial`` objects
    and callable objects can be decorated too: template fields (and a name callable's
    arguments) are the parameters as the caller passes them, so a bound method's ``self`` is
    not one. An ``async def`` in any of these forms, or under a sync ``functools.wraps``
    decorator, takes the async path. ``name=None`` names the code the call runs, the same in
    every process: ``"<module>.<Class>.<method>"`` for a bound method (one lock shared by all
    instances, as when decorated in the class body), the wrapped function's name for a
    partial, ``"<module>.<Class>.__call__"`` for a callable object. Generator, async generator
    and ``@contextmanager``/``@asynccontextmanager`` functions, in any of these forms or under
    ``functools.wraps`` decorators, raise TypeError at decoration (the lease would end before
    their body ran); a call that returns one anyway raises TypeError with the lease given
    back and the body never run. A name that would hold an
    object's default repr (``<... at 0x...>``) raises KeyTemplateError instead. Bounds, checked
    at decoration: ``ttl`` from 0.01 to 1e9 seconds, ``wait`` and ``max_hold`` up to 1e9.

    Several names (``@locked("acct:{src}", "acct:{dst}")``) are taken all or nothing, in
    sorted key order (so callers naming them in opposite orders cannot deadlock), within one
    ``wait``, and released together; each lives in its own key, so they may sit in different
    cluster slots or go through a quorum.

    ``shared=True`` takes the name(s) in shared (read) mode: any number of shared callers at
    once, or one exclusive caller (every ``@locked``/``Lock`` of that name without
    ``shared``), never both; waiters are served in arrival order, consecutive readers
    together, so a queued writer stops new readers and neither side starves. Several names
    are all taken in that one mode (still all or nothing, in sorted key order, which keeps
    reader-writer locks deadlock-free too); for mixed modes nest two decorators, in the same
    order everywhere. Re-entry: shared inside shared or inside exclusive is allowed; exclusive
    inside shared (an upgrade) raises LockError. Not with ``fencing``, nor on a quorum
    provider (ProviderError at the first call).
    """
    options = build_options(
        ttl=ttl, wait=wait, auto_renew=auto_renew, provider=provider, prefix=prefix,
        replicas=replicas, on_lost=on_lost, max_hold=max_hold, fencing=fencing,
    )  # fmt: skip
    kind = SHARED if check_shared(shared, fencing) else LOCK
    busy = check_on_busy(on_busy)
    if name is not _UNSET:
        if templates:
            raise TypeError("give the lock name once: positionally or as name=, not both")
        templates = (name,)
    elif len(templates) == 1 and inspect.isclass(templates[0]):
        targets.refuse_class("locked", templates[0])  # bare @locked on a class
    elif len(templates) == 1 and _is_bare_target(templates[0]):
        return _decorate("locked", kind, (None,), options, busy, templates[0])
    names = templates or (None,)
    if len(names) > 1 and any(n is None for n in names):
        raise TypeError("with several lock names, every one must be a template or a callable")
    for one in names:
        check_name(one)
    return lambda func: _decorate("locked", kind, names, options, busy, func)


# limit is required by every overload; each comes in two shapes, because a required limit
# cannot follow a name that has a default: limited(name, limit) positionally, or by keyword
# with name left out (limited(limit=3)). The on_busy kinds are as for locked.
@overload
def limited(
    name: NameArg,
    limit: int,
    *,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: Literal["raise"] = "raise",
    provider: str = "default",
    prefix: str = "sem:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
) -> Callable[[F], F]: ...


@overload
def limited(
    *,
    name: NameArg = None,
    limit: int,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: Literal["raise"] = "raise",
    provider: str = "default",
    prefix: str = "sem:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
) -> Callable[[F], F]: ...


@overload
def limited(
    name: NameArg,
    limit: int,
    *,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: OnBusy,
    provider: str = "default",
    prefix: str = "sem:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
) -> BusyDecorator[None]: ...


@overload
def limited(
    *,
    name: NameArg = None,
    limit: int,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: OnBusy,
    provider: str = "default",
    prefix: str = "sem:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
) -> BusyDecorator[None]: ...


@overload
def limited(  # type: ignore[overload-overlap]  # an async fallback first: its result is awaited
    name: NameArg,
    limit: int,
    *,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: Callable[..., Awaitable[B]],
    provider: str = "default",
    prefix: str = "sem:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
) -> AsyncBusyDecorator[B]: ...


@overload
def limited(
    name: NameArg,
    limit: int,
    *,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: Callable[..., B],
    provider: str = "default",
    prefix: str = "sem:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
) -> BusyDecorator[B]: ...


@overload
def limited(  # type: ignore[overload-overlap]  # an async fallback first: its result is awaited
    *,
    name: NameArg = None,
    limit: int,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: Callable[..., Awaitable[B]],
    provider: str = "default",
    prefix: str = "sem:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
) -> AsyncBusyDecorator[B]: ...


@overload
def limited(
    *,
    name: NameArg = None,
    limit: int,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: Callable[..., B],
    provider: str = "default",
    prefix: str = "sem:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
) -> BusyDecorator[B]: ...


@explains_bad_arguments
def limited(
    name: NameArg = None,
    limit: int = _UNSET,
    *,
    ttl: float = 30.0,
    wait: float | None = 10.0,
    auto_renew: bool = True,
    on_busy: OnBusyArg = "raise",
    provider: str = "default",
    prefix: str = "sem:",
    replicas: int = 0,
    on_lost: OnLost = None,
    max_hold: float | None = None,
) -> Any:
    """Let at most ``limit`` callers run the function at once, per rendered name.

    Takes the same ``name`` forms and options as :func:`locked`; ``limit`` is required.
    Not re-entrant: a nested call of the same name takes another slot (and waits if none is
    free). When callers disagree on ``limit`` for one name, each call's own limit applies at
    its admission. Raises LockLost at exit if the slot's lease ended meanwhile.
    """
    if inspect.isclass(name):
        targets.refuse_class("limited", name)  # @limited on a class
    if limit is _UNSET:
        raise TypeError("limited() needs limit=<int>: how many callers may run at once")
    options = build_options(
        ttl=ttl, wait=wait, auto_renew=auto_renew, provider=provider, prefix=prefix,
        limit=limit, replicas=replicas, on_lost=on_lost, max_hold=max_hold,
    )  # fmt: skip
    busy = check_on_busy(on_busy)
    check_name(name)
    return lambda func: _decorate("limited", SEMAPHORE, (name,), options, busy, func)

"""``@locked`` and ``@limited`` as users call them and type checkers see them.

The overloads between the ``# <generated: ...>`` markers are rendered from the options table
(``_options.OPTIONS``) by ``python -m tests.support.options_table --update``, and
tests/core/test_options.py fails when they differ from a fresh rendering: edit the table, not
them. Each implementation takes its options as ``**given`` and checks them against the same
table; ``public_signature`` gives it the signature the table declares at run time (for
``help()``, ``inspect.signature`` and the explanation of a call that cannot bind). What a
decorated call does is in ``_decorators.py``.

Why one module: it is two public functions and the overloads type checkers read for them,
most of it generated; split, the overloads would sit away from the implementation they
describe.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar, overload

from . import _decorators as decorators
from . import _throttled as throttling
from ._options import REQUIRED, OnBusy, OnLost
from ._signatures import (
    KP,
    AsyncBusyDecorator,
    BusyDecorator,
    F,
    KeyedAsyncBusyDecorator,
    KeyedBusyDecorator,
    KeyedDecorator,
    NameArg,
    public_signature,
)

#: What an ``on_busy`` fallback returns (awaited first if it is awaitable, on the async path).
B = TypeVar("B")


# <generated: locked overloads, from _options.OPTIONS by tests/support/options_table.py>
@overload
def locked(func: F, /) -> F: ...  # bare @locked: a def function in the name slot is decorated


@overload
def locked(  # type: ignore[overload-overlap]  # a typed key function first: it fixes the parameters
    *,
    name: Callable[KP, str],
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
    label: str | None = None,
) -> KeyedDecorator[KP]: ...


@overload
def locked(  # type: ignore[overload-overlap]  # a typed key function first: it fixes the parameters
    *,
    name: Callable[KP, str],
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
    label: str | None = None,
) -> KeyedBusyDecorator[KP, None]: ...


@overload
def locked(  # type: ignore[overload-overlap]  # an async fallback first: its result is awaited
    *,
    name: Callable[KP, str],
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
    label: str | None = None,
) -> KeyedAsyncBusyDecorator[KP, B]: ...


@overload
def locked(  # type: ignore[overload-overlap]  # a typed key function first: it fixes the parameters
    *,
    name: Callable[KP, str],
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
    label: str | None = None,
) -> KeyedBusyDecorator[KP, B]: ...


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
    label: str | None = None,
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
    label: str | None = None,
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
    label: str | None = None,
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
    label: str | None = None,
) -> BusyDecorator[B]: ...


# </generated: locked overloads>
@public_signature("locked")
def locked(*templates: Any, name: Any = decorators.UNSET, **given: Any) -> Any:
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
    ``label`` names the events and metrics of the decorated function in place of its template
    (``LockEvent.template``; the ``function`` label stays).

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
    return decorators.decorate_locked(templates, name, given)


# <generated: limited overloads, from _options.OPTIONS by tests/support/options_table.py>
@overload
def limited(  # type: ignore[overload-overlap]  # a typed key function first: it fixes the parameters
    *,
    name: Callable[KP, str],
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
    label: str | None = None,
) -> KeyedDecorator[KP]: ...


@overload
def limited(  # type: ignore[overload-overlap]  # a typed key function first: it fixes the parameters
    *,
    name: Callable[KP, str],
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
    label: str | None = None,
) -> KeyedBusyDecorator[KP, None]: ...


@overload
def limited(  # type: ignore[overload-overlap]  # an async fallback first: its result is awaited
    *,
    name: Callable[KP, str],
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
    label: str | None = None,
) -> KeyedAsyncBusyDecorator[KP, B]: ...


@overload
def limited(  # type: ignore[overload-overlap]  # a typed key function first: it fixes the parameters
    *,
    name: Callable[KP, str],
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
    label: str | None = None,
) -> KeyedBusyDecorator[KP, B]: ...


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
    label: str | None = None,
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
    label: str | None = None,
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
    label: str | None = None,
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
    label: str | None = None,
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
    label: str | None = None,
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
    label: str | None = None,
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
    label: str | None = None,
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
    label: str | None = None,
) -> BusyDecorator[B]: ...


# </generated: limited overloads>
@public_signature("limited")
def limited(name: NameArg = None, limit: int = REQUIRED, **given: Any) -> Any:
    """Let at most ``limit`` callers run the function at once, per rendered name.

    Takes the same ``name`` forms and options as :func:`locked`; ``limit`` is required.
    Not re-entrant: a nested call of the same name takes another slot (and waits if none is
    free). When callers disagree on ``limit`` for one name, each call's own limit applies at
    its admission. Raises LockLost at exit if the slot's lease ended meanwhile.
    """
    return decorators.decorate_limited(name, limit, given)


# <generated: throttled overloads, from _options.OPTIONS by tests/support/options_table.py>
@overload
def throttled(  # type: ignore[overload-overlap]  # a typed key function first: it fixes the parameters
    *,
    name: Callable[KP, str],
    rate: float,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: Literal["raise"] = "raise",
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> KeyedDecorator[KP]: ...


@overload
def throttled(  # type: ignore[overload-overlap]  # a typed key function first: it fixes the parameters
    *,
    name: Callable[KP, str],
    rate: float,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: OnBusy,
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> KeyedBusyDecorator[KP, None]: ...


@overload
def throttled(  # type: ignore[overload-overlap]  # an async fallback first: its result is awaited
    *,
    name: Callable[KP, str],
    rate: float,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: Callable[..., Awaitable[B]],
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> KeyedAsyncBusyDecorator[KP, B]: ...


@overload
def throttled(  # type: ignore[overload-overlap]  # a typed key function first: it fixes the parameters
    *,
    name: Callable[KP, str],
    rate: float,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: Callable[..., B],
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> KeyedBusyDecorator[KP, B]: ...


@overload
def throttled(
    name: NameArg,
    rate: float,
    *,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: Literal["raise"] = "raise",
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> Callable[[F], F]: ...


@overload
def throttled(
    *,
    name: NameArg = None,
    rate: float,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: Literal["raise"] = "raise",
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> Callable[[F], F]: ...


@overload
def throttled(
    name: NameArg,
    rate: float,
    *,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: OnBusy,
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> BusyDecorator[None]: ...


@overload
def throttled(
    *,
    name: NameArg = None,
    rate: float,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: OnBusy,
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> BusyDecorator[None]: ...


@overload
def throttled(  # type: ignore[overload-overlap]  # an async fallback first: its result is awaited
    name: NameArg,
    rate: float,
    *,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: Callable[..., Awaitable[B]],
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> AsyncBusyDecorator[B]: ...


@overload
def throttled(
    name: NameArg,
    rate: float,
    *,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: Callable[..., B],
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> BusyDecorator[B]: ...


@overload
def throttled(  # type: ignore[overload-overlap]  # an async fallback first: its result is awaited
    *,
    name: NameArg = None,
    rate: float,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: Callable[..., Awaitable[B]],
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> AsyncBusyDecorator[B]: ...


@overload
def throttled(
    *,
    name: NameArg = None,
    rate: float,
    per: float = 1.0,
    burst: float | None = None,
    wait: float | None = 10.0,
    on_busy: Callable[..., B],
    provider: str = "default",
    prefix: str = "throttle:",
    label: str | None = None,
) -> BusyDecorator[B]: ...


# </generated: throttled overloads>
@public_signature("throttled")
def throttled(name: NameArg = None, rate: float = REQUIRED, **given: Any) -> Any:
    """Let at most ``rate`` calls start per ``per`` seconds, per rendered name, across all
    processes: a distributed rate limit (GCRA on the Redis server's clock).

    Takes the same ``name`` forms as :func:`locked` (templates, a name callable, None for one
    throttle per function); ``rate`` is required. After a quiet spell up to ``burst`` calls
    (``rate`` by default, at least 1) start at once; in any ``T`` seconds at most
    ``burst + rate * T / per`` start. A call with no free slot reserves the next one, in
    arrival order, and sleeps until it comes (one round trip, no polling) -- if it comes within
    ``wait`` (0: only at once; None: however far). Otherwise nothing is taken and ``on_busy``
    decides: raise ``Throttled`` (with ``retry_after``), ``"skip"`` (return None), or call the
    fallback with the call's arguments. A throttle holds nothing while the call runs: it
    limits how often calls start, not how many run at once (``@limited`` does that; stack
    both for both). See ``redlock_deco.Throttle`` for what holds under retries, interrupts
    and clock jumps.
    """
    return throttling.decorate_throttled(name, rate, given)

"""What type checkers see of ``@locked`` and ``@limited``: the decorated function's parameters,
and what a call returns when the lock stays busy.

``on_busy="raise"`` (the default) returns the function as it was typed (``Callable[[F], F]``):
a busy call raises, so the result type is unchanged. Any other ``on_busy`` returns a
:class:`BusyDecorator` whose parameter is what a busy call returns instead -- ``None`` for
``"skip"``, a fallback's result type for ``on_busy=<callable>`` -- so a function returning
``T`` becomes one returning ``T | B`` (awaiting gives ``T | B`` for ``async def``). An async
fallback gives an :class:`AsyncBusyDecorator`, which takes only async functions: a sync call
could not await it.

Run time: :func:`explains_bad_arguments` makes a call that cannot bind say what is accepted,
and :func:`public_signature` gives ``locked``/``limited`` -- whose implementations take
``**options`` -- the signature their options table declares, for ``help()``, ``inspect`` and
those explanations.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from ._options import options_of

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
#: Anything the decorators accept, kept exactly as it is typed (overloads, methods, and
#: ``classmethod``/``staticmethod`` objects when the decorator is applied outside them).
#: A string: ``classmethod[...]`` cannot be subscripted at run time on every supported Python.
F = TypeVar("F", bound="Callable[..., Any] | classmethod[Any, Any, Any] | staticmethod[Any, Any]")
#: What a call returns instead of the function's result when the lock stays busy.
B_co = TypeVar("B_co", covariant=True)

#: A lock name: a ``str.format`` template, a callable taking the call's arguments, or None.
NameArg = str | Callable[..., str] | None


class BusyDecorator(Protocol[B_co]):
    """``@locked(..., on_busy=...)`` that does not raise: a busy call returns ``B_co``.

    ``classmethod``/``staticmethod`` come first: a ``staticmethod`` is itself callable and
    would otherwise be typed as a plain function, losing its descriptor behaviour.
    """

    @overload
    def __call__(
        self, func: classmethod[T, P, Coroutine[Any, Any, R]], /
    ) -> classmethod[T, P, Coroutine[Any, Any, R | B_co]]: ...
    @overload
    def __call__(self, func: classmethod[T, P, R], /) -> classmethod[T, P, R | B_co]: ...
    @overload
    def __call__(
        self, func: staticmethod[P, Coroutine[Any, Any, R]], /
    ) -> staticmethod[P, Coroutine[Any, Any, R | B_co]]: ...
    @overload
    def __call__(self, func: staticmethod[P, R], /) -> staticmethod[P, R | B_co]: ...  # type: ignore[overload-overlap]  # a staticmethod is callable too; this overload comes first for it
    @overload
    def __call__(
        self, func: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R | B_co]]: ...
    @overload
    def __call__(self, func: Callable[P, R], /) -> Callable[P, R | B_co]: ...


class AsyncBusyDecorator(Protocol[B_co]):
    """``@locked(..., on_busy=<async fallback>)``: decorates only functions returning a
    coroutine (a sync call cannot await the fallback); awaiting a busy call gives ``B_co``."""

    @overload
    def __call__(
        self, func: classmethod[T, P, Coroutine[Any, Any, R]], /
    ) -> classmethod[T, P, Coroutine[Any, Any, R | B_co]]: ...
    @overload
    def __call__(
        self, func: staticmethod[P, Coroutine[Any, Any, R]], /
    ) -> staticmethod[P, Coroutine[Any, Any, R | B_co]]: ...
    @overload
    def __call__(
        self, func: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R | B_co]]: ...


# A key function's parameters, fixed by ``name=`` before the decorated function is seen.
KP = ParamSpec("KP")


class KeyedDecorator(Protocol[KP]):
    """``@locked(name=key_function)``: decorates only a function whose parameters are the key
    function's (the same names and types), so a renamed or retyped parameter is a type error
    where it is written, not a TypeError on the first call. Write the key function as a
    ``def`` with annotations: a lambda's parameters have no types for a checker to compare."""

    @overload
    def __call__(
        self, func: Callable[KP, Coroutine[Any, Any, R]], /
    ) -> Callable[KP, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, func: Callable[KP, R], /) -> Callable[KP, R]: ...


class KeyedBusyDecorator(Protocol[KP, B_co]):
    """:class:`KeyedDecorator` with an ``on_busy`` that does not raise: a busy call returns
    ``B_co`` (see :class:`BusyDecorator`)."""

    @overload
    def __call__(
        self, func: Callable[KP, Coroutine[Any, Any, R]], /
    ) -> Callable[KP, Coroutine[Any, Any, R | B_co]]: ...
    @overload
    def __call__(self, func: Callable[KP, R], /) -> Callable[KP, R | B_co]: ...


class KeyedAsyncBusyDecorator(Protocol[KP, B_co]):
    """:class:`KeyedDecorator` with an async fallback: async functions only."""

    def __call__(
        self, func: Callable[KP, Coroutine[Any, Any, R]], /
    ) -> Callable[KP, Coroutine[Any, Any, R | B_co]]: ...


# What users of other lock libraries reach for, and what it is called here.
_ALIASES = {
    "timeout": "ttl= for the lease length (redis-py's Lock calls it timeout) or wait= for how "
    "long to wait (threading's timeout)",
    "blocking_timeout": "wait=",
    "expire": "ttl=",
    "expires": "ttl=",
    "lease": "ttl=",
    "lock_timeout": "ttl=",
    "blocking": "wait= (0 tries once, None waits forever)",
    "key": "name= (the key is prefix + name)",
    "redis": "provider= (the name of a registered provider; see register_provider)",
    "client": "provider= (the name of a registered provider; see register_provider)",
}


def explains_bad_arguments(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap a public constructor or decorator factory so that a call it cannot bind raises a
    TypeError naming the public callable, the bad argument and the accepted ones, instead of
    Python's, which names an internal class (``_LockOptions.__init__() got an unexpected
    keyword argument 'timeout'``). Free on a good call: the signature is consulted only
    after a TypeError."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except TypeError:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as wrong:
                raise TypeError(_explain(func, signature, args, kwargs, wrong)) from None
            raise  # raised inside, by a bad value: that message already says what is wrong

    return checked


def _explain(
    func: Callable[..., Any],
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    wrong: TypeError,
) -> str:
    params = list(signature.parameters.values())
    if func.__name__ == "__init__" and args:
        owner = type(args[0])
        what = getattr(owner, "api_name", owner.__name__)
        params = params[1:]  # self
    else:
        what = func.__name__
    accepted = [f"*{p.name}" if p.kind == p.VAR_POSITIONAL else p.name for p in params]
    hints = []
    for unknown in (k for k in kwargs if k not in signature.parameters):
        alias = _ALIASES.get(unknown)
        close = difflib.get_close_matches(unknown, accepted, n=1)
        if alias:
            hints.append(f"for {unknown}=, use {alias}")
        elif close:
            hints.append(f"{unknown}= looks like a misspelt {close[0]}=")
    hint = "".join(f"; {one}" for one in hints)
    return f"{what}() {wrong}{hint}; it accepts: {', '.join(accepted)}"


def public_signature(api: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Give the implementation of ``api`` (which takes ``**options``) the signature
    ``_options.OPTIONS`` declares for it -- its own parameters, then each option of ``api``
    not among them, keyword-only -- and explain calls that cannot bind against it."""

    def declare(func: Callable[P, R]) -> Callable[P, R]:
        own = [p for p in inspect.signature(func).parameters.values() if p.kind != p.VAR_KEYWORD]
        table = [
            inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY,
                              default=option.default_for(api), annotation=option.annotation)
            for option in options_of(api)
            if option.name not in {p.name for p in own}
        ]  # fmt: skip
        func.__signature__ = inspect.Signature([*own, *table], return_annotation="Any")  # type: ignore[attr-defined]  # read by inspect.signature
        return explains_bad_arguments(func)

    return declare

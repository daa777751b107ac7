"""What type checkers see of ``@locked`` and ``@limited``: the decorated function's parameters,
and what a call returns when the lock stays busy.

``on_busy="raise"`` (the default) returns the function as it was typed (``Callable[[F], F]``):
a busy call raises, so the result type is unchanged. Any other ``on_busy`` returns a
:class:`BusyDecorator` whose parameter is what a busy call returns instead -- ``None`` for
``"skip"``, a fallback's result type for ``on_busy=<callable>`` -- so a function returning
``T`` becomes one returning ``T | B`` (awaiting gives ``T | B`` for ``async def``). An async
fallback gives an :class:`AsyncBusyDecorator`, which takes only async functions: a sync call
could not await it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar, overload

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

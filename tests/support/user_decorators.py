"""Decorators of the kinds users put on a subclass's ``__enter__``/``__exit__`` (logging,
tracing, instrumentation): each runs a frame of its own between the ``with`` statement and the
hook, which the ownership rules must pass through (tests/integration/test_wrapped_hooks.py,
test_hook_shapes.py)."""

from __future__ import annotations

import functools
from typing import Any

import wrapt


def wrapped(method: Any) -> Any:
    """A plain function decorator (functools.wraps)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    return wrapper


def awrapped(method: Any) -> Any:
    """:func:`wrapped` for a coroutine function."""

    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await method(*args, **kwargs)

    return wrapper


class Traced:
    """A method decorator written as a class (a descriptor), as some tracing libraries do."""

    def __init__(self, method: Any) -> None:
        functools.update_wrapper(self, method)
        self.method = method

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        return self if obj is None else functools.partial(self.method, obj)


@wrapt.decorator
def wrapt_logged(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A decorator object (wrapt's)."""
    return wrapped(*args, **kwargs)


def passthrough(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A wrapper for ``wrapt.wrap_function_wrapper`` (instrumentation patching a class)."""
    return wrapped(*args, **kwargs)

"""Generators and context managers in disguise are refused, never silently unprotected.

A generator function (sync or async) returns its body unrun, and so does a
``@contextmanager``/``@asynccontextmanager`` function (its body runs at ``__enter__``). Under
``@locked`` the lease was given back as soon as that object was returned: the review found two
threads inside a "protected" generator behind an ordinary ``functools.wraps`` decorator, and
inside a ``with`` block of a ``@locked`` ``@contextmanager`` function (b02). These tests pin
the refusal at decoration where ``__wrapped__`` shows it, and at the call, with the lease given
back and the body never run, where nothing does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis
from support.samples import traced

from redlock_deco import Lock, limited, locked


def hidden(func: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that hides what it wraps (no __wrapped__): only the call can tell."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def rows(ran: list[str]) -> Iterator[int]:
    ran.append("rows")
    yield 1


async def arows(ran: list[str]) -> AsyncIterator[int]:
    ran.append("arows")
    yield 1


@contextlib.contextmanager
def session(ran: list[str]) -> Iterator[int]:
    ran.append("session")
    yield 1


@contextlib.asynccontextmanager
async def asession(ran: list[str]) -> AsyncIterator[int]:
    ran.append("asession")
    yield 1


GENERATORS = {
    "generator under wraps": traced(rows),
    "async generator under wraps": traced(arows),
    "generator under two wrappers": traced(traced(rows)),
    "partial of a wrapped generator": functools.partial(traced(rows), []),
}
CONTEXT_MANAGERS = {
    "@contextmanager": session,
    "@asynccontextmanager": asession,
    "@contextmanager under wraps": traced(session),
    "partial of @asynccontextmanager": functools.partial(asession, []),
}


@pytest.mark.parametrize("target", GENERATORS.values(), ids=GENERATORS.keys())
@pytest.mark.parametrize("decorator", [locked("g"), limited("g", 2)], ids=["locked", "limited"])
def test_generators_behind_decorators_are_refused_at_decoration(
    decorator: Any, target: Any
) -> None:
    with pytest.raises(TypeError, match=r"cannot protect generator .*with Lock\(\.\.\.\)"):
        decorator(target)


@pytest.mark.parametrize("target", CONTEXT_MANAGERS.values(), ids=CONTEXT_MANAGERS.keys())
@pytest.mark.parametrize("decorator", [locked("g"), limited("g", 2)], ids=["locked", "limited"])
def test_context_manager_functions_are_refused_at_decoration(decorator: Any, target: Any) -> None:
    with pytest.raises(
        TypeError, match=r"cannot protect context-manager function .*with Lock\(\.\.\.\)"
    ):
        decorator(target)


# -- refused at the call, where decoration cannot see it ---------------------------------------


def under_lease(r: redis.Redis, make: Callable[[list[str]], Any]) -> Callable[..., Any]:
    """``make`` behind a wrapper without __wrapped__ that notes whether the lease is held."""

    def wrapper(ran: list[str]) -> Any:
        ran.append(f"wrapper, key held: {bool(r.exists('lock:g'))}")
        return make(ran)

    return wrapper


@pytest.mark.parametrize(
    "make", [rows, arows, session, asession], ids=["generator", "async generator", "cm", "acm"]
)
def test_a_hidden_generator_or_context_manager_is_refused_at_the_call(
    r: redis.Redis, make: Callable[[list[str]], Any]
) -> None:
    protected = locked("g")(under_lease(r, make))  # nothing to see at decoration
    ran: list[str] = []
    with pytest.raises(TypeError, match=r"closed unrun.*with Lock\(\.\.\.\)"):
        protected(ran)
    assert ran == ["wrapper, key held: True"]  # the call was protected; the body never ran
    assert r.dbsize() == 0  # and the lease was given back before the error surfaced
    with Lock("g", wait=0):  # free at once for the next caller
        pass


@pytest.mark.parametrize("make", [arows, asession], ids=["async generator", "acm"])
def test_an_async_wrapper_returning_an_async_generator_is_refused_at_the_call(
    r: redis.Redis, make: Callable[[list[str]], Any]
) -> None:
    async def wrapper(ran: list[str]) -> Any:  # async def, no functools.wraps
        ran.append(f"wrapper, key held: {bool(await asyncio.to_thread(r.exists, 'lock:g'))}")
        return make(ran)

    protected = locked("g")(wrapper)
    ran: list[str] = []
    with pytest.raises(TypeError, match="closed unrun"):
        asyncio.run(protected(ran))
    assert ran == ["wrapper, key held: True"]
    assert r.dbsize() == 0


def test_a_hidden_generator_never_runs_two_callers_at_once(r: redis.Redis) -> None:
    """The review's scenario, behind a wrapper decoration cannot see through: no caller gets
    a generator to iterate, so nobody runs the body outside the lock."""
    inside, most = 0, 0
    guard = threading.Lock()

    def body() -> Iterator[int]:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        try:
            yield 1
        finally:
            with guard:
                inside -= 1

    protected = locked("g", wait=5)(hidden(body))
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for _ in protected():
                pass
        except TypeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consume) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 0 and len(errors) == 2
    assert r.dbsize() == 0


def test_ordinary_results_and_other_context_managers_are_not_refused(r: redis.Redis) -> None:
    @locked("g")
    @traced
    def plain() -> list[int]:
        return [1, 2]

    @locked("g")
    def gives_a_lock() -> threading.Lock:  # a context manager whose work is not a body
        return threading.Lock()

    assert plain() == [1, 2]
    assert isinstance(gives_a_lock(), type(threading.Lock()))
    assert r.dbsize() == 0


def test_a_generator_the_call_started_itself_is_returned(r: redis.Redis) -> None:
    """Only a body not yet run is refused: a generator the call resumed (and left suspended
    inside its own ``with Lock(...)``, say) has run under the lease as far as it chose."""

    @locked("g")
    def started() -> Iterator[int]:
        gen = rows([])
        next(gen)
        return gen

    @locked("g")
    async def astarted() -> AsyncIterator[int]:
        agen = arows([])
        await agen.__anext__()
        return agen

    async def rest() -> list[int]:
        return [item async for item in await astarted()]

    assert list(started()) == []  # resumed after its one yield: nothing left
    assert asyncio.run(rest()) == []
    assert r.dbsize() == 0

"""Options that cannot work are refused at decoration or construction, without a server:
bounds, types, combinations (shared with fencing, on_lost="cancel" for sync code), generators
in disguise; and the asyncio API mirrors the sync one."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.samples import FUZZ, every_constructor, traced

import redlock_deco
from redlock_deco import (
    KeyTemplateError,
    Lock,
    limited,
    locked,
)
from redlock_deco.asyncio import Lock as AsyncLock
from redlock_deco.asyncio import Semaphore as AsyncSemaphore


def test_generators_are_refused_at_decoration() -> None:
    with pytest.raises(TypeError, match="generator"):

        @locked("g")
        def gen() -> Iterator[int]:
            yield 1

    with pytest.raises(TypeError, match="generator"):

        @locked("g")
        async def agen() -> Any:
            yield 1


def test_the_bounds_themselves_are_accepted() -> None:
    # Not called: a 10 ms lease on a loaded machine may end before a call returns.
    for build in every_constructor():
        build(ttl=0.01, wait=0, max_hold=1e-3)
        build(ttl=1e9, wait=1e9, max_hold=1e9)


@FUZZ
@given(
    ttl=st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=3), st.none()),
    wait=st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=3), st.none()),
)
def test_bad_options_fail_at_decoration_time(ttl: Any, wait: Any) -> None:
    try:
        decorator = locked("x", ttl=ttl, wait=wait)
    except (TypeError, ValueError):
        return
    assert isinstance(ttl, (int, float)) and math.isfinite(ttl) and ttl > 0
    assert wait is None or (isinstance(wait, (int, float)) and wait >= 0)
    assert callable(decorator)


def test_bad_input_at_decoration_time() -> None:
    with pytest.raises(TypeError, match="limit"):
        limited("x")
    with pytest.raises(ValueError, match="limit"):
        limited("x", limit=0)
    with pytest.raises(ValueError, match="ttl"):
        limited("x", limit=1, ttl=0)
    with pytest.raises(KeyTemplateError, match="'nope' is not a parameter"):

        @limited("x:{nope}", limit=1)
        def f(a: int) -> None: ...

    with pytest.raises(TypeError, match="generator"):

        @limited("g", limit=1)
        def gen() -> Iterator[int]:
            yield 1


def test_refusals_are_clear_and_early() -> None:
    with pytest.raises(TypeError, match="shared must be True"):
        Lock("x", shared="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="shared must be True"):
        locked("x", shared=1)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="fencing"):
        locked("x", shared=True, fencing=True)
    with pytest.raises(ValueError, match="fencing"):
        Lock("x", shared=True, fencing=True)
    assert Lock("x", shared=True).shared and not Lock("x").shared


def test_on_lost_cancel_is_refused_for_sync_code() -> None:
    with pytest.raises(ValueError, match="async"):

        @locked("x", on_lost="cancel")
        def sync_job() -> None: ...

    with pytest.raises(ValueError, match="asyncio"):
        Lock("x", on_lost="cancel")
    AsyncLock("x", on_lost="cancel")  # fine for the asyncio primitive
    with pytest.raises(TypeError, match="on_lost"):
        locked("x", on_lost=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_hold"):
        locked("x", max_hold=0)


def test_a_wrapped_generator_method_is_refused_inside_and_outside_classmethod() -> None:
    with pytest.raises(TypeError, match="cannot protect generator"):

        class Inside:
            @classmethod
            @locked("g")
            @traced
            def items(cls) -> Iterator[int]:
                yield 1

    with pytest.raises(TypeError, match="cannot protect generator"):

        class Outside:
            @locked("g")
            @classmethod
            @traced
            def items(cls) -> Iterator[int]:
                yield 1


def test_public_api_parity_between_sync_and_async() -> None:
    for sync_cls, async_cls in [
        (redlock_deco.Lock, AsyncLock),
        (redlock_deco.Semaphore, AsyncSemaphore),
    ]:

        def public(cls: type) -> dict[str, inspect.Signature]:
            return {
                name: inspect.signature(member)
                for name, member in inspect.getmembers(cls, callable)
                if not name.startswith("_") or name == "__init__"
            }

        sync_api, async_api = public(sync_cls), public(async_cls)
        assert sync_api.keys() == async_api.keys()
        for name, signature in sync_api.items():
            assert list(signature.parameters) == list(async_api[name].parameters), name
            if name != "__init__":
                assert inspect.iscoroutinefunction(getattr(async_cls, name)), name
        assert hasattr(async_cls, "__aenter__") and hasattr(async_cls, "__aexit__")


def test_decorated_coroutine_functions_stay_coroutine_functions() -> None:
    class Svc:
        @locked("m:{self}")
        async def method(self) -> None: ...

        @classmethod
        @limited("c", limit=2)
        async def klass(cls) -> None: ...

    @locked
    async def bare() -> None: ...

    for fn in (Svc.method, Svc().method, Svc.klass, bare):
        assert inspect.iscoroutinefunction(fn), fn


def test_extend_arguments_say_set_or_add_and_the_old_form_warns() -> None:
    from redlock_deco._options import Extension, extension

    assert extension(None, None, None, 30_000) == Extension(30_000)
    assert extension(None, 5, None, 1) == Extension(5_000)
    assert extension(None, None, 2.5, 1) == Extension(2_500, additive=True)
    with pytest.warns(DeprecationWarning, match=r"redis-py's Lock.extend adds"):
        assert extension(60, None, None, 1) == Extension(60_000)
    for args, error, says in [
        ((None, 0.001, None), ValueError, r"extend\(to=\.\.\.\), the new ttl, must be"),
        ((None, None, 0), ValueError, r"extend\(by=\.\.\.\) must be .* above 0"),
        ((None, None, math.nan), ValueError, r"extend\(by=\.\.\.\)"),
        ((None, "5", None), TypeError, "number of seconds"),
        ((None, 1, 1), TypeError, "one of to= and by="),
        ((1, None, 1), TypeError, "got ttl and by"),
    ]:
        with pytest.raises(error, match=says):
            extension(*args, 1)


def test_a_negative_wait_is_refused_and_acquire_timeout_keeps_threadings_meaning() -> None:
    """API.md: ``wait < 0`` raises ValueError -- -1 too (it waited forever for a while, as
    threading's ``acquire(timeout=-1)``: a computed budget found spent at exactly -1 then
    waited forever, review 61, F2). ``acquire(timeout=-1)`` keeps threading's meaning."""
    from redlock_deco._options import acquire_wait, check_wait

    assert check_wait(math.inf) is None and Lock("x", wait=math.inf).options.wait is None
    assert check_wait(None) is None and acquire_wait(True, None, 10.0) == 10.0  # not given
    assert acquire_wait(True, -1, 10.0) is None and acquire_wait(True, math.inf, 10.0) is None
    for spent in (-1, -1.0):
        with pytest.raises(ValueError, match="wait must be"):
            check_wait(spent)
        with pytest.raises(ValueError, match="wait must be"):
            Lock("x", wait=spent)
        with pytest.raises(ValueError, match="wait must be"):
            locked("x", wait=spent)
    for bad in (-2, -0.5, math.nan):
        with pytest.raises(ValueError, match="wait must be"):
            check_wait(bad)
        with pytest.raises(ValueError, match=r"(timeout|wait) must be"):
            acquire_wait(True, bad, 10.0)

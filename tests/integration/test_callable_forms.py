"""Every callable form ``@locked`` decorates, sync and async: two callers rendering the same
name never overlap (threads, tasks, and two processes), or the form is refused with a clear
error.

Forms: plain function, bound method (decorating ``obj.meth``), method decorated in the class
body, classmethod/staticmethod with ``@locked`` inside and outside, ``functools.partial``,
callable object, a function under a plain ``functools.wraps`` decorator, lambda, two redlock
decorators stacked, and a plain decorator stacked above. Where a form has objects, the two
callers use different objects with the same template field value.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from support import forms_workers

from redlock_deco import KeyTemplateError, LockNotAcquired, current_lease, limited, locked
from redlock_deco.testing import RedisServer

HOLD = 0.05  # each body sleeps this long: an unprotected second caller would overlap it
WAIT = 10
T = "order:{order_id}"
KEY = "lock:order:42"

Caller = Callable[[], Any]  # returns the result (sync flavour) or a coroutine (async flavour)


class Gauge:
    """How many bodies ran at once, and under which lease key each one ran."""

    def __init__(self) -> None:
        self.inside = 0
        self.peak = 0
        self.keys: list[str | None] = []
        self._mu = threading.Lock()

    def enter(self) -> None:
        lease = current_lease(None)
        with self._mu:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            self.keys.append(None if lease is None else lease.key)

    def leave(self) -> None:
        with self._mu:
            self.inside -= 1


def hold(gauge: Gauge, order_id: int) -> int:
    gauge.enter()
    time.sleep(HOLD)
    gauge.leave()
    return order_id


async def hold_async(gauge: Gauge, order_id: int) -> int:
    gauge.enter()
    await asyncio.sleep(HOLD)
    gauge.leave()
    return order_id


def traced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A typical plain decorator: sync, functools.wraps, passes the result through."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


# -- the forms, sync -------------------------------------------------------------------------


def function(gauge: Gauge, order_id: int) -> int:
    return hold(gauge, order_id)


class Account:
    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge

    def charge(self, order_id: int) -> int:
        return hold(self.gauge, order_id)

    @locked(T, wait=WAIT)
    def charge_locked(self, order_id: int) -> int:
        return hold(self.gauge, order_id)

    @classmethod
    @locked(T, wait=WAIT)
    def class_inner(cls, gauge: Gauge, order_id: int) -> int:
        return hold(gauge, order_id)

    @locked(T, wait=WAIT)  # type: ignore[arg-type]  # decorating the classmethod object itself
    @classmethod
    def class_outer(cls, gauge: Gauge, order_id: int) -> int:
        return hold(gauge, order_id)

    @staticmethod
    @locked(T, wait=WAIT)
    def static_inner(gauge: Gauge, order_id: int) -> int:
        return hold(gauge, order_id)

    @locked(T, wait=WAIT)
    @staticmethod
    def static_outer(gauge: Gauge, order_id: int) -> int:
        return hold(gauge, order_id)

    def __call__(self, order_id: int) -> int:
        return hold(self.gauge, order_id)


# -- the same forms, async -------------------------------------------------------------------


async def async_function(gauge: Gauge, order_id: int) -> int:
    return await hold_async(gauge, order_id)


class AsyncAccount:
    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge

    async def charge(self, order_id: int) -> int:
        return await hold_async(self.gauge, order_id)

    @locked(T, wait=WAIT)
    async def charge_locked(self, order_id: int) -> int:
        return await hold_async(self.gauge, order_id)

    @classmethod
    @locked(T, wait=WAIT)
    async def class_inner(cls, gauge: Gauge, order_id: int) -> int:
        return await hold_async(gauge, order_id)

    @locked(T, wait=WAIT)  # type: ignore[arg-type]  # decorating the classmethod object itself
    @classmethod
    async def class_outer(cls, gauge: Gauge, order_id: int) -> int:
        return await hold_async(gauge, order_id)

    @staticmethod
    @locked(T, wait=WAIT)
    async def static_inner(gauge: Gauge, order_id: int) -> int:
        return await hold_async(gauge, order_id)

    @locked(T, wait=WAIT)
    @staticmethod
    async def static_outer(gauge: Gauge, order_id: int) -> int:
        return await hold_async(gauge, order_id)

    async def __call__(self, order_id: int) -> int:
        return await hold_async(self.gauge, order_id)


def forms(flavour: str, g: Gauge) -> dict[str, list[Caller]]:
    """Two callers per form, both rendering ``order:42``."""
    fn: Callable[..., Any] = function if flavour == "sync" else async_function
    cls: Any = Account if flavour == "sync" else AsyncAccount
    a, b = cls(g), cls(g)  # different objects, the same order id

    def deco(target: Callable[..., Any]) -> Callable[..., Any]:
        return locked(T, wait=WAIT)(target)

    p = functools.partial
    found = {
        "function": [p(deco(fn), g, 42)] * 2,
        "bound_method": [p(deco(a.charge), 42), p(deco(b.charge), 42)],
        "class_body_method": [p(a.charge_locked, 42), p(b.charge_locked, 42)],
        "classmethod_inner": [p(cls.class_inner, g, 42), p(a.class_inner, g, 42)],
        "classmethod_outer": [p(cls.class_outer, g, 42), p(b.class_outer, g, 42)],
        "staticmethod_inner": [p(cls.static_inner, g, 42), p(a.static_inner, g, 42)],
        "staticmethod_outer": [p(cls.static_outer, g, 42), p(b.static_outer, g, 42)],
        "partial": [p(deco(p(fn, g)), 42), p(deco(p(fn, g)), 42)],  # two partial objects
        "callable_object": [p(deco(a), 42), p(deco(b), 42)],
        "wraps_wrapped": [p(deco(traced(fn)), g, 42)] * 2,
        "plain_decorator_above": [p(traced(deco(fn)), g, 42)] * 2,
        "two_redlock_decorators": [p(locked("batch:{order_id}", wait=WAIT)(deco(fn)), g, 42)] * 2,
    }
    if flavour == "sync":  # there is no async lambda: see the coroutine-returning one below
        found["lambda"] = [p(deco(lambda gauge, order_id: hold(gauge, order_id)), g, 42)] * 2
    return found


CASES = [(form, flavour) for flavour in ("sync", "async") for form in forms(flavour, Gauge())]


def run_threads(callers: list[Caller]) -> list[Any]:
    """Each caller in its own thread, all started together; their results (or errors)."""
    start = threading.Barrier(len(callers))
    results: list[Any] = [None] * len(callers)

    def run(i: int) -> None:
        start.wait(10)
        try:
            results[i] = callers[i]()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(callers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def run_tasks(callers: list[Caller]) -> list[Any]:
    async def main() -> list[Any]:
        return await asyncio.gather(*(call() for call in callers), return_exceptions=True)

    return asyncio.run(main())


@pytest.mark.parametrize(("form", "flavour"), CASES)
def test_two_callers_of_one_rendered_name_never_overlap(
    form: str, flavour: str, r: redis.Redis
) -> None:
    gauge = Gauge()
    callers = forms(flavour, gauge)[form]
    results = run_threads(callers) if flavour == "sync" else run_tasks(callers)
    assert results == [42, 42]
    assert gauge.peak == 1  # the second body waited for the first: real exclusion
    assert gauge.keys == [KEY, KEY]  # each body ran under the lease, with the name meant
    assert r.dbsize() == 0  # every lease given back


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_limited_takes_the_same_forms(flavour: str, r: redis.Redis) -> None:
    gauge = Gauge()
    cls: Any = Account if flavour == "sync" else AsyncAccount
    slot = limited(T, limit=1, wait=WAIT)
    # A bound method and a callable object of different objects, rendering one name.
    callers = [
        functools.partial(slot(cls(gauge).charge), 42),
        functools.partial(slot(cls(gauge)), 42),
    ]
    results = run_threads(callers) if flavour == "sync" else run_tasks(callers)
    assert results == [42, 42]
    assert gauge.peak == 1
    assert gauge.keys == ["sem:order:42", "sem:order:42"]
    assert r.dbsize() == 0


def test_name_none_on_a_bound_method_is_the_class_body_lock(r: redis.Redis) -> None:
    class Shared:
        def work(self, release: threading.Event) -> None:
            release.wait(10)

    in_class = locked()(Shared.work)  # the function, as decorating in the class body does
    by_object = locked(wait=0)(Shared().work)
    release = threading.Event()
    holder = threading.Thread(target=in_class, args=(Shared(), release), daemon=True)
    holder.start()
    deadline = time.monotonic() + 5
    while not r.keys("lock:*") and time.monotonic() < deadline:
        time.sleep(0.005)
    try:
        with pytest.raises(LockNotAcquired) as info:
            by_object(release)  # another object, the same method: the same lock
    finally:
        release.set()
        holder.join(10)
    assert info.value.name.endswith(".<locals>.Shared.work")


def test_async_forms_take_the_async_path() -> None:
    """Calling each async form returns a coroutine: the lease is taken when it is awaited,
    by the task that runs the body (not released before the body starts)."""
    for form, callers in forms("async", Gauge()).items():
        coroutine = callers[0]()
        assert asyncio.iscoroutine(coroutine), form
        coroutine.close()


# -- refused forms ---------------------------------------------------------------------------


def test_a_lambda_returning_a_coroutine_is_closed_unrun_and_refused(r: redis.Redis) -> None:
    gauge = Gauge()
    decorated = locked(T)(lambda gauge, order_id: hold_async(gauge, order_id))
    with pytest.raises(TypeError, match=r"returned coroutine.*closed unrun.*async def"):
        decorated(gauge, 42)
    assert gauge.keys == []  # the body never ran (and no "never awaited" warning either)
    assert r.dbsize() == 0  # the lease was given back before the error surfaced


def test_a_sync_wrapper_returning_a_coroutine_is_refused_with_several_names(
    r: redis.Redis,
) -> None:
    gauge = Gauge()

    def no_wraps(order_id: int) -> Any:  # hides the coroutine function: no __wrapped__
        return hold_async(gauge, order_id)

    decorated = locked("a:{order_id}", "b:{order_id}")(no_wraps)
    with pytest.raises(TypeError, match="closed unrun"):
        decorated(42)
    assert gauge.keys == []
    assert r.dbsize() == 0


def test_generators_in_disguise_are_refused_at_decoration() -> None:
    def numbers(n: int) -> Any:
        yield n

    class Numbers:
        def __call__(self, n: int) -> Any:
            yield n

    for target in (functools.partial(numbers, 1), Numbers(), Numbers().__call__):
        with pytest.raises(TypeError, match="cannot protect generator"):
            locked("g")(target)


def test_a_bound_method_has_no_self_field() -> None:
    with pytest.raises(KeyTemplateError, match=r"bound method.*class body") as info:
        locked("acct:{self.gauge}:{order_id}")(Account(Gauge()).charge)
    assert info.value.field == "self.gauge"
    assert "parameters are: order_id" in str(info.value)


def test_a_builtin_without_a_signature_is_refused_with_a_template() -> None:
    with pytest.raises(TypeError, match=r"cannot read the parameters of builtins\.max"):
        locked("m:{a}")(max)
    assert locked("fixed")(max)(1, 2) == 2  # a fixed name needs no parameters


def test_a_callable_given_first_and_then_a_value_says_what_happened() -> None:
    account = Account(Gauge())
    decorator: Any = locked(account.charge)  # taken as the name callable, not the target
    with pytest.raises(TypeError, match=r"taken as the lock name callable.*locked\(\)\(it\)"):
        decorator(42)


# -- across processes ------------------------------------------------------------------------

spawn = multiprocessing.get_context("spawn")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_forms_exclude_across_processes_and_default_names_agree(
    server: RedisServer, r: redis.Redis
) -> None:
    times = 12
    barrier, out = spawn.Barrier(2), spawn.Queue()
    procs = [
        spawn.Process(target=forms_workers.contend_into, args=(server.url, times, barrier, out))
        for _ in range(2)
    ]
    for proc in procs:
        proc.start()
    try:
        reports = [out.get(timeout=60) for _ in procs]
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    for form in ("function", "partial", "bound_method", "callable_object"):
        assert int(r.get(f"count:{form}") or 0) == 2 * times, form  # 0 lost updates
    assert int(r.get("count:async_callable_object") or 0) == 2 * times
    for report in reports:
        assert set(report["peaks"].values()) == {1}, report["peaks"]
    expected = {
        "bound_method": "support.forms_workers.Named.meth",
        "partial": "support.forms_workers.lease_name",
        "callable_object": "support.forms_workers.Named.__call__",
    }
    assert reports[0]["names"] == reports[1]["names"] == expected
    assert forms_workers.default_names() == expected  # and in this process too

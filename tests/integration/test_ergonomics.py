"""What users of other lock libraries reach for: ``acquire(blocking, timeout)`` in
threading.Lock's meaning beside ``wait=``, ``on_busy=<fallback>``, and TypeErrors that name
the public callable, the bad option and the accepted ones -- sync and asyncio, on a real
server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from support.flavours import Api

import redlock_deco
import redlock_deco.asyncio
from redlock_deco import Lock, Semaphore, limited, locked


async def held_elsewhere(api: Api, name: str, seconds: float, limit: int = 0) -> Any:
    """Another owner (thread or task) holds lock ``name`` (semaphore, with a ``limit``) for
    ``seconds``; returns its handle once it holds it."""
    holding: list[bool] = []

    async def hold() -> None:
        async with api.Semaphore(name, limit=limit) if limit else api.Lock(name, ttl=30):
            holding.append(True)
            await api.sleep(seconds)

    handle = api.spawn(hold)
    deadline = time.monotonic() + 10
    while not holding:
        assert time.monotonic() < deadline
        await api.sleep(0.005)
    return handle


# -- acquire(blocking, timeout) ----------------------------------------------------------


def test_blocking_false_tries_once_whatever_the_objects_wait(api: Api) -> None:
    async def scenario(api: Api) -> None:
        free = api.Lock("free", wait=10)
        assert await free.acquire(False)  # positional, as threading.Lock takes it
        await free.release()
        handle = await held_elsewhere(api, "busy", 0.5)
        busy = api.Lock("busy", wait=10)
        started = time.monotonic()
        assert await busy.acquire(blocking=False) is False
        assert await busy.acquire(False, -1) is False  # threading's default timeout, allowed
        assert time.monotonic() - started < 0.3  # tried once, not for wait=10
        await api.join(handle)

    api.run(scenario)


def test_timeout_bounds_the_wait_and_minus_one_waits_past_the_objects_wait(api: Api) -> None:
    async def scenario(api: Api) -> None:
        handle = await held_elsewhere(api, "t", 0.6)
        lock = api.Lock("t", wait=0.05)
        started = time.monotonic()
        assert await lock.acquire(timeout=0.2) is False
        assert 0.15 < time.monotonic() - started < 0.5  # its own bound, not wait=0.05
        assert await lock.acquire(timeout=-1)  # forever: past the holder's 0.6 s
        assert time.monotonic() - started > 0.5
        await lock.release()
        await api.join(handle)

    api.run(scenario)


def test_no_timeout_waits_the_objects_wait_and_wait_keyword_still_works(api: Api) -> None:
    async def scenario(api: Api) -> None:
        handle = await held_elsewhere(api, "w", 0.6)
        lock = api.Lock("w", wait=0.1)
        started = time.monotonic()
        assert await lock.acquire() is False  # timeout=None: the object's wait, not forever
        assert time.monotonic() - started < 0.5
        assert await lock.acquire(wait=5)  # the pre-existing keyword, unchanged
        await lock.release()
        sem = api.Semaphore("w", limit=1)
        assert await sem.acquire(False) and not await sem.acquire(timeout=0)
        await sem.release()
        await api.join(handle)

    api.run(scenario)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"blocking": False, "timeout": 3}, ValueError, "can't specify a timeout for a non-blo"),
        ({"blocking": 5}, TypeError, "pass timeout=S"),
        ({"timeout": -2}, ValueError, "or -1 to wait forever"),
        ({"timeout": "soon"}, TypeError, "timeout must be seconds"),
        ({"timeout": 1, "wait": 1}, TypeError, "not both"),
        ({"blocking": False, "wait": 0}, TypeError, "not both"),
    ],
)
def test_acquire_arguments_that_cannot_mean_anything(
    api: Api, arguments: dict[str, object], error: type[Exception], message: str
) -> None:
    async def scenario(api: Api) -> None:
        for primitive in (api.Lock("bad"), api.Semaphore("bad", limit=2)):
            with pytest.raises(error, match=message):
                await primitive.acquire(**arguments)
            assert primitive.lease is None  # refused before anything was sent

    api.run(scenario)


# -- on_busy=<fallback> ------------------------------------------------------------------


def test_a_fallback_gets_the_calls_arguments_and_its_result_is_returned(api: Api) -> None:
    ran: list[object] = []
    asked: list[tuple[Any, ...]] = []

    async def charge(order_id: int, amount: float = 1.0, *, note: str = "") -> str:
        ran.append(order_id)
        return "charged"

    def later(*args: Any, **kwargs: Any) -> str:
        asked.append((args, kwargs))
        return "queued for later"

    busy = api.decorate(locked("order:{order_id}", wait=0, on_busy=later), charge)
    several = api.decorate(locked("a:{order_id}", "b:{order_id}", wait=0, on_busy=later), charge)
    slots = api.decorate(limited("s:{order_id}", 1, wait=0, on_busy=later), charge)

    async def scenario(api: Api) -> None:
        assert await api.call(busy, 7, 2.5, note="x") == "charged"  # free: the function runs
        handles = [await held_elsewhere(api, name, 0.4) for name in ("order:7", "b:7")]
        handles.append(await held_elsewhere(api, "s:7", 0.4, limit=1))
        assert await api.call(busy, 7, 2.5, note="x") == "queued for later"
        assert await api.call(several, 7) == "queued for later"
        assert await api.call(slots, 7, amount=3) == "queued for later"
        for handle in handles:
            await api.join(handle)

    api.run(scenario)
    assert ran == [7]  # never called while busy
    assert asked == [((7, 2.5), {"note": "x"}), ((7,), {}), ((7,), {"amount": 3})]


async def later_async(self: Account, amount: int) -> str:
    await asyncio.sleep(0)
    return f"later {self.id} {amount}"


class Account:
    def __init__(self, account_id: int) -> None:
        self.id = account_id

    @locked("acct:{self.id}", wait=0, on_busy=lambda self, amount: ("later", self.id, amount))
    def withdraw(self, amount: int) -> tuple[str, int, int]:
        return ("done", self.id, amount)

    @classmethod
    @locked("open:{kind}", wait=0, on_busy=lambda cls, kind: ("later", cls.__name__, kind))
    def open(cls, kind: str) -> tuple[str, str, str]:
        return ("done", cls.__name__, kind)

    @locked("acct:{self.id}", wait=0, on_busy=lambda self, amount: asyncio.sleep(0, "later"))
    async def deposit(self, amount: int) -> str:
        return "done"

    @locked("acct:{self.id}", wait=0, on_busy=later_async)
    async def deposit_or_later(self, amount: int) -> str:
        return "done"


def test_methods_hand_self_and_cls_to_the_fallback() -> None:
    account = Account(1)
    with Lock("acct:1"):
        assert run_elsewhere(lambda: account.withdraw(5)) == ("later", 1, 5)
    with Lock("open:savings"):
        assert run_elsewhere(lambda: Account.open("savings")) == ("later", "Account", "savings")
    assert account.withdraw(5) == ("done", 1, 5)


def test_async_functions_await_an_async_fallback_or_an_awaitable_a_sync_one_returns() -> None:
    account = Account(2)

    async def scenario() -> tuple[object, ...]:
        async with redlock_deco.asyncio.Lock("acct:2"):
            other = asyncio.create_task  # another task: another owner
            return (
                await other(account.deposit(1)),
                await other(account.deposit_or_later(3)),
            )

    assert asyncio.run(scenario()) == ("later", "later 2 3")


def run_elsewhere(call: Callable[[], Any]) -> Any:
    """Run ``call`` in another thread (another owner) and return its result."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    thread.join(10)
    return out[0]


def test_a_sync_fallback_that_returns_a_coroutine_for_a_sync_function_is_refused() -> None:
    async def never() -> str:
        return "never"

    @locked("sync:job", wait=0, on_busy=lambda: never())
    def job() -> str:
        return "ran"

    with Lock("sync:job"), pytest.raises(TypeError, match="closed unrun"):
        run_elsewhere_raising(job)


def run_elsewhere_raising(call: Callable[[], Any]) -> None:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(10)
    raise errors[0]


def test_fallbacks_that_cannot_work_fail_at_decoration() -> None:
    async def async_fallback(x: int) -> None: ...

    def sync_function(x: int) -> None: ...

    cases: list[tuple[Callable[[], object], type[Exception], str]] = [
        (lambda: locked("x", on_busy=async_fallback)(sync_function), TypeError, "is async but"),
        (lambda: locked("x", on_busy=lambda: None)(sync_function), TypeError, "cannot take"),
        (lambda: limited("x", 2, on_busy=lambda y, z: None)(sync_function), TypeError, "take"),
        (lambda: locked("x", on_busy=42), TypeError, "'raise', 'skip' or a callable"),  # type: ignore[call-overload]  # refused
        (lambda: locked("x", on_busy="ignore"), ValueError, "on_busy must be one of"),  # type: ignore[call-overload]  # refused
    ]
    for decorate, error, message in cases:
        with pytest.raises(error, match=message):
            decorate()


# -- clear TypeErrors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "names"),
    [
        (lambda: Lock("x", timeout=5), ["Lock()", "'timeout'", "ttl=", "wait=", "fencing"]),
        (
            lambda: redlock_deco.asyncio.Lock("x", blocking_timeout=5),
            ["redlock_deco.asyncio.Lock()", "'blocking_timeout'", "use wait="],
        ),
        (lambda: Semaphore("x", limts=3), ["Semaphore()", "'limit'", "max_hold"]),
        (lambda: redlock_deco.asyncio.Semaphore(), ["redlock_deco.asyncio.Semaphore()", "name"]),
        (lambda: locked("x", expire=5), ["locked()", "'expire'", "use ttl=", "on_busy"]),
        (lambda: limited("x", 2, wiat=1), ["limited()", "'wiat'", "misspelt wait="]),
        (lambda: Lock("x", 1), ["Lock()", "positional", "name, ttl"]),
    ],
)
def test_unknown_options_name_the_option_and_the_accepted_ones(
    build: Callable[[], object], names: list[str]
) -> None:
    with pytest.raises(TypeError) as caught:
        build()
    message = str(caught.value)
    assert all(name in message for name in names), message
    assert "_LockOptions" not in message and "_SemaphoreOptions" not in message
    assert "__init__" not in message


def test_bad_values_keep_their_own_message() -> None:
    with pytest.raises(TypeError, match=r"^ttl must be a number of seconds"):
        Lock("x", ttl="5")  # type: ignore[arg-type]  # refused
    with pytest.raises(ValueError, match="limit must be >= 1"):
        Semaphore("x", limit=0)


def make_class(decorator: Callable[[Any], Any]) -> Callable[[], object]:
    def build() -> object:
        @decorator
        class Job:
            def run(self) -> None: ...

        return Job

    return build


@pytest.mark.parametrize(
    "decorator",
    [locked, locked("job"), locked(wait=0), limited(limit=2), limited("job", 2)],
    ids=["bare", "named", "options", "limited", "limited-named"],
)
def test_decorating_a_class_says_to_decorate_its_methods(decorator: Any) -> None:
    with pytest.raises(TypeError, match=r"cannot decorate class .*Job: .*decorate the methods"):
        make_class(decorator)()


def test_limited_bare_on_a_class_says_the_same() -> None:
    class Job: ...

    with pytest.raises(TypeError, match="cannot decorate class"):
        limited(Job)  # type: ignore[call-overload]  # refused

"""What type checkers must infer for decorated functions: checked, never run, by mypy --strict
and pyright (tests/test_typing.py). ``assert_type`` fails the check when an inferred type
differs; each ignore comment fails it when the error it expects disappears (unused ignores
are errors in both tools), so the rejected forms stay rejected."""

from __future__ import annotations

from typing import Literal

from typing_extensions import assert_type  # typing.assert_type is 3.11+; we check for 3.10

from redlock_deco import Lease, Lock, Released, Semaphore, current_lease, limited, locked
from redlock_deco import asyncio as aio


@locked("order:{order_id}")
def charge(order_id: int, amount: float = 1.0) -> str:
    return f"{order_id}:{amount}"


@locked("order:{order_id}", on_busy="raise")
def charge_raising(order_id: int) -> str:
    return str(order_id)


@locked("order:{order_id}", wait=0, on_busy="skip")
def charge_or_skip(order_id: int) -> str:
    return str(order_id)


@locked
def bare() -> int:
    return 1


@locked("job:{job}")
async def run(job: str) -> int:
    return len(job)


@locked("job:{job}", on_busy="skip")
async def run_or_skip(job: str) -> int:
    return len(job)


@limited("api:{tenant}", 3)
def call_api(tenant: str) -> bytes:
    return tenant.encode()


@limited("api:{tenant}", limit=3, on_busy="skip")
def call_api_or_skip(tenant: str) -> bytes:
    return tenant.encode()


@limited(limit=2, on_busy="skip")
async def export_or_skip(fmt: str) -> bytes:
    return fmt.encode()


def cached_charge(order_id: int) -> str:
    return f"cached {order_id}"


async def run_later(job: str) -> bytes:
    return job.encode()


@locked("order:{order_id}", wait=0, on_busy=cached_charge)
def charge_or_cached(order_id: int) -> int:
    return order_id


@locked("job:{job}", on_busy=run_later)
async def run_or_later(job: str) -> int:
    return len(job)


def no_quota(tenant: str) -> float:
    return 0.0


@limited("api:{tenant}", limit=3, on_busy=no_quota)
async def call_api_or_zero(tenant: str) -> bytes:
    return tenant.encode()


def sync_job(job: str) -> int:
    return len(job)


class Account:
    def __init__(self, account_id: int) -> None:
        self.id = account_id

    @locked("acct:{self.id}", on_busy="skip")
    def withdraw(self, amount: int) -> int:
        return amount

    @classmethod
    @locked("{cls.__name__}:open", on_busy="skip")
    def open_inside(cls, count: int) -> list[Account]:
        return [cls(i) for i in range(count)]

    @locked("{cls.__name__}:open", on_busy="skip")
    @classmethod
    def open_outside(cls, count: int) -> list[Account]:
        return [cls(i) for i in range(count)]

    @locked("ledger:{day}")
    @staticmethod
    def close_day(day: str) -> str:
        return day

    @locked("ledger:{day}", on_busy="skip")
    @staticmethod
    async def close_day_or_skip(day: str) -> str:
        return day


def order_key(order_id: int, amount: float = 1.0) -> str:
    """A typed key function: the decorated function must take exactly these parameters."""
    return f"order:{order_id}"


@locked(name=order_key)
def keyed_charge(order_id: int, amount: float = 1.0) -> str:
    return f"{order_id}:{amount}"


@locked(name=order_key, wait=0, on_busy="skip")
async def keyed_charge_or_skip(order_id: int, amount: float = 1.0) -> str:
    return f"{order_id}:{amount}"


@limited(name=order_key, limit=2)
def keyed_export(order_id: int, amount: float = 1.0) -> bytes:
    return b""


class Crawler:
    def host_key(self, url: str) -> str:
        return url.split("/")[2]

    @locked(name=host_key)
    def fetch(self, url: str) -> int:
        return len(url)


async def results() -> None:
    # on_busy="raise" (the default, or said): the result type is unchanged.
    assert_type(charge(7), str)
    assert_type(charge(7, amount=2.5), str)
    assert_type(charge_raising(7), str)
    assert_type(bare(), int)
    assert_type(await run("x"), int)
    assert_type(call_api("acme"), bytes)
    # on_busy="skip": a busy call returns None instead; for async def, awaiting gives it.
    assert_type(charge_or_skip(7), str | None)
    assert_type(await run_or_skip("x"), int | None)
    assert_type(call_api_or_skip("acme"), bytes | None)
    assert_type(await export_or_skip("csv"), bytes | None)
    # Methods: self and cls are bound; classmethod/staticmethod inside or outside.
    account = Account(1)
    assert_type(account.withdraw(5), int | None)
    assert_type(Account.open_inside(2), list[Account] | None)
    assert_type(Account.open_outside(2), list[Account] | None)
    assert_type(Account.close_day("d"), str)
    assert_type(await Account.close_day_or_skip("d"), str | None)
    # on_busy=<fallback>: its result instead (an async fallback's awaited result).
    assert_type(charge_or_cached(7), int | str)
    assert_type(await run_or_later("x"), int | bytes)
    assert_type(await call_api_or_zero("acme"), bytes | float)
    # name=<typed def>: the key function's parameters are the function's; types unchanged.
    assert_type(keyed_charge(7), str)
    assert_type(await keyed_charge_or_skip(7, 2.0), str | None)
    assert_type(keyed_export(7), bytes)
    assert_type(Crawler().fetch("https://example.com/a"), int)
    # Inside a protected call the lease is always there (outside, current_lease() raises).
    assert_type(current_lease(), Lease)
    assert_type(current_lease(None), Lease | None)
    assert_type(current_lease().remaining(), float)
    assert_type(current_lease().fencing_token, int | None)
    # The primitives: `with` gives the object itself; lease is None unless held.
    with Lock("order:7") as lock, Semaphore("api", limit=3) as slot:
        assert_type(lock, Lock)
        assert_type(slot, Semaphore)
        assert_type(lock.lease, Lease | None)
    async with aio.Lock("order:7") as alock:
        assert_type(alock, aio.Lock)
        assert_type(await alock.acquire(wait=0), bool)
        assert_type(await alock.acquire(False), bool)
    # threading.Lock's acquire, beside wait=; the operator's force release.
    assert_type(Lock("x").acquire(blocking=False), bool)
    assert_type(Semaphore("x", limit=2).acquire(True, timeout=1.5), bool)
    assert_type(Lock.force_release("order:7"), Released)
    assert_type(await aio.Semaphore.force_release("api", provider="p"), Released)
    # label=: a fixed name for events and metrics, on every callable; the types are unchanged.
    assert_type(Lock("order:7", label="orders"), Lock)
    assert_type(aio.Semaphore("api:acme", limit=3, label="api"), aio.Semaphore)
    assert_type(labelled_charge(7), str | None)


@locked("order:{order_id}", wait=0, on_busy="skip", label="orders")
def labelled_charge(order_id: int) -> str:
    return str(order_id)


def configured(mode: Literal["raise", "skip"]) -> None:
    # on_busy known only to be one of the two: a call may return None.
    @locked("job", on_busy=mode)
    def job() -> int:
        return 1

    assert_type(job(), int | None)


def rejected() -> None:
    # The decorated function keeps its parameter types.
    charge("seven")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    charge_or_skip(7, 8)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    # limit is required by @limited's type, as at run time.
    limited("api:{tenant}")  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue]
    # on_busy takes "raise", "skip" or a fallback callable; an async fallback needs an async
    # function (a sync call cannot await it).
    locked("x", on_busy=run_later)(sync_job)  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]
    locked("x", on_busy="ignore")  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    # A label is a str (or None), never a callable or bytes.
    Lock("x", label=b"orders")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    locked("x", label=len)  # type: ignore[call-overload]  # pyright: ignore[reportArgumentType]
    # Semaphore has no default limit either.
    Semaphore("api")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    # A function whose parameters are not its key function's: a type error where written.
    locked(name=order_key)(renamed)  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]
    limited(name=order_key, limit=2)(retyped)  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]


def renamed(order: int, amount: float = 1.0) -> str:
    return str(order)


def retyped(order_id: str, amount: float = 1.0) -> str:
    return order_id

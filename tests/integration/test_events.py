"""Events: acquired (time waited), released (time held), busy, lost, renewed -- sync and
async -- the logging listener, listeners that fail, and the labels every event carries
(template, function, provider) for each way of naming a lock."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from support.flavours import Api
from support.samples import wait_until

from redlock_deco import (
    Lock,
    LockEvent,
    LockLost,
    LockNotOwned,
    LoggingListener,
    add_listener,
    locked,
    remove_listener,
)
from redlock_deco import _events as events_module
from redlock_deco import asyncio as aio
from redlock_deco.testing import RedisServer


@pytest.fixture
def recorded() -> Iterator[list[LockEvent]]:
    seen: list[LockEvent] = []
    add_listener(seen.append)
    yield seen
    remove_listener(seen.append)


def test_every_kind_of_event(api: Api, r: redis.Redis, recorded: list[LockEvent]) -> None:
    async def held_a_while() -> None:
        await api.sleep(0.25)  # past a renewal (ttl/3 = 0.1 s)

    async def loses_it() -> None:
        r.delete("lock:ev:lost")
        await api.sleep(0.25)

    renewed = api.decorate(locked("ev:renewed", ttl=0.3), held_a_while)
    lost = api.decorate(locked("ev:lost", ttl=0.3), loses_it)
    busy = api.decorate(locked("ev:busy", wait=0.05), held_a_while)

    async def scenario(api: Api) -> None:
        await api.call(renewed)
        with pytest.raises(LockLost):
            await api.call(lost)
        async with api.Lock("ev:busy"):

            async def attempt() -> None:
                from redlock_deco import LockNotAcquired

                with pytest.raises(LockNotAcquired):
                    await api.call(busy)

            await api.join(api.spawn(attempt))

    api.run(scenario)
    kinds = [(e.kind, e.name) for e in recorded]
    assert ("acquired", "ev:renewed") in kinds and ("renewed", "ev:renewed") in kinds
    assert ("released", "ev:renewed") in kinds
    assert kinds.count(("lost", "ev:lost")) == 1  # found by renewal, reported once
    assert ("busy", "ev:busy") in kinds
    held = next(e for e in recorded if e.kind == "released" and e.name == "ev:renewed")
    assert held.seconds is not None and 0.25 <= held.seconds < 1.0
    waited = next(e for e in recorded if e.kind == "busy")
    assert waited.seconds is not None and 0.04 < waited.seconds < 0.5


def test_logging_listener_and_failing_listeners(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: Any) -> None:
        raise RuntimeError("listener bug")

    listener = LoggingListener(level=logging.WARNING)
    add_listener(broken)
    add_listener(listener)
    try:
        with caplog.at_level(logging.INFO):

            @locked("logged")
            def f() -> str:
                return "still works"

            assert f() == "still works"  # a failing listener never breaks the call
    finally:
        remove_listener(broken)
        remove_listener(listener)
    messages = [rec.getMessage() for rec in caplog.records]
    assert any(m.startswith("acquired logged (lock:logged)") for m in messages)
    assert any(m.startswith("released logged (lock:logged), held") for m in messages)
    assert any("listener" in m and "failed" in m for m in messages)
    assert r.dbsize() == 0


def test_listeners_are_removed_and_validated() -> None:
    seen: list[LockEvent] = []
    add_listener(seen.append)
    remove_listener(seen.append)

    @locked("quiet")
    def f() -> None: ...

    f()
    assert seen == []
    with pytest.raises(TypeError):
        add_listener(42)  # type: ignore[arg-type]


# -- labels: template, function, provider ---------------------------------------------------


def _name_fn(order_id: int) -> str:
    return f"cb:{order_id}"


class Account:
    def __init__(self, account_id: int) -> None:
        self.id = account_id

    @locked("acct:{self.id}")
    def debit(self) -> None: ...


def qualified(func: Any) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def test_events_carry_the_template_the_function_and_the_provider(
    server: RedisServer, recorded: list[LockEvent]
) -> None:
    from redlock_deco import Lock, Semaphore, limited, register_provider

    register_provider("orders", server.url)

    @locked("order:{order_id}", provider="orders")
    def charge(order_id: int) -> None: ...

    @locked
    def nightly() -> None: ...

    @locked(name=_name_fn)
    def by_callable(order_id: int) -> None: ...

    @locked("acct:{src}", "acct:{dst}")
    def transfer(src: int, dst: int) -> None: ...

    @limited("partner:{tenant}", limit=2)
    def call_partner(tenant: str) -> None: ...

    for order_id in (1, 2):  # two names, one template: one label
        charge(order_id)
    nightly()
    by_callable(3)
    transfer(1, 2)
    call_partner("acme")
    Account(9).debit()
    with Lock("direct:5"), Semaphore("slots:x", limit=2):
        pass

    def labels(name: str) -> set[tuple[str, str | None, str]]:
        return {(e.template, e.function, e.provider) for e in recorded if e.name == name}

    assert (
        labels("order:1")
        == labels("order:2")
        == {("order:{order_id}", qualified(charge), "orders")}
    )
    assert labels(qualified(nightly)) == {(qualified(nightly), qualified(nightly), "default")}
    assert labels("cb:3") == {(f"{qualified(_name_fn)}()", qualified(by_callable), "default")}
    # Several names: the templates as written, joined (as LockNotAcquired joins the names).
    assert (
        labels("acct:1")
        == labels("acct:2")
        == {("acct:{src}, acct:{dst}", qualified(transfer), "default")}
    )
    assert labels("partner:acme") == {("partner:{tenant}", qualified(call_partner), "default")}
    assert labels("acct:9") == {("acct:{self.id}", qualified(Account.debit), "default")}
    # Used directly, a primitive's name is its template, and it has no function.
    assert labels("direct:5") == {("direct:5", None, "default")}
    assert labels("slots:x") == {("slots:x", None, "default")}
    kinds = {(e.kind, e.name) for e in recorded}
    assert {("acquired", "order:1"), ("released", "order:1")} <= kinds


def test_a_bound_method_partial_or_callable_object_is_labelled_by_the_code_it_runs(
    recorded: list[LockEvent],
) -> None:
    import functools

    class Job:
        def run(self, n: int) -> None: ...

        def __call__(self, n: int) -> None: ...

    def work(n: int, scale: int) -> None: ...

    locked("bound:{n}")(Job().run)(1)
    locked("partial:{n}")(functools.partial(work, scale=2))(1)
    locked("object:{n}")(Job())(1)
    functions = {e.name: e.function for e in recorded if e.kind == "acquired"}
    assert functions == {
        "bound:1": qualified(Job.run),
        "partial:1": qualified(work),
        "object:1": f"{qualified(Job)}.__call__",
    }
    assert all("0x" not in (e.function or "") for e in recorded)  # never a repr


def test_events_carry_labels_from_the_renewer_and_busy_async(recorded: list[LockEvent]) -> None:
    import asyncio

    import redlock_deco.asyncio

    @locked("renew:{n}", ttl=0.15)
    async def slow(n: int) -> None:
        await asyncio.sleep(0.2)  # past a renewal (ttl/3 = 0.05 s)

    @locked("renew:{n}", wait=0.02, on_busy="skip")
    async def impatient(n: int) -> None: ...

    async def main() -> None:
        async with redlock_deco.asyncio.Lock("renew:1"):
            assert await asyncio.create_task(impatient(1)) is None
        await slow(1)

    asyncio.run(main())
    seen = {(e.kind, e.template, e.function) for e in recorded}
    assert ("renewed", "renew:{n}", qualified(slow)) in seen
    assert ("busy", "renew:{n}", qualified(impatient)) in seen
    assert ("acquired", "renew:1", None) in seen  # the asyncio Lock, used directly


def test_an_extend_that_finds_the_lease_gone_says_lost_once(
    r: redis.Redis, recorded: list[LockEvent]
) -> None:
    """An extend() is a renewal of the holder's own: finding the lease gone, it says "lost"
    as a renewal round does (before, nothing said it: the exit knew it lost, and stayed
    quiet), and the exit does not say it again."""

    def sync() -> None:
        with Lock("ext:sync", ttl=5) as lock:
            r.delete("lock:ext:sync")
            with pytest.raises(LockNotOwned):
                lock.extend()

    async def in_asyncio() -> None:
        async with aio.Lock("ext:async", ttl=5) as lock:
            r.delete("lock:ext:async")
            with pytest.raises(LockNotOwned):
                await lock.extend()

    with pytest.raises(LockLost):
        sync()
    with pytest.raises(LockLost):
        asyncio.run(in_asyncio())
    for name in ("ext:sync", "ext:async"):
        assert [e.kind for e in recorded if e.name == name] == ["acquired", "lost", "released"]


def test_a_lost_lease_reports_lost_before_released(recorded: list[LockEvent]) -> None:
    import time

    @locked("expires", ttl=0.05, auto_renew=False)
    def overruns() -> None:
        time.sleep(0.15)

    with pytest.raises(LockLost):
        overruns()
    assert [e.kind for e in recorded] == ["acquired", "lost", "released"]
    assert {(e.template, e.function) for e in recorded} == {("expires", qualified(overruns))}


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt])
def test_a_listener_raising_anything_on_a_renewal_neither_skips_on_lost_nor_ends_the_loop(
    r: redis.Redis, raised: type[BaseException]
) -> None:
    """Review 67, F2: a listener raising SystemExit (or a KeyboardInterrupt landing in it)
    on "lost" skipped the lease's on_lost, and out of the asyncio renewer ended asyncio.run;
    on "renewed" it ended that renewal round's task. The renewer logs it and goes on."""
    import asyncio
    import time

    import redlock_deco.asyncio

    def broken(event: LockEvent) -> None:
        if event.kind in ("lost", "renewed"):
            raise raised("listener bug")

    told: list[str] = []

    def lost_sync() -> None:
        with Lock("gone", ttl=0.3, on_lost=lambda lease: told.append("sync")):
            r.delete("lock:gone")
            time.sleep(0.6)

    async def lost_async() -> None:
        async with redlock_deco.asyncio.Lock("kept", ttl=0.3):
            await asyncio.sleep(0.5)  # renewed, past its ttl
        async with redlock_deco.asyncio.Lock(
            "gone", ttl=0.3, on_lost=lambda lease: told.append("async")
        ):
            await asyncio.to_thread(r.delete, "lock:gone")
            await asyncio.sleep(0.6)

    add_listener(broken)
    try:
        with pytest.raises(LockLost):
            lost_sync()
        with pytest.raises(LockLost):
            asyncio.run(lost_async())
    finally:
        remove_listener(broken)
    assert told == ["sync", "async"]
    assert r.dbsize() == 0


def test_events_built_the_0_1_way_still_construct() -> None:
    event = LockEvent("acquired", "order:7", "lock:order:7", 0.5)
    assert (event.template, event.function, event.provider) == ("", None, "")
    full = LockEvent("busy", "n", "lock:n", 0.1, "t", "m.f", "default")
    assert full.template == "t" and full.function == "m.f" and full.provider == "default"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["dropped", "cut", "dropped-as-its-loop-ends"])
def test_a_lease_given_up_without_its_exit_still_ends_with_released(
    r: redis.Redis, how: str
) -> None:
    """Review 93a, F1 (LOW): a lease's last event is "released", also when no exit of its
    holder gives it back -- a block whose ExitStack is dropped unclosed (released in the
    background), or an acquire cut short after the lease was taken, or an asyncio block
    dropped open as its loop ends (the shutdown cancels its release, a clean-up sends it).
    Its events stopped at "acquired": a hold that never ended, for a "held now" gauge."""
    import asyncio
    import contextlib

    from support.elsewhere import AtLine

    import redlock_deco.asyncio
    from redlock_deco import _ownership as ownership

    seen: list[str] = []

    def listener(event: LockEvent) -> None:
        if event.name == how:
            seen.append(event.kind)

    add_listener(listener)
    try:
        if how == "dropped":
            stack = contextlib.ExitStack()
            stack.enter_context(Lock(how, ttl=30))
            del stack
        elif how == "dropped-as-its-loop-ends":

            async def drop() -> None:
                stack = contextlib.AsyncExitStack()
                await stack.enter_async_context(redlock_deco.asyncio.Lock(how, ttl=30))
                del stack

            asyncio.run(drop())
        else:

            def cut() -> None:
                raise KeyboardInterrupt

            opening = {ownership.open_section.__code__}
            with pytest.raises(KeyboardInterrupt), AtLine(opening, 1, cut), Lock(how, ttl=30):
                pass
        assert wait_until(lambda: not r.exists(f"lock:{how}"), 5)
        assert wait_until(lambda: seen == ["acquired", "released"], 2), seen
    finally:
        remove_listener(listener)


@pytest.mark.timeout(30)
def test_an_asyncio_exit_cancelled_twice_while_releasing_still_ends_with_released(
    r: redis.Redis, recorded: list[LockEvent]
) -> None:
    """Review 94a, F2 (LOW): cancelled twice while its release is out (a server paused for
    writes), an asyncio exit stops waiting and the release lands on its own -- and said
    nothing: the lease's events stopped at "acquired"."""
    import asyncio

    import redlock_deco.asyncio

    async def scenario() -> None:
        inside, go = asyncio.Event(), asyncio.Event()

        async def holder() -> None:
            async with redlock_deco.asyncio.Lock("twice-cancelled", ttl=5):
                inside.set()
                await go.wait()

        task = asyncio.create_task(holder())
        await inside.wait()
        r.execute_command("CLIENT", "PAUSE", 400, "WRITE")
        go.set()
        await asyncio.sleep(0.1)  # (the release is out, the server holds it)
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadline = time.monotonic() + 3
        while r.exists("lock:twice-cancelled") and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # (its done callback, at the loop's next turn)

    asyncio.run(scenario())
    kinds = [event.kind for event in recorded if event.name == "twice-cancelled"]
    assert not r.exists("lock:twice-cancelled")
    assert kinds == ["acquired", "released"], kinds


def _hold_and_leave(lock: Lock, how: str) -> None:
    """Take ``lock`` and leave it ``how``: a ``with`` block, or acquire() then release() or
    hand_over()."""
    if how == "with":
        with lock:
            pass
    else:
        lock.acquire()
        getattr(lock, how)()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["release", "hand_over", "with"])
def test_an_interrupt_out_of_a_released_listener_says_released_once(
    r: redis.Redis, how: str
) -> None:
    """Review 94a, F3 (LOW): a Ctrl-C while a listener handles "released" reached the
    release's interrupt handling, which gave the lease up and said "released" again: a
    "held now" gauge went below zero."""
    seen: list[str] = []
    armed = [True]

    def listener(event: LockEvent) -> None:
        if event.name != how:
            return
        seen.append(event.kind)
        if event.kind == "released" and armed:
            armed.clear()
            raise KeyboardInterrupt

    add_listener(listener)
    try:
        with pytest.raises(KeyboardInterrupt):
            _hold_and_leave(Lock(how, ttl=5), how)
    finally:
        remove_listener(listener)
    assert seen == ["acquired", "released"], seen


class _EmitPoints:
    """Trace points of ``events.emit`` sending "released": each of its lines, each return of
    a Python function into it, each C call returning to it -- where a real signal can land,
    or nearer. Lists them; or raises KeyboardInterrupt at ``target``, once."""

    def __init__(self, target: tuple[str, int | str, int] | None = None) -> None:
        self.target, self.fired = target, False
        self.seen: dict[tuple[str, int | str, int], None] = {}
        self.count: collections.Counter[tuple[str, int | str]] = collections.Counter()
        self.code = events_module.emit.__code__

    def _emitting(self, frame: Any) -> bool:
        return frame.f_code is self.code and frame.f_locals.get("kind") == "released"

    def _point(self, where: tuple[str, int | str]) -> None:
        self.count[where] += 1  # (a loop's line, reached again: a point of its own)
        point = (*where, self.count[where])
        if self.target is None:
            self.seen.setdefault(point)
        elif point == self.target and not self.fired:
            self.fired = True
            raise KeyboardInterrupt(f"at {point}")

    def trace(self, frame: Any, event: str, arg: object) -> Any:
        if self._emitting(frame):
            return self._local
        if frame.f_back is not None and self._emitting(frame.f_back):
            return self._callee
        return None

    def _local(self, frame: Any, event: str, arg: object) -> Any:
        if event == "line":
            self._point(("line", frame.f_lineno))
        return self._local

    def _callee(self, frame: Any, event: str, arg: object) -> Any:
        if event == "return":
            self._point(("return", frame.f_code.co_name))
        return self._callee

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_return" and self._emitting(frame):
            self._point(("c", getattr(arg, "__name__", "?")))

    def run(self, how: str) -> None:
        sys.settrace(self.trace)
        sys.setprofile(self.profile)
        try:
            _hold_and_leave(Lock(how, ttl=5), how)
        finally:
            sys.setprofile(None)
            sys.settrace(None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["release", "hand_over", "with"])
def test_an_interrupt_at_each_point_of_sending_released_says_it_once(
    r: redis.Redis, recorded: list[LockEvent], how: str
) -> None:
    """A KeyboardInterrupt at each point of sending "released": the lease's events end with
    one "released", whether the listeners heard it before the interrupt (the release's
    interrupt handling must not say it again: a "held now" gauge went below zero, review
    94a F3) or not (it must: they stopped at "acquired", reviews 95 F1 and 96 F3, each an
    interrupt between marking it said and calling the first listener)."""
    listing = _EmitPoints()
    listing.run(how)
    assert len(listing.seen) > 3, listing.seen
    for point in listing.seen:
        recorded.clear()
        tracer = _EmitPoints(point)
        with pytest.raises(KeyboardInterrupt):
            tracer.run(how)
        assert tracer.fired and not r.exists(f"lock:{how}"), point
        kinds = [event.kind for event in recorded if event.name == how]
        assert kinds == ["acquired", "released"], (point, kinds)


@pytest.mark.timeout(60)
def test_a_renewal_finding_the_lease_gone_at_each_line_of_its_release_says_lost_once(
    r: redis.Redis, recorded: list[LockEvent]
) -> None:
    """The renewer concludes a round that found the lease gone while the holder's release
    runs, at each of its lines in turn (the tracer runs the renewer's conclusion there, as a
    thread switch would): "lost" once, on_lost once, LockLost at the exit, and "released"
    last. Review 96 F2 (LOW): concluded between the exit's look at the lease and its
    "releasing" mark, then found gone by the release too, it was said twice."""
    from redlock_deco import _guard as guard
    from redlock_deco import _renewal as renewal

    codes = {guard._give_back.__code__, guard._released.__code__}
    lines: dict[tuple[Any, int], None] = {}
    held: list[Any] = []

    def tracer(target: tuple[Any, int] | None) -> Any:
        def local(frame: Any, event: str, arg: object) -> Any:
            if event == "line":
                point = (frame.f_code, frame.f_lineno)
                if target is None:
                    lines.setdefault(point)
                elif point == target and held:
                    lease = held.pop()
                    renewal.conclude(lease, lease.acquired_at, 5000, 0)
            return local

        return lambda frame, event, arg: local if frame.f_code in codes else None

    def run(target: tuple[Any, int] | None) -> None:
        told.clear()
        held.clear()
        lock = Lock("gone", ttl=5, on_lost=lambda lease: told.append(lease.key))
        with pytest.raises(LockLost) if target else contextlib.nullcontext(), lock:
            assert lock.lease is not None
            held.append(lock.lease)
            if target:
                r.delete("lock:gone")
            sys.settrace(tracer(target))
        sys.settrace(None)

    told: list[str] = []
    run(None)
    assert len(lines) > 5
    for point in lines:
        recorded.clear()
        run(point)
        kinds = [event.kind for event in recorded if event.name == "gone"]
        where = f"{point[0].co_name}:{point[1]}"
        assert kinds == ["acquired", "lost", "released"], (where, kinds)
        assert len(told) <= 1, (where, told)  # (concluded after the release began: none)

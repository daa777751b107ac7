"""What the stateful machines share: tests/integration/test_stateful.py (locks, semaphores)
and test_shared_stateful.py (readers-writers) subclass ``OwnersMachine`` and model leases with
``LeaseModel``; their owners (threads, tasks of one loop, a spawned process) answer commands
through ``QueueOwner`` and ``LoopOwners``.

Timing is modelled, not assumed: a lease that was never renewed is certainly on the server
until ``ttl`` after the request that set it was *sent*, certainly gone ``ttl`` after its reply
(plus EPS), and either in between. Renewed leases are live until released or removed, and a
renewed lease removed from outside must be reported lost within a third of its ttl (plus
RENEWAL_SLACK).

Replies are ``("ok", value)``, ``("raised", class name, message)`` for our own
``LockError``s, or ``("error", traceback)`` for anything else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from redlock_deco import LockError
from redlock_deco._lifecycle import RENEW_FRACTION
from redlock_deco.testing import RedisServer

EPS = 0.02  # expiry precision of the server plus clock reading slack, seconds
# A lease scored by the server's clock in whole milliseconds (a reader's share, a semaphore
# slot: floor(TIME) + ttl, live while above floor(TIME)) can end up to 1 ms before ``ttl``
# has passed since its request was sent; plus clock reading slack, seconds.
SERVER_MS = 0.002
RENEWAL_SLACK = 0.5  # a renewal runs this late at most (busy machine, stalled server)
CALL_TIMEOUT = 15.0  # an owner that does not answer within this is stuck: fail

GONE, MAYBE, ALIVE = "gone", "maybe", "alive"

# A passing machine takes seconds; a failing one is shrunk for up to hypothesis's five
# minutes before it reports the minimal sequence, which must not be cut short.
SHRINKING_TIMEOUT = pytest.mark.timeout(480)


def machine_settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        report_multiple_bugs=False,  # shrink one failure: steps are slow (real server)
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def now() -> float:
    return time.monotonic()


def timed(call: Callable[[], Any]) -> tuple[float, Any, float]:
    t0 = now()
    value = call()
    return t0, value, now()


def ok(reply: tuple[Any, ...], what: str) -> Any:
    """The value of an ("ok", value) reply; anything else fails with the reply shown."""
    assert reply[0] == "ok", f"{what}: expected success, got {reply!r}"
    return reply[1]


def raised(reply: tuple[Any, ...], name: str, what: str) -> None:
    assert reply[0] == "raised" and reply[1] == name, f"{what}: expected {name}, got {reply!r}"


def no_error(reply: tuple[Any, ...], what: str) -> None:
    assert reply[0] != "error", f"{what}: unexpected exception\n{reply[1]}"


def wait_for_empty(admin: redis.Redis, bound: float) -> None:
    deadline = now() + bound
    while True:
        size = admin.dbsize()
        if size == 0:
            return
        assert now() < deadline, f"DBSIZE {size} after releasing everything: {admin.keys('*')}"
        time.sleep(0.02)


class LeaseModel:
    """The model of one lease or slot; a machine's ``Held`` dataclass adds what it is
    (name, mode, owner) to these fields."""

    token: str
    ttl: float
    renewed: bool
    sent: float  # before the request that last set its expiry was sent
    replied: float  # after its reply arrived
    gone: bool  # certainly not on the server any more (tokens never come back)
    lost: bool | None  # what lease.lost must say: False, True, or None = either
    released: bool
    vanished_at: float  # when a renewed lease was found (by us) to be gone
    evicted: bool  # removed from outside the library (its holder cannot know)

    def status(self, t0: float, t1: float) -> str:
        """Is it on the server during [t0, t1]: ALIVE (certainly), GONE, or MAYBE."""
        if self.gone:
            return GONE
        if self.renewed or t1 < self.sent + self.ttl - SERVER_MS:
            return ALIVE
        if t0 > self.replied + self.ttl + EPS:
            return GONE
        return MAYBE

    def local(self, t0: float, t1: float) -> bool | None:
        """Does the library believe it still holds it (state HELD and remaining() > 0)?"""
        if self.lost is None:
            return None
        if self.lost:
            return False
        if self.renewed:
            return True  # lost is False: never found gone, renewed on time
        if t1 < self.sent + self.ttl:
            return True
        if t0 >= self.replied + self.ttl:
            return False
        return None

    def vanish(self) -> None:
        """It is not on the server any more; a renewed one may learn that any moment."""
        self.gone = True
        if self.renewed and self.lost is False and not self.released:
            self.lost = None
            self.vanished_at = now()

    def check_lost(self, reported: bool, what: str, t0: float | None = None) -> None:
        """``reported``: lease.lost as read at or after ``t0``."""
        if self.lost is None:
            if reported:
                self.lost = True
            elif t0 is not None:
                assert t0 < self.noticed_by(), f"{what}: renewal did not notice it is gone"
        else:
            assert reported == self.lost, f"{what}: lease.lost is {reported}, model {self.lost}"

    def noticed_by(self) -> float:
        """When renewal must have found a renewed lease gone: within about a third of its
        ttl after it went."""
        return self.vanished_at + self.ttl * RENEW_FRACTION + RENEWAL_SLACK

    # -- judging one owner's reply about this lease, sent at t0 and answered by t1 ----------

    def judge_release(self, reply: tuple[Any, ...], what: str, t0: float, t1: float) -> None:
        """A release succeeds only for a lease not lost and not certainly gone, and fails
        (LockNotOwned) only for one not certainly live; either way it is gone after."""
        status = self.status(t0, t1)
        if reply[0] == "ok":
            assert self.lost is not True and status != GONE, f"{what}: released a lost lease"
        else:
            raised(reply, "LockNotOwned", what)
            assert not (self.lost is False and status == ALIVE), f"{what}: lease was live"
        self.released = True
        self.vanish()

    def judge_extend(
        self, reply: tuple[Any, ...], what: str, t0: float, t1: float, seconds: float
    ) -> None:
        """An extend to ``seconds`` succeeds only while the lease may be on the server (and
        then it is certainly there until ``seconds`` after t0), and fails only while it may
        be gone (and then it is gone, and lost)."""
        status = self.status(t0, t1)
        if reply[0] == "ok":
            assert status != GONE, f"{what}: extended a lease that is not on the server"
            self.sent, self.replied, self.ttl = t0, t1, seconds
        else:
            raised(reply, "LockNotOwned", what)
            assert status != ALIVE, f"{what}: refused although the lease is live"
            self.vanish()
            self.lost = True

    def judge_owned(self, owned: bool, lease: Any, what: str, t0: float, t1: float) -> None:
        """owned() names this lease (its token) and agrees with the model wherever the
        model is certain; lease[1] is lease.lost."""
        assert lease is not None and lease[0] == self.token, f"{what}: {lease!r}"
        status = self.status(t0, t1)
        if status != MAYBE:
            assert owned == (status == ALIVE), f"{what}: owned() {owned}, model {status}"
        elif not owned:
            self.vanish()
        self.check_lost(lease[1], what, t0)

    def check_remaining(self, remaining: float, t0: float, t1: float, what: str) -> None:
        assert 0 <= remaining <= self.ttl + EPS, f"{what}: remaining() {remaining} of {self.ttl}"
        local = self.local(t0, t1)
        if local is True:
            assert remaining > 0, f"{what}: remaining() is 0 for a lease still held"
        elif local is False and not self.renewed:
            assert remaining == 0, f"{what}: remaining() {remaining} after its ttl"


# -- owners ------------------------------------------------------------------------------------


class QueueOwner:
    """A worker thread (``self.thread``) answering commands put in ``self.inbox`` on
    ``self.outbox``; None stops it."""

    inbox: queue.Queue[Any]
    outbox: queue.Queue[Any]
    thread: threading.Thread

    def call(self, cmd: tuple[Any, ...]) -> tuple[Any, ...]:
        self.inbox.put(cmd)
        try:
            reply: tuple[Any, ...] = self.outbox.get(timeout=CALL_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"{self.thread.name} stuck on {cmd!r}") from None
        return reply

    def stop(self) -> None:
        self.inbox.put(None)
        self.thread.join(5)
        assert not self.thread.is_alive(), f"{self.thread.name} did not stop"


class LoopOwners:
    """Owner tasks on one event loop run by ``asyncio.run`` in a background thread, sharing
    the objects (ownership is per task); a subclass says how a command runs (``_run``)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.objects: dict[Any, Any] = {}
        started = threading.Event()
        self.thread = threading.Thread(
            target=asyncio.run, args=(self._main(started),), name="owner-loop", daemon=True
        )
        self.thread.start()
        assert started.wait(10), "owner loop did not start"

    async def _main(self, started: threading.Event) -> None:
        self.loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        self.queues: list[asyncio.Queue[Any]] = [asyncio.Queue() for _ in range(self.count)]
        tasks = [
            asyncio.create_task(self._serve(inbox), name=f"owner-task-{index}")
            for index, inbox in enumerate(self.queues)
        ]
        started.set()
        await self.stopping.wait()
        for inbox in self.queues:
            inbox.put_nowait(None)
        await asyncio.gather(*tasks)
        # asyncio.run's shutdown then releases whatever the loop still holds, closes clients

    async def _serve(self, inbox: asyncio.Queue[Any]) -> None:
        while True:
            item = await inbox.get()
            if item is None:
                return
            cmd, future = item
            try:
                reply: tuple[Any, ...] = ("ok", await self._run(*cmd))
            except LockError as exc:
                reply = ("raised", type(exc).__name__, str(exc))
            except Exception:
                reply = ("error", traceback.format_exc())
            future.set_result(reply)

    async def _run(self, *cmd: Any) -> Any:
        raise NotImplementedError

    def call(self, index: int, cmd: tuple[Any, ...]) -> tuple[Any, ...]:
        future: concurrent.futures.Future[tuple[Any, ...]] = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(self.queues[index].put_nowait, (cmd, future))
        try:
            return future.result(CALL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise AssertionError(f"owner task {index} stuck on {cmd!r}") from None

    def stop(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)
        assert not self.thread.is_alive(), "owner loop did not stop"


class TaskOwner:
    """One task of ``LoopOwners``, called like the other owners."""

    def __init__(self, owners: LoopOwners, index: int) -> None:
        self.owners, self.index = owners, index

    def call(self, cmd: tuple[Any, ...]) -> tuple[Any, ...]:
        return self.owners.call(self.index, cmd)


def stop_all(owners: dict[str, Any]) -> None:
    """Stop every owner, then fail if any did not stop."""
    errors = []
    for owner in owners.values():
        try:
            owner.stop()
        except AssertionError as exc:
            errors.append(exc)
    assert not errors, errors


# -- the base machine --------------------------------------------------------------------------


class OwnersMachine(RuleBasedStateMachine):
    """Owners acting on a real server through commands, with a model of every lease
    (``leases``: LeaseModel). Subclasses add the rules and invariants of their primitive;
    here: time passing, renewal given the time to notice what went, and a teardown that
    releases everything and finds the server empty within ``EMPTY_WITHIN`` seconds."""

    EMPTY_WITHIN = 1.5

    def __init__(self, server: RedisServer) -> None:
        super().__init__()
        self.server = server
        self.admin = server.client(decode_responses=True)
        self.admin.client_unpause()  # a stalled server (CLIENT PAUSE) is a rule's, never left
        self.admin.flushall()
        self.leases: list[Any] = []
        self.owners: dict[str, Any] = {}
        self.start_owners()

    def start_owners(self) -> None:
        raise NotImplementedError

    def stop_owners(self) -> None:
        raise NotImplementedError

    def call(self, owner: str, *cmd: Any) -> tuple[Any, ...]:
        reply: tuple[Any, ...] = self.owners[owner].call(cmd)
        no_error(reply, f"{owner} {cmd!r}")
        return reply

    @rule(seconds=st.sampled_from([0.02, 0.12, 0.35]))
    def time_passes(self, seconds: float) -> None:
        time.sleep(seconds)

    @rule()
    def renewal_notices(self) -> None:
        """Wait until renewal must have found every renewed lease that went (and is still
        held) gone; the invariants then see lease.lost."""
        deadlines = [h.noticed_by() for h in self.leases if h.lost is None and not h.released]
        if deadlines:
            time.sleep(max(0.0, max(deadlines) - now()) + 0.01)

    def clean_up(self) -> None:
        """Remove what the machine wrote itself, besides the owners' leases."""

    def teardown(self) -> None:
        try:
            self.admin.client_unpause()
            for owner in self.owners:
                ok(self.call(owner, "reset"), f"{owner} releasing everything")
            self.clean_up()
            wait_for_empty(self.admin, self.EMPTY_WITHIN)
        finally:
            try:
                self.stop_owners()
            finally:
                self.admin.close()

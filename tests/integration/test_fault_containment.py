"""Faults kept where they happen: a failed release still lets go of every name, a broken
provider or a hung master does not stop renewals elsewhere, wake-ups count live waiters."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlock_deco import LockLost, Semaphore, locked, register_provider
from redlock_deco import _scripts as lua
from redlock_deco._protocol import HANDOFF_MS, QUEUE, QUEUE_WINDOW_MS, TRY
from redlock_deco._renewal import renewer
from redlock_deco.testing import RedisServer

NO_RETRY = Retry(NoBackoff(), 0)


class FailingLater(redis.Redis):
    """A real client that starts raising a non-Redis error after ``good`` commands: a stand-in
    for a bug or an unexpected library error in the middle of renewals."""

    def __init__(self, good: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.good = good

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.good -= 1
        if self.good < 0:
            raise RuntimeError("unexpected failure inside the client")
        return super().execute_command(*args, **options)


@pytest.mark.slow
def test_a_failed_release_still_lets_go_of_every_name(r: redis.Redis) -> None:
    with RedisServer() as own:
        register_provider("flaky", own.client(socket_timeout=0.3, retry=NO_RETRY))

        @locked("acct:{src}", "acct:{dst}", provider="flaky", ttl=1)
        def transfer(src: str, dst: str) -> None:
            own.pause()  # the releases below time out
            threading.Timer(0.8, own.resume).start()

        with pytest.raises(redis.exceptions.TimeoutError):
            transfer("1", "2")
        time.sleep(2.0)  # past the 1 s ttl: nothing may still be renewing them
        assert own.client().exists("lock:acct:1", "lock:acct:2") == 0
        assert len(renewer()) == 0


@pytest.mark.slow
def test_renewals_survive_an_unexpected_error_elsewhere(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    register_provider("broken", FailingLater(2, host="127.0.0.1", port=server.port))

    @locked("doomed", provider="broken", ttl=0.3)
    def doomed() -> None:
        time.sleep(0.5)  # its renewals raise RuntimeError

    @locked("healthy", ttl=0.3)
    def healthy() -> str:
        time.sleep(1.0)  # must be renewed all along, by the same renewer
        return "kept"

    errors: list[BaseException] = []

    def run_doomed() -> None:
        try:
            doomed()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run_doomed)
    t.start()
    assert healthy() == "kept"
    t.join(10)
    assert errors  # the broken provider's call failed, loudly
    assert sum(x.name == "redlock-deco-renewer" for x in threading.enumerate()) == 1
    # The doomed call's clean-up raises too: it is tried every RETRY_DELAY until its claim's
    # ttl has passed, then dropped. (It stayed due at once: the renewer spun on it for good,
    # logging, and a later test's lease in the same process went 0.6 s unrenewed.)
    deadline = time.monotonic() + 3
    while renewer().pending_cleanups and time.monotonic() < deadline:
        time.sleep(0.05)
    assert renewer().pending_cleanups == 0
    tries = sum("lock:doomed" in record.getMessage() for record in caplog.records)
    assert tries <= 8, tries


@pytest.mark.slow
def test_a_paused_server_does_not_stall_renewals_on_another() -> None:
    with ExitStack() as stack:
        a, b = (stack.enter_context(RedisServer()) for _ in range(2))
        register_provider("a", a.url)  # default client: a paused server blocks it ~seconds
        register_provider("b", b.url)

        @locked("x", provider="a", ttl=3)
        def on_a() -> None:
            a.pause()
            time.sleep(4.0)
            a.resume()

        errors: list[BaseException] = []
        t = threading.Thread(target=lambda: _capture(on_a, errors))
        t.start()
        time.sleep(0.3)

        @locked("y", provider="b", ttl=3)
        def on_b() -> str:
            time.sleep(4.0)  # past its ttl: only renewals keep it
            return "kept"

        assert on_b() == "kept"  # no LockLost: b's renewals ran while a was paused
        t.join(30)


def _capture(fn: Any, errors: list[BaseException]) -> None:
    try:
        fn()
    except BaseException as exc:
        errors.append(exc)


@pytest.mark.slow
def test_quorum_keeps_working_with_a_hung_master() -> None:
    with ExitStack() as stack:
        masters = [stack.enter_context(RedisServer()) for _ in range(3)]
        # User-supplied clients with default (long) timeouts: the driver must not run out of
        # workers while one master hangs.
        register_provider("q", [m.client() for m in masters])
        masters[2].pause()
        try:

            @locked("hung", provider="q", ttl=5, wait=1)
            def cycle() -> str:
                return "ok"

            assert [cycle() for _ in range(12)] == ["ok"] * 12
        finally:
            masters[2].resume()


def test_every_freed_semaphore_slot_wakes_a_waiter(r: redis.Redis) -> None:
    keys = ("sem:pair", "{sem:pair}:queue", "{sem:pair}:limit")
    acquire, release = lua.SEM_ACQUIRE.source, lua.SEM_RELEASE.source
    tail = (QUEUE_WINDOW_MS, HANDOFF_MS, 1, 2)  # window, hand-off lease, counted, limit 2
    waiters = ("h:1:w:w1", "h:1:w:w2")  # their process hears grants on redlock-deco:h:1:w
    pubsub = r.pubsub()
    pubsub.subscribe("redlock-deco:h:1:w")
    try:
        for holder in ("h:1:h:h1", "h:1:h:h2"):
            assert r.eval(acquire, 3, *keys, holder, 5000, TRY, *tail)[0] == 1
        for waiter in waiters:
            assert r.eval(acquire, 3, *keys, waiter, 5000, QUEUE, *tail)[0] == 0
        for holder in ("h:1:h:h1", "h:1:h:h2"):
            r.eval(release, 3, *keys, holder, HANDOFF_MS, 1, 0, f"{holder}|5000|2", 2)
        # Two slots freed: both waiters hold one, and both were told.
        assert {m for m, _ in r.zrange("sem:pair", 0, -1, withscores=True)} == {
            w.encode() for w in waiters
        }
        heard = []
        while (message := pubsub.get_message(timeout=0.2)) is not None:
            if message["type"] == "message":
                heard.append(message["data"].decode())
        assert heard == [f"{w} S sem:pair" for w in waiters]  # token, kind, key
        assert not r.exists("{sem:pair}:queue")
    finally:
        pubsub.close()


def test_a_semaphore_lost_on_release_is_lock_lost(r: redis.Redis) -> None:
    with pytest.raises(LockLost), Semaphore("gone", limit=1, ttl=5):
        r.delete("sem:gone")

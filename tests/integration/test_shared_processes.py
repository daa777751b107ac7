"""The reader-writer lock (Lock(name, shared=True)) across real processes on a real server:
exclusion, no starvation either way, readers admitted in batches, crashes, a cluster, and the
asyncio flavour. Sections check the invariant themselves through shared_workers.GAUGE, a
script on its own key that counts who is inside and flags any writer that is not alone and
any reader that finds a writer inside."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from support import shared_workers as sw

from redlock_deco import Lock, register_provider
from redlock_deco.testing import LocalCluster, RedisServer

pytestmark = pytest.mark.slow

spawn = multiprocessing.get_context("spawn")

READY, GO = "{rwcheck}:ready", "{rwcheck}:go"
CHECK_KEYS = [sw.STATE, sw.EVENTS, sw.STATE + ":bad", READY, GO]


class Procs:
    """Worker processes reporting through one queue; killed by PID if still alive."""

    def __init__(self) -> None:
        self.procs: list[Any] = []
        self.out = spawn.Queue()

    def start(self, func: Any, *args: Any) -> Any:
        proc = spawn.Process(target=sw.report, args=(self.out, func.__name__, args))
        proc.start()
        self.procs.append(proc)
        return proc

    def results(self, timeout: float) -> list[Any]:
        deadline = time.monotonic() + timeout
        got = []
        for _ in self.procs:
            got.append(self.out.get(timeout=max(0.1, deadline - time.monotonic())))
        errors = [g for g in got if isinstance(g, dict) and "error" in g]
        assert not errors, errors
        return got

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            proc.join(10)


@pytest.fixture
def procs() -> Iterator[Procs]:
    group = Procs()
    try:
        yield group
    finally:
        group.cleanup()


def go_when_ready(r: redis.Redis, count: int, timeout: float = 60) -> None:
    """Wait until ``count`` workers said ready, then let them all go at once."""
    deadline = time.monotonic() + timeout
    while int(r.get(READY) or 0) < count:
        assert time.monotonic() < deadline, "workers never got ready"
        time.sleep(0.01)
    r.set(GO, 1, px=120_000)


def state(r: Any) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in r.hgetall(sw.STATE).items()}


def events(r: Any) -> list[str]:
    return [e.decode() for e in r.lrange(sw.EVENTS, 0, -1)]


def assert_drained(r: Any, within: float = 3.0, **dbsize: Any) -> None:
    """Drop the test's own bookkeeping keys; then every key of the lock must be gone
    (DBSIZE 0), allowing ``within`` s for leases of crashed holders to run out."""
    r.delete(*CHECK_KEYS)
    deadline = time.monotonic() + within
    while r.dbsize(**dbsize) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = r.dbsize(**dbsize)
    assert left == 0, r.keys("*") if left else None


def spec(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "ready": READY, "go": GO, **extra}


# -- 1. exclusion ---------------------------------------------------------------------------


def test_readers_overlap_and_writers_exclude_across_processes(
    server: RedisServer, r: redis.Redis, procs: Procs
) -> None:
    readers = spec("rw:doc", seconds=3.0, hold=(0.02, 0.06), pause=(0.0, 0.01))
    writers = spec("rw:doc", seconds=3.0, hold=(0.01, 0.03), pause=(0.02, 0.08))
    for i in range(3):
        procs.start(sw.hammer, server.url, readers, "r", f"R{i}")
    for i in range(2):
        procs.start(sw.hammer, server.url, writers, "w", f"W{i}")
    go_when_ready(r, 5)
    results = procs.results(timeout=30)
    seen = state(r)
    print(
        "\nexclusion:", seen, [(x["who"], x["entries"], round(x["max_wait"], 3)) for x in results]
    )
    assert seen.get("violations", 0) == 0, r.lrange(sw.STATE + ":bad", 0, 20)
    assert seen["readers"] == 0 and seen["writers"] == 0
    assert seen["peak_readers"] >= 2  # readers really shared the lock
    assert seen["entries_w"] >= 10 and seen["entries_r"] >= 30
    assert all(x["entries"] > 0 for x in results)  # nobody starved
    assert_drained(r)


# -- 2. no writer starvation ------------------------------------------------------------------


def test_writer_gets_in_through_a_stream_of_overlapping_readers(
    server: RedisServer, r: redis.Redis, procs: Procs
) -> None:
    # Three readers re-enter at once after each 50-100 ms read: a reader is always inside.
    readers = spec("rw:stream", seconds=3.0, hold=(0.05, 0.1))
    writer = spec("rw:stream", delay=0.5, attempts=4, gap=0.3, hold=0.05)
    for i in range(3):
        procs.start(sw.hammer, server.url, readers, "r", f"R{i}")
    procs.start(sw.timed_entries, server.url, writer, "w", "W")
    go_when_ready(r, 4)
    results = procs.results(timeout=30)
    timed = next(x for x in results if x["who"] == "W")
    seen = state(r)
    print("\nwriter waits (s):", [round(w, 3) for w in timed["waits"]],
          "readers inside when asked:", timed["busy_at_start"], seen)  # fmt: skip
    assert seen.get("violations", 0) == 0, r.lrange(sw.STATE + ":bad", 0, 20)
    assert any(timed["busy_at_start"])  # it really asked while readers were inside
    assert len(timed["waits"]) == 4
    assert max(timed["waits"]) < 2.0, timed["waits"]
    assert seen["peak_readers"] >= 2
    assert_drained(r)


# -- 3. no reader starvation ------------------------------------------------------------------


def test_reader_gets_in_through_a_stream_of_writers(
    server: RedisServer, r: redis.Redis, procs: Procs
) -> None:
    writers = spec("rw:wstream", seconds=3.0, hold=(0.05, 0.05))
    reader = spec("rw:wstream", delay=0.5, attempts=4, gap=0.3, hold=0.05)
    for i in range(2):
        procs.start(sw.hammer, server.url, writers, "w", f"W{i}")
    procs.start(sw.timed_entries, server.url, reader, "r", "R")
    go_when_ready(r, 3)
    results = procs.results(timeout=30)
    timed = next(x for x in results if x["who"] == "R")
    seen = state(r)
    print("\nreader waits (s):", [round(w, 3) for w in timed["waits"]],
          "writers inside when asked:", timed["busy_at_start"], seen)  # fmt: skip
    assert seen.get("violations", 0) == 0, r.lrange(sw.STATE + ":bad", 0, 20)
    assert any(timed["busy_at_start"])
    assert len(timed["waits"]) == 4
    assert max(timed["waits"]) < 2.0, timed["waits"]
    assert_drained(r)


# -- 4. readers admitted together -------------------------------------------------------------


def wait_queue(r: Any, key: str, length: int, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while r.zcard(key) < length:
        assert time.monotonic() < deadline, r.zrange(key, 0, -1)
        time.sleep(0.01)
    # A queue entry is the waiter's token and its terms ("token|ttl|limit"): the tokens.
    return [t.decode().split("|")[0] for t in r.zrange(key, 0, -1)]


def test_queued_readers_are_admitted_together_before_the_next_writer(
    server: RedisServer, r: redis.Redis, procs: Procs
) -> None:
    name, queue_key = "rw:batch", "{lock:rw:batch}:queue"
    gauge = sw.Gauge(r)
    first = Lock(name, ttl=10)
    assert first.acquire(blocking=False)
    gauge.enter("w", "W1")
    try:
        for i in range(3):
            procs.start(sw.queued_section, server.url, name, "r", f"R{i}", 0.5)
        wait_queue(r, queue_key, 3)
        procs.start(sw.queued_section, server.url, name, "w", "W2", 0.1)
        queued = wait_queue(r, queue_key, 4)
        assert [t.endswith("/r") for t in queued] == [True, True, True, False], queued
    finally:
        gauge.leave("w", "W1")
        first.release()
    procs.results(timeout=30)
    log = events(r)
    seen = state(r)
    print("\nbatch:", log)
    assert seen.get("violations", 0) == 0, r.lrange(sw.STATE + ":bad", 0, 20)
    assert log[:2] == ["+w:W1", "-w:W1"]
    assert sorted(log[2:5]) == ["+r:R0", "+r:R1", "+r:R2"]  # all three inside at once
    assert sorted(log[5:8]) == ["-r:R0", "-r:R1", "-r:R2"]
    assert log[8:] == ["+w:W2", "-w:W2"]  # the second writer only after they all left
    assert seen["peak_readers"] == 3
    assert_drained(r)


# -- 5. crashes -------------------------------------------------------------------------------


def test_sigkilled_reader_lets_a_writer_in_within_its_ttl(
    server: RedisServer, r: redis.Redis, procs: Procs
) -> None:
    name, ttl = "rw:crash-reader", 1.0
    ready_a, ready_b, out = spawn.Event(), spawn.Event(), spawn.Queue()
    victim = spawn.Process(target=sw.hold_forever, args=(server.url, name, True, ttl, ready_a))
    survivor = spawn.Process(
        target=sw.read_through, args=(server.url, name, ttl, 2.0, ready_b, out)
    )
    procs.procs += [victim, survivor]  # killed by PID on the way out, whatever happens
    victim.start()
    assert ready_a.wait(30)
    survivor.start()
    assert ready_b.wait(30)
    started = time.monotonic()
    time.sleep(1.5)  # past the 1 s ttl: both shares live on renewals
    assert r.zcard("{lock:rw:crash-reader}:readers") == 2
    assert r.get(f"lock:{name}") == b"redlock-deco:shared"
    os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
    killed = time.monotonic()
    writer = Lock(name, ttl=5, wait=5)
    assert writer.acquire()
    entered, entered_wall = time.monotonic(), time.time()
    try:
        survived = out.get(timeout=10)
    finally:
        writer.release()
    recovered = entered - killed
    after = started + 2.0 - killed
    print(f"\nwriter in {recovered:.3f} s after the reader's SIGKILL (survivor released "
          f"{after:.2f} s after it); survivor {survived}")  # fmt: skip
    assert survived["owned"] and not survived["lost"]  # the other reader held on throughout
    assert survived["released"] <= entered_wall  # the writer came in after it left
    assert recovered < ttl + 0.6, recovered  # within its ttl (+ a loaded machine's margin)
    assert_drained(r)


def test_sigkilled_writer_lets_queued_readers_in_within_its_ttl(
    server: RedisServer, r: redis.Redis, procs: Procs
) -> None:
    name, ttl = "rw:crash-writer", 1.0
    ready = spawn.Event()
    victim = spawn.Process(target=sw.hold_forever, args=(server.url, name, False, ttl, ready))
    procs.procs.append(victim)
    victim.start()
    assert ready.wait(30)
    time.sleep(1.2)  # past its ttl, on renewals
    holder = r.get(f"lock:{name}")
    assert holder is not None and holder != b"redlock-deco:shared"

    both_inside = threading.Barrier(2, timeout=5)
    entered: list[float] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            with Lock(name, shared=True, ttl=5, wait=5):
                entered.append(time.monotonic())
                both_inside.wait()  # both readers inside together
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    wait_queue(r, "{lock:rw:crash-writer}:queue", 2, timeout=5)
    os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
    killed = time.monotonic()
    for t in threads:
        t.join(10)
    assert not errors, errors
    waits = [e - killed for e in entered]
    print(f"\nreaders in {[round(w, 3) for w in waits]} s after the writer's SIGKILL")
    assert len(waits) == 2 and max(waits) < ttl + 0.6, waits  # within its ttl (+ margin)
    assert_drained(r)


def test_readers_behind_a_writer_that_gives_up_come_in_at_once(
    server: RedisServer, r: redis.Redis, procs: Procs
) -> None:
    name, queue_key = "rw:giveup", "{lock:rw:giveup}:queue"
    ready, out = spawn.Event(), spawn.Queue()
    holder = spawn.Process(target=sw.read_through, args=(server.url, name, 5.0, 2.5, ready, out))
    procs.procs.append(holder)
    holder.start()
    assert ready.wait(30)
    gave_up: list[float] = []
    entered: list[float] = []

    def write() -> None:
        if not Lock(name, ttl=5).acquire(timeout=0.6):
            gave_up.append(time.monotonic())

    def read() -> None:
        with Lock(name, shared=True, ttl=5, wait=5):
            entered.append(time.monotonic())

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    threads[0].start()
    wait_queue(r, queue_key, 1, timeout=5)
    threads[1].start()
    queued = wait_queue(r, queue_key, 2, timeout=5)
    assert [t.endswith("/r") for t in queued] == [False, True]
    for t in threads:
        t.join(10)
    still_reading = out.get(timeout=10)
    assert gave_up and entered
    late = entered[0] - gave_up[0]
    print(f"\nreader queued behind a writer came in {late:.3f} s after it gave up")
    assert still_reading["owned"]
    assert late < 0.5, late  # while the first reader still read: no need to wait for it
    assert_drained(r)


# -- 6. cluster -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3) as local:
        yield local


def test_cluster_readers_overlap_and_a_writer_excludes_them(cluster: LocalCluster) -> None:
    client = cluster.client()
    client.flushall(target_nodes=client.PRIMARIES)
    register_provider("cluster", client)
    name, queue_key = "rw:cluster", "{lock:rw:cluster}:queue"
    gauge = sw.Gauge(client)
    inside = threading.Barrier(4, timeout=10)  # three readers + the main thread
    readers_leave, writer_in, writer_leave = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def guarded(func: Any) -> Any:
        def run(*args: Any) -> None:
            try:
                func(*args)
            except BaseException as exc:
                errors.append(exc)

        return run

    @guarded
    def read(who: str, hold_until: threading.Event | None) -> None:
        with Lock(name, provider="cluster", shared=True, ttl=5, wait=5):
            gauge.enter("r", who)
            if hold_until is not None:
                inside.wait()
                hold_until.wait(10)
            gauge.leave("r", who)

    @guarded
    def write() -> None:
        with Lock(name, provider="cluster", ttl=5, wait=5):
            gauge.enter("w", "W")
            writer_in.set()
            writer_leave.wait(10)
            gauge.leave("w", "W")

    def try_read() -> bool:
        got: list[bool] = []
        t = threading.Thread(
            target=lambda: got.append(
                Lock(name, provider="cluster", shared=True).acquire(blocking=False)
            )
        )
        t.start()
        t.join(5)
        return got == [True]

    threads = [threading.Thread(target=read, args=(f"R{i}", readers_leave)) for i in range(3)]
    try:
        for t in threads:
            t.start()
        inside.wait()  # all three readers hold it at once
        assert not Lock(name, provider="cluster").acquire(blocking=False)  # no writer now
        threads.append(threading.Thread(target=write))
        threads[-1].start()
        wait_queue(client, queue_key, 1, timeout=5)
        assert not try_read()  # a queued writer stops new readers
        readers_leave.set()
        assert writer_in.wait(5)
        assert client.zcard("{lock:rw:cluster}:readers") == 0
        assert not try_read()  # nor does a reader come in while the writer holds it
        threads.append(threading.Thread(target=read, args=("R9", None)))
        threads[-1].start()
        wait_queue(client, queue_key, 1, timeout=5)
        writer_leave.set()
    finally:
        readers_leave.set()
        writer_leave.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    seen = state(client)
    print("\ncluster:", seen, events(client))
    assert seen.get("violations", 0) == 0
    assert seen["peak_readers"] == 3 and seen["entries_r"] == 4 and seen["entries_w"] == 1
    assert events(client)[-2:] == ["+r:R9", "-r:R9"]
    assert_drained(client, target_nodes=client.PRIMARIES)
    client.close()


# -- 7. asyncio --------------------------------------------------------------------------------


def test_asyncio_tasks_and_another_process_share_and_exclude(
    server: RedisServer, r: redis.Redis, procs: Procs
) -> None:
    name = "rw:async"
    tasks = spec(name, seconds=2.5, hold=(0.02, 0.05))
    sync = spec(name, seconds=2.5, hold=(0.01, 0.04), pause=(0.02, 0.06))
    procs.start(sw.async_hammer, server.url, tasks, ["r", "r", "w"])
    procs.start(sw.hammer, server.url, sync, "r", "R-sync")
    procs.start(sw.hammer, server.url, sync, "w", "W-sync")
    go_when_ready(r, 3)
    results = procs.results(timeout=30)
    seen = state(r)
    print("\nasyncio:", seen, results)
    assert seen.get("violations", 0) == 0, r.lrange(sw.STATE + ":bad", 0, 20)
    assert seen["peak_readers"] >= 2
    counts = next(x for x in results if "who" not in x)
    assert all(n > 0 for n in counts.values()), counts
    assert_drained(r)

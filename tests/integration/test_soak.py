"""A bounded soak: 16 processes run mixed @locked / @limited calls while holders are
SIGKILLed at random. 0 lost updates, the limit never exceeded, DBSIZE back to 0, one renewer
per process, flat memory. 60 s by default; longer with ``--soak-seconds``."""

from __future__ import annotations

import multiprocessing
import random
import time

import pytest
from support import workers

from redlock_deco.testing import RedisServer

spawn = multiprocessing.get_context("spawn")
PROCESSES, LIMIT, TTL = 16, 3, 1.0


@pytest.mark.soak  # a CI leg of its own: a minute of 16 processes on 2 cores
@pytest.mark.timeout(900)
def test_soak_with_random_kills(request: pytest.FixtureRequest, server: RedisServer) -> None:
    seconds = float(request.config.getoption("--soak-seconds"))
    r = server.client()
    stop_key = "soak-data:stop"
    out = spawn.Queue()

    def start_one() -> multiprocessing.process.BaseProcess:
        process = spawn.Process(
            target=workers.soak_worker, args=(server.url, LIMIT, TTL, stop_key, out)
        )
        process.start()
        return process

    running = [start_one() for _ in range(PROCESSES)]
    kills = 0
    deadline = time.monotonic() + seconds
    rng = random.Random(7)
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(1.0, 3.0))
        victim = running.pop(rng.randrange(len(running)))
        # Through the process object: a worker that ended by itself was reaped when the
        # next one started (multiprocessing polls its children), and its pid may already be
        # another process's (pid_max is 32768 here) -- os.kill(pid) would kill that one.
        victim.kill()  # SIGKILL, maybe mid-section
        victim.join(10)
        kills += 1
        running.append(start_one())
    r.set(stop_key, 1)
    reports = [out.get(timeout=120) for _ in running]
    for process in running:
        process.join(30)

    # A lost update or an entry past the limit only where a loss was signalled (LockLost:
    # a renewal starved past the 1 s ttl on a loaded machine, each counted by its worker).
    lost = int(r.get("soak-data:lost") or 0)
    duplicates = int(r.get("soak-data:duplicates") or 0)
    over = int(r.get("soak-data:over") or 0)
    assert duplicates <= lost, f"{duplicates} lost updates, {lost} losses signalled"
    assert over == 0 or lost > 0, f"the limit exceeded {over} times, no loss signalled"
    counter = int(r.get("soak-data:counter") or 0)
    written = r.hlen("soak-data:written")
    assert counter - kills <= written <= counter  # a kill can cost a record, never a dup
    assert all(report["renewers"] <= 1 for report in reports)  # one renewer per process
    lived = [rep for rep in reports if rep["early_rss"]]
    assert lived, "no survivor ran long enough to sample its memory"
    growth = max(rep["late_rss"] - rep["early_rss"] for rep in lived)
    assert growth < 16 * 1024 * 1024, f"memory grew {growth / 1e6:.1f} MB"
    print(
        f"\nsoak: {seconds:.0f}s, {PROCESSES} processes, {kills} SIGKILLs, "
        f"{counter} locked increments ({duplicates} duplicates, {lost} losses signalled), "
        f"{sum(rep['calls'] for rep in reports)} calls by survivors, "
        f"max RSS growth {growth / 1e6:.2f} MB"
    )

    for key in r.scan_iter(match="soak-data:*"):
        r.delete(key)
    deadline = time.monotonic() + TTL + 5  # killed holders' leases and waiter entries expire
    while r.dbsize() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.dbsize() == 0, sorted(r.keys("*"))

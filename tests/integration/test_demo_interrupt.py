"""``redlock-deco demo`` interrupted: a Ctrl-C (SIGINT to the whole process group, as a
terminal sends it) ends it quietly with status 130, and it never leaves a key without an
expiry on the server it was pointed at. Real subprocesses on a real redis-server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from redlock_deco._demo import KEEP_AFTER
from redlock_deco.testing import RedisServer

DEADLINE = 30.0  # seconds any one wait here may take before it is a failure
COUNTERS = ("count", "inside", "limited", "released")


@contextmanager
def demo(*args: str) -> Iterator[subprocess.Popen[str]]:
    """``redlock-deco demo`` in a process group of its own, long enough to be interrupted;
    stopped by its group's ID whatever the test did to it."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    process = subprocess.Popen(
        [sys.executable, "-m", "redlock_deco", "demo", "--workers", "2", "--seconds", "60",
         *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        env=env, start_new_session=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=DEADLINE)


def demo_keys(client: redis.Redis) -> list[str]:
    return sorted(key.decode() for key in client.scan_iter(match="*redlock-deco-demo:*"))


def wait_for_counters(client: redis.Redis) -> None:
    """Until the workers have written every one of the demo's counters."""
    end = time.monotonic() + DEADLINE
    while not set(COUNTERS) <= {key.rpartition(":")[2] for key in demo_keys(client)}:
        assert time.monotonic() < end, f"the demo's keys did not all appear: {demo_keys(client)}"
        time.sleep(0.02)


def interrupt(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Ctrl-C: SIGINT to the demo's whole process group; its exit status and stderr."""
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=DEADLINE)
    return process.returncode, err


@pytest.mark.slow
def test_ctrl_c_ends_quietly_and_removes_the_keys(server: RedisServer, r: redis.Redis) -> None:
    with demo("--url", server.url) as process:
        wait_for_counters(r)
        status, err = interrupt(process)
    assert status == 130
    assert err.strip() == "", err  # no "Process SpawnPoolWorker-N:", no traceback
    assert demo_keys(r) == []


@pytest.mark.slow
def test_every_demo_key_expires_even_after_a_hard_kill(server: RedisServer, r: redis.Redis) -> None:
    with demo("--url", server.url) as process:
        wait_for_counters(r)
        os.killpg(process.pid, signal.SIGKILL)  # nothing gets to clean up
        process.wait(DEADLINE)
    left = demo_keys(r)
    assert {key.rpartition(":")[2] for key in left} >= set(COUNTERS), left
    ttls = {key: r.ttl(key) for key in left}
    assert all(0 < ttl <= KEEP_AFTER for ttl in ttls.values()), ttls


@pytest.mark.slow
def test_ctrl_c_on_its_own_throwaway_server_ends_quietly() -> None:
    """With no URL the throwaway redis-server is in the group too and stops at the SIGINT."""
    with demo() as process:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("redlock-deco demo: ")
        process.stdout.readline()  # the first progress line: the workers are running
        status, err = interrupt(process)
    assert status == 130
    assert err.strip() == "", err


@pytest.mark.slow
def test_ctrl_c_while_the_workers_start_ends_quietly(server: RedisServer, r: redis.Redis) -> None:
    """A Ctrl-C while the pool starts is held until it can be handled, and a worker that has
    not yet run its pool initializer ignores it too (inherited)."""
    with demo("--url", server.url) as process:
        assert process.stdout is not None
        process.stdout.readline()  # the header, flushed as the first worker is spawned
        status, err = interrupt(process)
    assert status == 130
    assert err.strip() == "", err
    assert all(r.ttl(key) > 0 for key in demo_keys(r))

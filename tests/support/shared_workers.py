"""Reader/writer workers for test_shared_processes.py, run in separate processes
(multiprocessing "spawn": fresh interpreters) or threads.

Every section inside a lock calls the GAUGE script on entry and on exit. It keeps, in one
hash on the server (its own key, outside the lock's keys), how many readers and writers are
inside right now; on entry it checks the invariant atomically (a writer must find itself the
only one inside, a reader must find no writer) and counts violations, and it keeps the
highest number of readers seen inside at once.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import redis

from redlock_deco import Lock, LockLost, register_provider

STATE = "{rwcheck}:state"  # the gauge's hash (a hash tag so it also works on a cluster)
EVENTS = "{rwcheck}:events"  # an ordered log of +/- entries, written by the same script

GAUGE = """
local role, sign, who = ARGV[1], ARGV[2], ARGV[3]
local field = role == 'r' and 'readers' or 'writers'
if sign == '+' then
  redis.call('HINCRBY', KEYS[1], field, 1)
  redis.call('HINCRBY', KEYS[1], 'entries_' .. role, 1)
  local readers = tonumber(redis.call('HGET', KEYS[1], 'readers') or '0')
  local writers = tonumber(redis.call('HGET', KEYS[1], 'writers') or '0')
  local bad = false
  if role == 'w' then
    bad = readers ~= 0 or writers ~= 1
  else
    bad = writers ~= 0
    local peak = tonumber(redis.call('HGET', KEYS[1], 'peak_readers') or '0')
    if readers > peak then
      redis.call('HSET', KEYS[1], 'peak_readers', readers)
    end
  end
  if bad then
    redis.call('HINCRBY', KEYS[1], 'violations', 1)
    redis.call('RPUSH', KEYS[1] .. ':bad', who .. ' r=' .. readers .. ' w=' .. writers)
    redis.call('PEXPIRE', KEYS[1] .. ':bad', 120000)
  end
else
  redis.call('HINCRBY', KEYS[1], field, -1)
end
redis.call('PEXPIRE', KEYS[1], 120000)
redis.call('RPUSH', KEYS[2], sign .. role .. ':' .. who)
redis.call('PEXPIRE', KEYS[2], 120000)
return redis.call('TIME')
"""


class Gauge:
    """Entry/exit bookkeeping through GAUGE on ``client`` (sync)."""

    def __init__(self, client: Any) -> None:
        self.script = client.register_script(GAUGE)

    def enter(self, role: str, who: str) -> float:
        """Count us in; the server's clock then, in seconds."""
        seconds, micros = self.script(keys=[STATE, EVENTS], args=[role, "+", who])
        return int(seconds) + int(micros) / 1e6

    def leave(self, role: str, who: str) -> None:
        self.script(keys=[STATE, EVENTS], args=[role, "-", who])


def _ready_and_go(client: redis.Redis, spec: dict[str, Any]) -> None:
    """Say this process is ready, then wait for the parent's go (so spawn's slow start does
    not skew the timings)."""
    client.incr(spec["ready"])
    deadline = time.monotonic() + 60
    while not client.exists(spec["go"]):
        if time.monotonic() > deadline:
            raise TimeoutError("no go signal")
        time.sleep(0.005)


def hammer(url: str, spec: dict[str, Any], role: str, who: str) -> dict[str, Any]:
    """Loop locked sections (``role`` "r": shared, "w": exclusive) for ``spec["seconds"]``
    after the go signal; each holds ``spec["hold"]`` (a (low, high) range) seconds."""
    register_provider("default", url)
    client = redis.Redis.from_url(url)
    gauge = Gauge(client)
    _ready_and_go(client, spec)
    lock = Lock(spec["name"], shared=role == "r", ttl=spec.get("ttl", 5), wait=30)
    low, high = spec["hold"]
    pause = spec.get("pause", (0.0, 0.0))
    rand = random.Random(who)
    waits: list[float] = []
    entries = 0
    end = time.monotonic() + spec["seconds"]
    while time.monotonic() < end:
        asked = time.monotonic()
        try:
            with lock:
                entered = time.monotonic()
                waits.append(entered - asked)
                server_in = gauge.enter(role, who)
                time.sleep(rand.uniform(low, high))
                gauge.leave(role, who)
        except LockLost as exc:
            # Which clock ran past the ttl: this process's (it stalled), or the server's alone?
            seconds, micros = client.time()
            held = (
                f"section {time.monotonic() - entered:.3f} s by this process's clock, "
                f"{int(seconds) + int(micros) / 1e6 - server_in:.3f} s by the server's"
            )
            raise LockLost(f"{exc} [{held}]", name=exc.name, key=exc.key) from exc
        entries += 1
        if pause[1]:
            time.sleep(rand.uniform(*pause))
    client.close()
    return {"who": who, "entries": entries, "max_wait": max(waits, default=0.0)}


def timed_entries(url: str, spec: dict[str, Any], role: str, who: str) -> dict[str, Any]:
    """After the go signal and ``spec["delay"]`` s, take the lock ``spec["attempts"]`` times
    (``role`` "r" shared, "w" exclusive), ``spec["gap"]`` s apart, measuring how long each
    wait took; before each, note how many of the other side were inside (from the gauge)."""
    register_provider("default", url)
    client = redis.Redis.from_url(url)
    gauge = Gauge(client)
    _ready_and_go(client, spec)
    time.sleep(spec["delay"])
    other = "readers" if role == "w" else "writers"
    lock = Lock(spec["name"], shared=role == "r", ttl=5, wait=10)
    waits: list[float] = []
    busy_at_start: list[int] = []
    for _ in range(spec["attempts"]):
        busy_at_start.append(int(client.hget(STATE, other) or 0))
        asked = time.monotonic()
        with lock:
            waits.append(time.monotonic() - asked)
            gauge.enter(role, who)
            time.sleep(spec["hold"])
            gauge.leave(role, who)
        time.sleep(spec["gap"])
    client.close()
    return {"who": who, "waits": waits, "busy_at_start": busy_at_start}


def queued_section(url: str, name: str, role: str, who: str, hold: float) -> None:
    """Take the lock once (waiting up to 10 s), log entry/exit through the gauge, hold."""
    register_provider("default", url)
    client = redis.Redis.from_url(url)
    gauge = Gauge(client)
    with Lock(name, shared=role == "r", ttl=5, wait=10):
        gauge.enter(role, who)
        time.sleep(hold)
        gauge.leave(role, who)
    client.close()


def hold_forever(url: str, name: str, shared: bool, ttl: float, ready: Any) -> None:
    """Take the lock (renewed, ``ttl``), signal readiness; the parent SIGKILLs us."""
    register_provider("default", url)
    lock = Lock(name, shared=shared, ttl=ttl, wait=5)  # kept: renewed while the object lives
    lock.acquire()
    ready.set()
    while True:
        time.sleep(1)


def read_through(url: str, name: str, ttl: float, hold: float, ready: Any, out: Any) -> None:
    """Hold a share (renewed, ``ttl``) for ``hold`` s, checking it is still ours; report
    whether it survived, and when it was released (time.time(), stamped before the release)."""
    register_provider("default", url)
    lock = Lock(name, shared=True, ttl=ttl, wait=5)
    lock.acquire()
    ready.set()
    still_owned = True
    end = time.monotonic() + hold
    try:
        while time.monotonic() < end:
            still_owned = still_owned and lock.owned()
            time.sleep(0.05)
        released = time.time()
        lock.release()
        out.put({"owned": still_owned, "lost": False, "released": released})
    except LockLost:
        out.put({"owned": False, "lost": True, "released": time.time()})


def async_hammer(url: str, spec: dict[str, Any], roles: list[str]) -> dict[str, Any]:
    """One process, one event loop: a task per entry of ``roles`` ("r"/"w") loops sections
    through redlock_deco.asyncio.Lock (ownership per task) for ``spec["seconds"]``."""
    import redis.asyncio

    from redlock_deco.asyncio import Lock as AsyncLock

    async def main() -> dict[str, Any]:
        register_provider("default", url)
        client = redis.asyncio.Redis.from_url(url)
        script = client.register_script(GAUGE)
        sync_client = redis.Redis.from_url(url)
        _ready_and_go(sync_client, spec)
        sync_client.close()
        low, high = spec["hold"]
        end = time.monotonic() + spec["seconds"]
        counts: dict[str, int] = {}

        async def task(role: str, who: str) -> None:
            rand = random.Random(who)
            lock = AsyncLock(spec["name"], shared=role == "r", ttl=5, wait=30)
            counts[who] = 0
            while time.monotonic() < end:
                async with lock:
                    await script(keys=[STATE, EVENTS], args=[role, "+", who])
                    await asyncio.sleep(rand.uniform(low, high))
                    await script(keys=[STATE, EVENTS], args=[role, "-", who])
                counts[who] += 1
                await asyncio.sleep(rand.uniform(0, 0.01))

        await asyncio.gather(
            *(task(role, f"a{os.getpid()}.{i}{role}") for i, role in enumerate(roles))
        )
        await client.aclose()
        return counts

    return asyncio.run(main())


def report(out: Any, func: str, args: tuple[Any, ...]) -> None:
    """Run ``func`` (a function of this module) with ``args``; put its result, or the error
    it raised, on ``out``."""
    try:
        result = globals()[func](*args)
    except BaseException as exc:  # the parent shows it
        out.put({"error": f"{func}{args[2:]!r}: {exc!r}"})
    else:
        out.put(result)

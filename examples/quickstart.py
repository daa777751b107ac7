"""Quick start: four processes bump one counter through @locked, and no update is lost.

Runs with no setup: without REDIS_URL it starts a throwaway redis-server (from PATH or the
`server` extra) and stops it at the end.
"""

from __future__ import annotations

import multiprocessing
import time

import redis

from redlock_deco import locked, register_provider
from redlock_deco.testing import redis_url


@locked("counter:{name}", ttl=5, wait=30)
def bump(client: redis.Redis, name: str) -> None:
    """A read-modify-write that loses updates whenever two processes interleave."""
    value = int(client.get(name) or 0)
    time.sleep(0.001)
    client.set(name, value + 1)


def worker(url: str, times: int) -> None:
    register_provider("default", url)  # providers resolve lazily, in each process
    client = redis.Redis.from_url(url)
    for _ in range(times):
        bump(client, "visits")


def main() -> int:
    with redis_url() as url:
        client = redis.Redis.from_url(url)
        client.delete("visits")
        procs, times = 4, 50
        started = time.monotonic()
        ctx = multiprocessing.get_context("spawn")
        workers = [ctx.Process(target=worker, args=(url, times)) for _ in range(procs)]
        for p in workers:
            p.start()
        for p in workers:
            p.join()
        total = int(client.get("visits") or 0)
        client.delete("visits")
    lost = procs * times - total
    print(f"{procs} processes x {times} locked increments in {time.monotonic() - started:.2f}s")
    print(f"counter = {total}, lost updates = {lost}")
    return 0 if lost == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

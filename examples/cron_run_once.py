"""Run-once jobs: five processes fire the same nightly job; @locked(wait=0, on_busy="skip")
lets one of them run it while the others skip without waiting, and a "done" marker written
by the job keeps a host that fires late from running it again.

The lock alone is not run-once: it keeps hosts out of the job *at the same time*. A host whose
clock is behind, or whose start is slow, fires after the first run has ended and released the
lock, and would run the job a second time (this example's own check once failed so, on a busy
machine). The marker, read and written inside the lock, closes that gap.
"""

from __future__ import annotations

import multiprocessing
import os
import time

import redis

from redlock_deco import locked, register_provider
from redlock_deco.testing import redis_url

DONE_FOR = 2 * 24 * 3600  # the marker outlives any host's late firing for that day


@locked("cron:nightly-report:{day}", ttl=60, wait=0, on_busy="skip")
def nightly_report(day: str, store: redis.Redis) -> str | None:
    if store.exists(f"cron:done:{day}"):
        return None  # a host that fired late: the job already ran for this day
    time.sleep(0.5)  # the job itself; the others skip meanwhile
    store.set(f"cron:done:{day}", os.getpid(), ex=DONE_FOR)
    return f"pid {os.getpid()} ran the report for {day}"


def fire(url: str, day: str, at: float) -> str | None:
    """One cron host: waits for the scheduled instant, then fires the job."""
    register_provider("default", url)
    time.sleep(max(0.0, at - time.time()))
    return nightly_report(day, redis.Redis.from_url(url))


def main() -> int:
    with redis_url() as url:
        redis.Redis.from_url(url).delete("cron:done:2026-11-21")  # a demo: run it again
        at = time.time() + 3.0  # every host fires at the same scheduled instant
        with multiprocessing.get_context("spawn").Pool(5) as pool:
            outcomes = pool.starmap(fire, [(url, "2026-11-21", at)] * 5)
        left = redis.Redis.from_url(url).exists("lock:cron:nightly-report:2026-11-21")
    ran = [o for o in outcomes if o is not None]
    for outcome in ran:
        print(outcome)
    print(f"{len(outcomes) - len(ran)} processes skipped (busy, or the job had run)")
    return 0 if len(ran) == 1 and not left else 1


if __name__ == "__main__":
    raise SystemExit(main())

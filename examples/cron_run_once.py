"""Run-once jobs: five processes fire the same nightly job; @locked(wait=0, on_busy="skip")
lets exactly one of them run it and the others skip without waiting."""

from __future__ import annotations

import multiprocessing
import os
import time

import redis

from redlock_deco import locked, register_provider
from redlock_deco.testing import redis_url


@locked("cron:nightly-report:{day}", ttl=60, wait=0, on_busy="skip")
def nightly_report(day: str) -> str:
    time.sleep(0.5)  # the job itself; the others skip meanwhile
    return f"pid {os.getpid()} ran the report for {day}"


def fire(url: str, day: str, at: float) -> str | None:
    """One cron host: waits for the scheduled instant, then fires the job."""
    register_provider("default", url)
    time.sleep(max(0.0, at - time.time()))
    return nightly_report(day)


def main() -> int:
    with redis_url() as url:
        at = time.time() + 3.0  # every host fires at the same scheduled instant
        with multiprocessing.get_context("spawn").Pool(5) as pool:
            outcomes = pool.starmap(fire, [(url, "2026-11-21", at)] * 5)
        left = redis.Redis.from_url(url).exists("lock:cron:nightly-report:2026-11-21")
    ran = [o for o in outcomes if o is not None]
    for outcome in ran:
        print(outcome)
    print(f"{len(outcomes) - len(ran)} processes skipped (on_busy='skip' returned None)")
    return 0 if len(ran) == 1 and not left else 1


if __name__ == "__main__":
    raise SystemExit(main())

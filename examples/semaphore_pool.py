"""A counting semaphore: twelve threads share a partner API that allows three calls at once;
@limited keeps them to three across every process, and a Semaphore object does the same."""

from __future__ import annotations

import threading
import time

import redis

from redlock_deco import Semaphore, limited, register_provider
from redlock_deco.testing import redis_url

lock = threading.Lock()
in_flight = 0
peak = 0


@limited("partner-api:{tenant}", limit=3, ttl=10, wait=30)
def call_partner(tenant: str) -> None:
    global in_flight, peak
    with lock:
        in_flight += 1
        peak = max(peak, in_flight)
    time.sleep(0.03)
    with lock:
        in_flight -= 1


def main() -> int:
    with redis_url() as url:
        register_provider("default", url)
        threads = [threading.Thread(target=call_partner, args=("acme",)) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"12 calls, at most {peak} at once (limit 3)")
        with Semaphore("partner-api:acme", limit=3) as slot:
            print(f"holding one slot by hand: {slot.holders()} of {slot.limit} in use")
        left = redis.Redis.from_url(url).dbsize()
    print(f"keys left behind: {left}")
    return 0 if peak == 3 and left == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

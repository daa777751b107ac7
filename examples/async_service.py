"""asyncio: @locked/@limited on async def, the asyncio Lock twin, ownership per task, and a
cancelled task that leaves nothing held."""

from __future__ import annotations

import asyncio
import contextlib

import redis

from redlock_deco import limited, locked, register_provider
from redlock_deco.asyncio import Lock
from redlock_deco.testing import redis_url

in_flight = 0
peak = 0


@locked("order:{order_id}", ttl=10)
async def charge(order_id: int) -> str:
    await asyncio.sleep(0.01)
    return f"charged order {order_id}"


class Exporter:
    def __init__(self, tenant: str) -> None:
        self.tenant_id = tenant

    @limited("export:{self.tenant_id}", limit=2, ttl=10)
    async def export(self, n: int) -> int:
        global in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return n


async def service(url: str) -> int:
    print(await charge(7))
    results = await asyncio.gather(*(Exporter("acme").export(n) for n in range(8)))
    print(f"8 exports, at most {peak} at once (limit 2): {results}")

    lock = Lock("report")
    async with lock:

        async def other_task() -> bool:
            return await Lock("report", wait=0).acquire()  # another task: must not get it

        print("another task could take the held lock:", await asyncio.create_task(other_task()))

    @locked("slow-job", ttl=10)
    async def slow_job() -> None:
        await asyncio.sleep(30)

    task = asyncio.create_task(slow_job())
    await asyncio.sleep(0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task  # the lease was released before the cancellation reached us
    client = redis.Redis.from_url(url)
    left = client.exists("lock:slow-job")
    print("lock held after cancelling its task:", bool(left))
    return 0 if peak <= 2 and not left else 1


def main() -> int:
    with redis_url() as url:
        register_provider("default", url)
        return asyncio.run(service(url))


if __name__ == "__main__":
    raise SystemExit(main())

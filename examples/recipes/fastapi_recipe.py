"""FastAPI: a dependency that holds a lock per path parameter while the endpoint runs.

``order_lock`` is an async dependency with ``yield``: it takes ``order:{order_id}`` through
``redlock_deco.asyncio.Lock`` before the endpoint runs and gives it back when the endpoint
returns (its lease is renewed meanwhile, however long that takes). ``scope="function"``
(FastAPI 0.121.1 and later) gives it back *before* the response is sent: with the default
scope the release comes after, and a client that got its 200 and at once asks again could be
refused. With ``wait=0`` a second
request for a busy order is refused at once: ``LockNotAcquired``, which the exception handler
answers with 409 Conflict and ``Retry-After``. Requests for other orders run side by side.
The default provider comes from ``REDIS_URL``.

Run it: ``REDIS_URL=redis://localhost:6379/0 uvicorn fastapi_recipe:app`` in this folder, or
``python examples/recipes/fastapi_recipe.py`` for a self-contained demonstration.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from redlock_deco import LockNotAcquired, register_provider
from redlock_deco.asyncio import Lock
from redlock_deco.testing import redis_url

# Seconds a refused client should wait: a guess, since a held lock says nothing of when its
# holder will be done (it is renewed for as long as the request runs).
RETRY_AFTER = 1
WORK_SECONDS = 0.5  # what shipping an order takes in this demonstration

app = FastAPI()


async def order_lock(order_id: int) -> AsyncIterator[None]:
    """Hold ``order:{order_id}`` around the endpoint; LockNotAcquired if another request has it."""
    async with Lock(f"order:{order_id}", ttl=30, wait=0):
        yield


@app.exception_handler(LockNotAcquired)
async def busy(request: Request, error: LockNotAcquired) -> JSONResponse:
    return JSONResponse(
        {"detail": f"{error.name} is busy"},
        status_code=409,
        headers={"Retry-After": str(RETRY_AFTER)},
    )


@app.post("/orders/{order_id}/ship", dependencies=[Depends(order_lock, scope="function")])
async def ship(order_id: int) -> dict[str, object]:
    await asyncio.sleep(WORK_SECONDS)  # the work: charge, print the label...
    return {"order": order_id, "shipped": True}


async def demonstrate() -> list[int]:
    """Two requests for order 9 and one for order 10, all at once."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
        replies = await asyncio.gather(*(client.post(f"/orders/{n}/ship") for n in (9, 9, 10)))
    for order, reply in zip((9, 9, 10), replies, strict=True):
        print(order, reply.status_code, reply.headers.get("Retry-After"), reply.json())
    return [reply.status_code for reply in replies]


def main() -> int:
    with redis_url() as url:
        register_provider("default", url)
        codes = asyncio.run(demonstrate())
    return 0 if sorted(codes) == [200, 200, 409] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Flask: one request per order at a time, across every worker process and host.

``@locked("order:{order_id}", wait=0)`` sits under the route decorator: Flask passes the URL's
``order_id`` to the view, the lock's name is filled from it, and the lock is held while the
view runs. A second request for the same order is refused at once (``wait=0``) with
``LockNotAcquired``, which the error handler answers with 409 Conflict and ``Retry-After``;
requests for other orders run side by side. The default provider comes from ``REDIS_URL``.

Run it: ``REDIS_URL=redis://localhost:6379/0 flask --app flask_recipe run`` in this folder, or
``python examples/recipes/flask_recipe.py`` for a self-contained demonstration.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from flask import Flask
from flask.typing import ResponseReturnValue
from werkzeug.test import TestResponse

from redlock_deco import LockNotAcquired, locked, register_provider
from redlock_deco.testing import redis_url

# Seconds a refused client should wait: a guess, since a held lock says nothing of when its
# holder will be done (it is renewed for as long as the view runs).
RETRY_AFTER = 1
WORK_SECONDS = 0.5  # what shipping an order takes in this demonstration

app = Flask(__name__)


@app.errorhandler(LockNotAcquired)
def busy(error: LockNotAcquired) -> ResponseReturnValue:
    return {"detail": f"{error.name} is busy"}, 409, {"Retry-After": str(RETRY_AFTER)}


@app.post("/orders/<int:order_id>/ship")
@locked("order:{order_id}", ttl=30, wait=0)
def ship(order_id: int) -> dict[str, object]:
    time.sleep(WORK_SECONDS)  # the work: charge, print the label...
    return {"order": order_id, "shipped": True}


def ship_through_flask(order_id: int) -> TestResponse:
    return app.test_client().post(f"/orders/{order_id}/ship")


def main() -> int:
    orders = [9, 9, 10]  # two requests for order 9 and one for order 10, all at once
    with redis_url() as url:
        register_provider("default", url)
        with ThreadPoolExecutor(len(orders)) as pool:
            replies = list(pool.map(ship_through_flask, orders))
    for order, reply in zip(orders, replies, strict=True):
        print(order, reply.status_code, reply.headers.get("Retry-After"), reply.get_json())
    return 0 if sorted(reply.status_code for reply in replies) == [200, 200, 409] else 1


if __name__ == "__main__":
    raise SystemExit(main())

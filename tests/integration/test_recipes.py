"""The framework recipes of examples/recipes/ against a real redis-server: Django with
django-redis, FastAPI, Flask and Celery.

Where exclusion matters a second process holds the lock (``held_elsewhere``), or the app runs in
a server process of its own (uvicorn, a Celery worker); every process started here is stopped
by its PID. The slow tests start those processes; each recipe's fast tests run in-process.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import redis

import redlock_deco
from redlock_deco import Lock
from redlock_deco.testing import RedisServer, free_port

RECIPES = Path(__file__).resolve().parents[2] / "examples" / "recipes"
DEADLINE = 30.0  # seconds any one wait in these tests may take before it is a failure


def recipe(name: str) -> ModuleType:
    """Import ``examples/recipes/<name>.py`` under its own name, as its servers do."""
    if str(RECIPES) not in sys.path:
        sys.path.insert(0, str(RECIPES))
    return importlib.import_module(name)


def wait_until(condition: Callable[[], object], what: str, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline}s waiting until {what}")
        time.sleep(0.01)


def stop(process: subprocess.Popen[Any]) -> None:
    """End ``process`` by its PID: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)


HOLDER = """
import sys
from redlock_deco import Lock, register_provider
register_provider("default", sys.argv[1])
with Lock(sys.argv[2], prefix=sys.argv[3], ttl=30, wait=10):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


@contextmanager
def held_elsewhere(url: str, name: str, prefix: str = "lock:") -> Iterator[None]:
    """``Lock(name, prefix=prefix)`` held by another process for the ``with`` block."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, name, prefix],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as holder:  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdin is not None
            timer = threading.Timer(DEADLINE, holder.kill)  # a hung holder cannot hang the test
            timer.start()
            line = holder.stdout.readline()
            timer.cancel()
            assert line == "held\n", f"the holder process did not take {prefix}{name}"
            yield
            holder.stdin.close()
            assert holder.wait(DEADLINE) == 0
        finally:
            stop(holder)


# -- Flask -------------------------------------------------------------------------------------


@pytest.fixture
def flask_app() -> Any:
    return recipe("flask_recipe").app


def test_flask_busy_order_is_409_with_retry_after(flask_app: Any, server: RedisServer) -> None:
    client = flask_app.test_client()
    with held_elsewhere(server.url, "order:9"):
        busy = client.post("/orders/9/ship")
        other = client.post("/orders/10/ship")
    assert busy.status_code == 409 and busy.headers["Retry-After"] == "1"
    assert busy.get_json() == {"detail": "order:9 is busy"}
    assert other.status_code == 200
    assert client.post("/orders/9/ship").get_json() == {"order": 9, "shipped": True}


def test_flask_concurrent_requests_one_per_order(
    flask_app: Any, server: RedisServer, r: redis.Redis
) -> None:
    def post(order: int) -> Any:
        return flask_app.test_client().post(f"/orders/{order}/ship")

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(post, 9)
        wait_until(lambda: r.exists("lock:order:9"), "the first request holds order 9")
        other = pool.submit(post, 10)  # another order: runs beside it
        busy = pool.submit(post, 9).result(DEADLINE)
        assert busy.status_code == 409 and not first.done()  # refused while the first one ran
        assert busy.headers["Retry-After"] == "1"
        assert first.result(DEADLINE).status_code == other.result(DEADLINE).status_code == 200
    assert r.keys("lock:*") == []


# -- FastAPI -----------------------------------------------------------------------------------


async def post_all(base_url: str, orders: list[int], transport: Any = None) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=base_url, transport=transport, timeout=DEADLINE) as c:
        return list(await asyncio.gather(*(c.post(f"/orders/{n}/ship") for n in orders)))


def test_fastapi_concurrent_requests_in_process(r: redis.Redis) -> None:
    app = recipe("fastapi_recipe").app
    replies = asyncio.run(post_all("http://shop", [9, 9, 10], httpx.ASGITransport(app=app)))
    by_order = sorted((reply.url.path, reply.status_code) for reply in replies)
    assert by_order == [("/orders/10/ship", 200), ("/orders/9/ship", 200), ("/orders/9/ship", 409)]
    [busy] = [reply for reply in replies if reply.status_code == 409]
    assert busy.headers["Retry-After"] == "1" and busy.json() == {"detail": "order:9 is busy"}
    assert r.keys("lock:*") == []


def test_fastapi_lock_is_released_before_the_response_starts(r: redis.Redis) -> None:
    """``scope="function"``: a client that got its 200 may at once ask again (with the
    default scope the release would come after the response is sent)."""
    app = recipe("fastapi_recipe").app
    seen: list[tuple[int, int]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            seen.append((message["status"], r.exists("lock:order:9")))

    path = "/orders/9/ship"
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": b"", "headers": [],
             "server": ("shop", 80), "client": ("127.0.0.1", 50000)}  # fmt: skip
    asyncio.run(app(scope, receive, send))
    assert seen == [(200, 0)]  # the response started with the lock already given back


@pytest.fixture(scope="module")
def uvicorn_url(server: RedisServer) -> Iterator[str]:
    """The FastAPI recipe served by a real uvicorn process, its work lengthened to 3 s: with
    the recipe's 0.5 s, on a loaded machine the first request had finished before the
    concurrent ones reached the server (CI's slow leg: [200, 200, 200], no 409)."""
    port = free_port()
    serve = (
        "import fastapi_recipe, uvicorn; fastapi_recipe.WORK_SECONDS = 3.0; "
        f"uvicorn.run(fastapi_recipe.app, port={port}, access_log=False, log_level='warning')"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", serve], cwd=RECIPES, env={**os.environ, "REDIS_URL": server.url}
    )
    try:

        def listening() -> bool:
            assert process.poll() is None, "uvicorn exited"
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", port)) == 0

        wait_until(listening, "uvicorn listens")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


@pytest.mark.slow
def test_fastapi_uvicorn_concurrent_requests(uvicorn_url: str, r: redis.Redis) -> None:
    async def scenario() -> tuple[list[httpx.Response], list[httpx.Response]]:
        first = asyncio.ensure_future(post_all(uvicorn_url, [9]))
        while not r.exists("lock:order:9"):
            assert not first.done(), "the first request ended before it was seen holding"
            await asyncio.sleep(0.01)
        meanwhile = await post_all(uvicorn_url, [9, 10, 11])
        return await first, meanwhile

    [first], meanwhile = asyncio.run(scenario())
    assert first.status_code == 200 and first.json() == {"order": 9, "shipped": True}
    assert [reply.status_code for reply in meanwhile] == [409, 200, 200]
    assert meanwhile[0].headers["Retry-After"] == "1"
    assert r.keys("lock:*") == []


@pytest.mark.slow
def test_fastapi_uvicorn_order_held_by_another_process(
    uvicorn_url: str, server: RedisServer
) -> None:
    with held_elsewhere(server.url, "order:9"):
        [busy] = asyncio.run(post_all(uvicorn_url, [9]))
    assert busy.status_code == 409 and busy.headers["Retry-After"] == "1"
    [shipped] = asyncio.run(post_all(uvicorn_url, [9]))
    assert shipped.status_code == 200


# -- Django with django-redis ------------------------------------------------------------------

DJANGO_DB = 3  # not the default provider's db 0: a key there proves django-redis's client ran


@pytest.fixture(scope="module")
def django_module(server: RedisServer) -> ModuleType:
    module = recipe("django_recipe")
    from django.conf import settings

    if not settings.configured:
        module.setup(f"redis://127.0.0.1:{server.port}/{DJANGO_DB}")
    return module


@pytest.fixture
def django(django_module: ModuleType) -> ModuleType:
    # The recipe registers its provider at import; this suite re-registers "default" per test.
    redlock_deco.register_provider("default", django_module.django_redis_client)
    return django_module


def test_django_cache_lock_held_makes_the_locked_view_busy(
    django: ModuleType, server: RedisServer
) -> None:
    from django.test import Client

    browser = Client()
    lock = django.redis_cache.lock("order:9", timeout=30)
    assert lock.acquire(blocking=False)
    try:
        assert server.client(db=DJANGO_DB).exists(":1:order:9")  # django-redis's own key
        busy = browser.post("/orders/9/ship")
    finally:
        lock.release()
    assert busy.status_code == 409 and busy["Retry-After"] == "1"
    assert busy.json() == {"detail": "order:9 is busy"}
    shipped = browser.post("/orders/9/ship")
    assert shipped.status_code == 200 and shipped.json() == {"order": 9, "shipped": True}


def test_django_locked_held_makes_cache_lock_busy(django: ModuleType, server: RedisServer) -> None:
    with Lock("order:9", prefix=django.CACHE_KEY_PREFIX, wait=0):  # through django-redis's client
        assert server.client(db=DJANGO_DB).exists(":1:order:9")
        assert not server.client(db=0).exists(":1:order:9", "lock:order:9")
        assert not django.redis_cache.lock("order:9").acquire(blocking=False)
    lock = django.redis_cache.lock("order:9")
    assert lock.acquire(blocking=False)
    lock.release()


def test_django_view_and_cache_lock_across_processes(
    django: ModuleType, server: RedisServer
) -> None:
    from django.test import Client

    url = f"redis://127.0.0.1:{server.port}/{DJANGO_DB}"
    with held_elsewhere(url, "order:9", prefix=django.CACHE_KEY_PREFIX):
        assert Client().post("/orders/9/ship").status_code == 409
        assert not django.redis_cache.lock("order:9").acquire(blocking=False)
        assert Client().post("/orders/10/ship").status_code == 200
    assert Client().post("/orders/9/ship").status_code == 200


# -- Celery ------------------------------------------------------------------------------------

# kombu's Redis transport refuses an older redis-py than its own floor (kombu 5.7: 6.1), and
# CI's lowest-dependencies leg pins redis-py 5.0.1: there the Celery recipe cannot run at all.
kombu_takes_this_redis_py = pytest.mark.skipif(
    redis.VERSION < (6, 1, 0), reason="kombu's Redis transport needs redis-py >= 6.1"
)


@pytest.fixture(scope="module")
def celery_server() -> Iterator[RedisServer]:
    """A Redis of its own: the suite's flush between tests would drop kombu's queue bindings,
    which a producer that declared its queue once does not declare again."""
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def celery_recipe(celery_server: RedisServer) -> ModuleType:
    module = recipe("celery_recipe")
    module.use_redis(celery_server.url)
    return module


def unique_day() -> str:
    return f"day-{time.time_ns()}"


@kombu_takes_this_redis_py
def test_celery_enqueue_is_deduplicated_until_the_task_ends(
    celery_recipe: ModuleType, celery_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(celery_recipe, "WORK_SECONDS", 0.01)  # three runs in-process
    day = unique_day()
    marker = celery_recipe.marker(day).key
    client = celery_server.client()
    before = client.llen("celery")
    sent = celery_recipe.enqueue_report(day)
    token = client.get(marker)
    assert sent is not None and token is not None
    assert 0 < client.ttl(marker) <= celery_recipe.MARKER_TTL
    assert celery_recipe.enqueue_report(day) is None  # the same thread, again: still refused
    assert client.llen("celery") == before + 1  # one message, not two
    client.delete("celery")  # no worker here: run the tasks in-process instead
    # Runs that were not enqueued with this marker -- a plain .delay() or a beat schedule, or
    # a task whose own marker expired and was taken again since -- leave it alone.
    plain = celery_recipe.build_report.apply(kwargs={"day": day})
    stale_token = "somehost:1:00000000:" + "0" * 32
    stale = celery_recipe.build_report.apply(
        kwargs={"day": day},
        headers={celery_recipe.MARKER_DAY: day, celery_recipe.MARKER_TOKEN: stale_token},
    )
    assert plain.get()["day"] == stale.get()["day"] == day
    assert client.get(marker) == token and celery_recipe.enqueue_report(day) is None
    done = celery_recipe.build_report.apply(  # the enqueued message, as a worker runs it
        kwargs={"day": day},
        headers={celery_recipe.MARKER_DAY: day, celery_recipe.MARKER_TOKEN: token.decode()},
    )
    assert done.get()["day"] == day and not client.exists(marker)  # done for good: released
    assert celery_recipe.enqueue_report(day) is not None
    client.delete("celery", marker)


@pytest.fixture(scope="module")
def celery_worker(celery_server: RedisServer) -> Iterator[int]:
    """A real Celery worker (prefork, 2 processes) on the Redis broker; yields its PID. One
    for the module: its tests use days of their own and wait for every task they send."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "--quiet", "-A", "celery_recipe", "worker", "-c", "2",
         "--without-mingle", "--without-gossip", "--without-heartbeat", "--loglevel", "WARNING"],
        cwd=RECIPES, env={**os.environ, "REDIS_URL": celery_server.url},
    )  # fmt: skip
    try:
        yield worker.pid
    finally:
        children = pool_processes(worker.pid)
        stop(worker)
        for pid in children:  # a pool process the main one failed to reap
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def pool_processes(pid: int) -> list[int]:
    try:
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    except FileNotFoundError:
        return []


@pytest.mark.slow
@kombu_takes_this_redis_py
def test_celery_worker_runs_one_report_per_day_at_a_time(
    celery_recipe: ModuleType, celery_worker: int, celery_server: RedisServer
) -> None:
    day = unique_day()
    first = celery_recipe.enqueue_report(day)
    assert first is not None and celery_recipe.enqueue_report(day) is None
    direct = celery_recipe.build_report.delay(day=day)  # bypasses the marker, as a redelivery
    reports = sorted([first.get(timeout=DEADLINE), direct.get(timeout=DEADLINE)],
                     key=lambda report: report["started"])  # fmt: skip
    assert reports[0]["finished"] <= reports[1]["started"], reports  # never overlapping
    assert reports[1]["retries"] >= 1  # it found the day busy and retried
    marker = celery_recipe.marker(day).key
    wait_until(lambda: not celery_server.client().exists(marker), "the enqueued run unmarks")
    again = celery_recipe.enqueue_report(day)  # done for good: the day may be enqueued again
    assert again is not None and again.get(timeout=DEADLINE)["retries"] == 0


@pytest.mark.slow
@kombu_takes_this_redis_py
def test_celery_plain_run_leaves_an_enqueued_runs_marker(
    celery_recipe: ModuleType, celery_worker: int, celery_server: RedisServer
) -> None:
    """A run sent with a plain ``.delay()`` (or by beat) ends first, while the enqueued run
    still waits its turn: duplicates stay refused until the enqueued run itself ends."""
    day, client = unique_day(), celery_server.client()
    direct = celery_recipe.build_report.delay(day=day)
    wait_until(lambda: client.exists(f"lock:report:{day}"), "the plain run holds the day")
    sent = celery_recipe.enqueue_report(day)
    assert sent is not None
    refused, again = 0, None
    while not sent.ready():  # the plain run ends meanwhile: its after_return runs too
        again = celery_recipe.enqueue_report(day)
        if again is not None:
            # Sent only once the marker went, which the enqueued run removes after Celery
            # stored its result: it ended between the check above and this call (a loaded
            # CI machine widened that window), and a new run is due.
            assert sent.ready(), "a duplicate was sent while the enqueued run had not ended"
            break
        refused += 1
        time.sleep(0.05)
    assert direct.ready() and direct.get()["finished"] <= sent.get()["started"]
    assert refused >= 10  # about a second's worth of tries after the plain run ended
    if again is not None:
        again.get(timeout=DEADLINE)
    wait_until(lambda: not client.exists(celery_recipe.marker(day).key), "its run unmarks")


def all_workers_busy(celery_recipe: ModuleType, client: redis.Redis) -> list[Any]:
    """Both pool processes running a report of a day of its own."""
    days = [unique_day() for _ in range(2)]
    busy = [celery_recipe.build_report.delay(day=day) for day in days]
    wait_until(lambda: client.exists(*(f"lock:report:{day}" for day in days)) == 2,
               "both pool processes run a report")  # fmt: skip
    return busy


@pytest.mark.slow
@kombu_takes_this_redis_py
def test_celery_revoked_queued_task_removes_its_marker(
    celery_recipe: ModuleType, celery_worker: int, celery_server: RedisServer
) -> None:
    day, client = unique_day(), celery_server.client()
    marker = celery_recipe.marker(day).key
    busy = all_workers_busy(celery_recipe, client)
    sent = celery_recipe.enqueue_report(day)  # queued behind them
    assert sent is not None
    revoke = celery_recipe.app.control.revoke
    assert revoke(sent.id, reply=True, limit=1, timeout=DEADLINE), "no worker acknowledged it"
    # The worker discards the task (at once if it has reserved it, else when it receives it);
    # task_revoked unmarks it.
    wait_until(lambda: not client.exists(marker), "the revoked task's marker is removed")
    assert sent.state == "REVOKED" and all(run.get(timeout=DEADLINE) for run in busy)
    again = celery_recipe.enqueue_report(day)  # not an hour later: at once
    assert again is not None and again.get(timeout=DEADLINE)["day"] == day
    wait_until(lambda: not client.exists(marker), "the new run unmarks")


@pytest.mark.slow
@kombu_takes_this_redis_py
def test_celery_terminated_running_task_removes_its_marker(
    celery_recipe: ModuleType, celery_worker: int, celery_server: RedisServer
) -> None:
    day, client = unique_day(), celery_server.client()
    marker = celery_recipe.marker(day).key
    sent = celery_recipe.enqueue_report(day)
    assert sent is not None
    wait_until(lambda: client.exists(f"lock:report:{day}"), "a worker process runs the report")
    revoke = celery_recipe.app.control.revoke
    assert revoke(sent.id, terminate=True, reply=True, limit=1, timeout=DEADLINE)
    wait_until(lambda: not client.exists(marker), "the terminated task's marker is removed")
    assert sent.state == "REVOKED"
    again = celery_recipe.enqueue_report(day)  # not an hour later: at once
    assert again is not None and again.get(timeout=DEADLINE)["day"] == day
    wait_until(lambda: not client.exists(marker), "the new run unmarks")


@pytest.mark.slow
@kombu_takes_this_redis_py
def test_celery_killed_worker_process_frees_the_lock_within_its_lease(
    celery_recipe: ModuleType, celery_worker: int, celery_server: RedisServer
) -> None:
    day, client = unique_day(), celery_server.client(decode_responses=True)
    key = f"lock:report:{day}"
    sent = celery_recipe.enqueue_report(day)
    assert sent is not None
    wait_until(lambda: client.exists(key), "a worker process runs the report")
    token = client.get(key)
    assert token is not None
    holder = int(token.split(":")[1])  # a token reads host:pid:...
    assert holder in pool_processes(celery_worker)
    os.kill(holder, signal.SIGKILL)  # OOM killer
    killed = time.monotonic()
    # Meanwhile: the marker stays (no duplicate is enqueued), and a run for the day (as a
    # redelivery finds it) is refused until the dead process's lease ends, so it retries.
    rival = celery_recipe.build_report.delay(day=day)
    assert celery_recipe.enqueue_report(day) is None
    wait_until(lambda: client.get(key) != token, "the dead process's lease ends")
    freed, freed_at = time.monotonic() - killed, time.time()
    # Nobody released it: it ended with its lease, renewed a third of the way through (the
    # upper bound leaves a loaded machine's polling and scheduling a second: 0.29 s late once).
    assert celery_recipe.LEASE / 2 <= freed <= celery_recipe.LEASE + 1.0, freed
    rerun = rival.get(timeout=DEADLINE)
    assert rerun["retries"] >= 1 and rerun["pid"] != holder
    # acks_late + reject_on_worker_lost: the killed run's message was delivered again, and ran.
    report = sent.get(timeout=DEADLINE)
    assert report["pid"] != holder
    assert min(report["started"], rerun["started"]) >= freed_at - 0.25  # not before it ended
    marker = celery_recipe.marker(day).key
    wait_until(lambda: not client.exists(marker), "the redelivered run unmarks")


# -- every recipe as a script ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "django_recipe",
        "fastapi_recipe",
        "flask_recipe",
        pytest.param("celery_recipe", marks=kombu_takes_this_redis_py),
    ],
)
def test_recipe_runs_as_a_script_with_no_setup(name: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    done = subprocess.run(
        [sys.executable, str(RECIPES / f"{name}.py")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr

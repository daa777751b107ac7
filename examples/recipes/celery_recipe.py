"""Celery: one run per key at a time, de-duplication at enqueue time, and a killed worker.

- One run per day at a time: ``build_report(day)`` writes the report under
  ``@locked("report:{day}", wait=0)``, so two runs for one day never overlap, on any worker. A
  run that finds the day busy does not tie up a worker slot waiting: it retries itself later
  (``self.retry(countdown=...)``).
- De-duplication at enqueue time (celery-singleton's feature): ``enqueue_report(day)`` sends
  the task only if none it sent is queued or running for that day. It takes a marker for the
  day -- a ``Lock`` that is not renewed, so it lasts ``MARKER_TTL`` at most -- hands its lease
  over (``hand_over()``: not released, no longer this process's) and puts the lease's token in
  a message header. Only that task releases it, by adopting the lease with that token
  (``adopt()``): when it is done for good (succeeded or failed; a retry keeps its headers, and
  is not done), or when it is revoked (``task_revoked``, in the worker: a queued task that
  never runs, or a running one ended with ``terminate=True``). Any other run of
  ``build_report`` -- a plain ``.delay()``, a beat schedule -- carries no token and releases
  nothing, and a token whose marker has ended adopts nothing.
- A killed worker: with ``task_acks_late`` and ``task_reject_on_worker_lost``, a worker process
  that dies mid-run (OOM killer, SIGKILL) leaves its message to be delivered again. Its lease on
  ``report:{day}`` is no longer renewed and ends within ``LEASE`` seconds; until then the new
  delivery finds the day busy and retries. The marker stays meanwhile (the delivery keeps its
  headers), so nobody enqueues a duplicate.

The marker's ttl, ``MARKER_TTL`` (ten minutes), bounds the damage when nothing ever ends the
task: a lost message, no worker to take it, or a revoke sent while no worker ran (workers keep
revoked ids in memory only). Then ``enqueue_report`` refuses that day for at most
``MARKER_TTL`` seconds. A report that waits and runs longer than that may be enqueued once more
meanwhile (its marker expired; its token cannot adopt the newer marker), so
de-duplication is best effort: the lock on ``report:{day}`` is what guarantees one run at a
time. Run a worker with ``REDIS_URL=redis://localhost:6379/0 celery -A celery_recipe worker``
in this folder, or ``python examples/recipes/celery_recipe.py`` for a self-contained
demonstration (it starts a worker of its own).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from celery import Celery, Task
from celery.result import AsyncResult
from celery.signals import task_revoked

from redlock_deco import Lock, LockNotAcquired, locked, register_provider
from redlock_deco.testing import redis_url

REPORT = "report:{day}"  # one run per day at a time; the marker's name comes from it too
LEASE = 5.0  # seconds a dead worker's lock outlives it (a live worker keeps renewing it)
RETRY_SECONDS = 1.0  # when a run that found its day busy tries again
MARKER_TTL = 600  # longest enqueue_report refuses a day whose task never ends (see above)
MARKER_DAY, MARKER_TOKEN = "dedup_day", "dedup_token"  # the headers that name a task's marker
WORK_SECONDS = 1.0  # what writing a report takes in this demonstration

app = Celery("celery_recipe")
app.conf.update(
    task_acks_late=True,  # acknowledge a message when its task ends, not when it starts...
    task_reject_on_worker_lost=True,  # ...and deliver it again if the worker process dies
    worker_prefetch_multiplier=1,
    # A whole worker host lost: its unacknowledged messages come back after this many seconds
    # (the Redis broker's default); keep it above every retry countdown.
    broker_transport_options={"visibility_timeout": 3600},
)


def use_redis(url: str) -> None:
    """Keep the locks, the markers, the broker and the result backend on ``url``."""
    register_provider("default", url)
    app.conf.update(broker_url=url, result_backend=url)


use_redis(os.environ.get("REDIS_URL", "redis://localhost:6379/0"))


def marker(day: str) -> Lock:
    """The marker that says a report for ``day`` is queued or running: a lease nobody renews."""
    # The lock's own template, rendered for the day: one name per run, queued or running.
    return Lock("queued:" + REPORT.format(day=day), ttl=MARKER_TTL, auto_renew=False, wait=0)


def release_marker(request: Any) -> None:
    """Release the marker ``request``'s task was enqueued with, if it still stands for it."""
    headers: dict[str, Any] = request.headers or {}
    day, token = headers.get(MARKER_DAY), headers.get(MARKER_TOKEN)  # None: not enqueued here
    if day and token:
        mine = marker(day)
        if mine.adopt(token):  # False: it ended, and perhaps stands for another task now
            mine.release()


def unmark(
    task: Task[Any, Any], status: str, retval: Any, task_id: str, args: Any, kwargs: Any, einfo: Any
) -> None:
    """``build_report``'s after_return handler: it ran for good (succeeded or failed; a retry
    does not come here), so the day may be enqueued again."""
    release_marker(task.request)


@task_revoked.connect
def unmark_revoked(sender: Any = None, request: Any = None, **details: Any) -> None:
    """A revoked task never runs (on) to ``unmark``: the worker's main process removes its
    marker when it discards the task or terminates its run."""
    if request is not None:
        release_marker(request)


@locked(REPORT, ttl=LEASE, wait=0)
def write_report(day: str) -> dict[str, Any]:
    started = time.time()
    time.sleep(WORK_SECONDS)  # the work: query, render, upload...
    return {"day": day, "pid": os.getpid(), "started": started, "finished": time.time()}


# No limit on retries: a day stays busy only while a live run renews its lease.
@app.task(bind=True, max_retries=None, after_return=unmark)
def build_report(self: Task[Any, Any], day: str) -> dict[str, Any]:
    try:
        report = write_report(day)
    except LockNotAcquired as busy:
        raise self.retry(exc=busy, countdown=RETRY_SECONDS) from busy
    return {**report, "retries": self.request.retries}


def enqueue_report(day: str) -> AsyncResult[Any] | None:
    """Send ``build_report(day)`` unless one sent here is queued or running for that day."""
    taken = marker(day)
    if not taken.acquire():
        return None
    token = taken.hand_over()  # from now on the task's to release, by this token
    try:
        return build_report.apply_async(
            kwargs={"day": day}, headers={MARKER_DAY: day, MARKER_TOKEN: token}
        )
    except BaseException:
        if taken.adopt(token):  # never sent: nothing else will release it
            taken.release()
        raise


def main() -> int:
    with redis_url() as url:
        use_redis(url)
        worker = subprocess.Popen(  # what `celery -A celery_recipe worker -c 2` starts
            [sys.executable, "-m", "celery", "-A", "celery_recipe", "worker", "-c", "2"],
            cwd=Path(__file__).parent, env={**os.environ, "REDIS_URL": url},
        )  # fmt: skip
        try:
            first = enqueue_report("2026-11-21")
            again = enqueue_report("2026-11-21")  # queued already: not sent
            direct = build_report.delay(day="2026-11-21")  # bypasses the marker: waits its turn
            reports = [result.get(timeout=60) for result in (first, direct) if result]
        finally:
            worker.terminate()  # a warm shutdown: running tasks finish first
            worker.wait(60)
    print("enqueue_report again while queued ->", again)
    for report in reports:
        print(report)
    earlier, later = sorted(reports, key=lambda report: float(report["started"]))
    return 0 if again is None and earlier["finished"] <= later["started"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

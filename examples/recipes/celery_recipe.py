"""Celery: one run per key at a time, de-duplication at enqueue time, and a killed worker.

- One run per day at a time: ``build_report(day)`` writes the report under
  ``@locked("report:{day}", wait=0)``, so two runs for one day never overlap, on any worker. A
  run that finds the day busy does not tie up a worker slot waiting: it retries itself later
  (``self.retry(countdown=...)``).
- De-duplication at enqueue time (celery-singleton's feature): ``enqueue_report(day)`` sends
  the task only if none is queued or running for that day. It takes a marker keyed by the
  arguments -- a one-slot ``Semaphore`` with no renewal -- and the task removes it when it is
  done for good (succeeded or failed; a retry is not done). The marker is a semaphore, not a
  ``Lock``, because the enqueuing thread never releases it: a ``Lock`` belongs to the thread
  that took it (it is re-entrant), so that thread could take it again at once.
- A killed worker: with ``task_acks_late`` and ``task_reject_on_worker_lost``, a worker process
  that dies mid-run (OOM killer, SIGKILL) leaves its message to be delivered again. Its lease on
  ``report:{day}`` is no longer renewed and ends within ``LEASE`` seconds; until then the new
  delivery finds the day busy and retries. The marker stays meanwhile, so nobody enqueues a
  duplicate; if the message is lost for good, the marker's own ttl frees the day.

De-duplication is best effort (a marker that outlived ``QUEUED_TTL`` can be removed by the
task it no longer stands for); the lock on ``report:{day}`` is what guarantees one run at a
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

from redlock_deco import LockNotAcquired, Semaphore, locked, register_provider
from redlock_deco.testing import redis_url

LEASE = 5.0  # seconds a dead worker's lock outlives it (a live worker keeps renewing it)
RETRY_SECONDS = 1.0  # when a run that found its day busy tries again
QUEUED_TTL = 3600.0  # longest a task may wait in the queue and run: the marker lasts that long
WORK_SECONDS = 1.0  # what writing a report takes in this demonstration

REDIS_URL = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
register_provider("default", REDIS_URL)
app = Celery("celery_recipe", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_acks_late=True,  # acknowledge a message when its task ends, not when it starts...
    task_reject_on_worker_lost=True,  # ...and deliver it again if the worker process dies
    worker_prefetch_multiplier=1,
    # A whole worker host lost: its unacknowledged messages come back after this many seconds
    # (the Redis broker's default); keep it above every retry countdown.
    broker_transport_options={"visibility_timeout": 3600},
)


def queued_marker(day: str) -> str:
    """The name of the marker that says a report for ``day`` is queued or running."""
    return f"queued:report:{day}"


def unmark(
    task: Task[Any, Any], status: str, retval: Any, task_id: str, args: Any, kwargs: Any, einfo: Any
) -> None:
    """``build_report``'s after_return handler: it ran for good (succeeded or failed; a retry
    does not come here), so the day may be enqueued again."""
    day = kwargs["day"] if "day" in kwargs else args[0]
    Semaphore.force_release(queued_marker(day))


@locked("report:{day}", ttl=LEASE, wait=0)
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
    """Send ``build_report(day)`` unless one is queued or running for that day already."""
    marker = Semaphore(queued_marker(day), limit=1, ttl=QUEUED_TTL, wait=0, auto_renew=False)
    if not marker.acquire():
        return None
    try:
        return build_report.apply_async(kwargs={"day": day})
    except BaseException:
        Semaphore.force_release(queued_marker(day))  # never sent: nothing else will remove it
        raise


def main() -> int:
    with redis_url() as url:
        register_provider("default", url)
        app.conf.update(broker_url=url, result_backend=url)
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

"""Celery: one run per key at a time, de-duplication at enqueue time, and a killed worker.

- One run per day at a time: ``build_report(day)`` writes the report under
  ``@locked("report:{day}", wait=0)``, so two runs for one day never overlap, on any worker. A
  run that finds the day busy does not tie up a worker slot waiting: it retries itself later
  (``self.retry(countdown=...)``).
- De-duplication at enqueue time (celery-singleton's feature): ``enqueue_report(day)`` sends
  the task only if none it sent is queued or running for that day. It sets a marker key for
  the day whose value is the id of the task it sends (chosen before sending), and names the
  marker in a message header. Only that task removes it: when it is done for good (succeeded
  or failed; a retry keeps its id and its headers, and is not done), or when it is revoked
  (``task_revoked``, in the worker: a queued task that never runs, or a running one ended
  with ``terminate=True``). Any other run of ``build_report`` -- a plain ``.delay()``, a beat
  schedule -- carries no marker and removes none.
- A killed worker: with ``task_acks_late`` and ``task_reject_on_worker_lost``, a worker process
  that dies mid-run (OOM killer, SIGKILL) leaves its message to be delivered again. Its lease on
  ``report:{day}`` is no longer renewed and ends within ``LEASE`` seconds; until then the new
  delivery finds the day busy and retries. The marker stays meanwhile (the delivery keeps the
  task id), so nobody enqueues a duplicate.

Why a plain key and not a one-slot ``Semaphore``: a ``Semaphore`` object releases only its own
lease, and the only release from another process, ``Semaphore.force_release``, removes every
holder -- so any run could clear a marker taken for another. A plain ``SET key <task id> NX
EX`` and a compare-and-delete by that id (``UNMARK``) release exactly the marker a run stands
for.

The marker's ttl, ``MARKER_TTL`` (ten minutes), bounds the damage when nothing ever ends the
task: a lost message, no worker to take it, or a revoke sent while no worker ran (workers keep
revoked ids in memory only). Then ``enqueue_report`` refuses that day for at most
``MARKER_TTL`` seconds. A report that waits and runs longer than that may be enqueued once more
meanwhile (its marker expired; its own removal, by id, cannot touch the newer marker), so
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
import uuid
from pathlib import Path
from typing import Any

import redis
from celery import Celery, Task
from celery.result import AsyncResult
from celery.signals import task_revoked

from redlock_deco import LockNotAcquired, locked, register_provider
from redlock_deco.testing import redis_url

LEASE = 5.0  # seconds a dead worker's lock outlives it (a live worker keeps renewing it)
RETRY_SECONDS = 1.0  # when a run that found its day busy tries again
MARKER_TTL = 600  # longest enqueue_report refuses a day whose task never ends (see above)
MARKER_HEADER = "dedup_marker"  # the header that names a task's marker key
WORK_SECONDS = 1.0  # what writing a report takes in this demonstration

# KEYS[1] marker key; ARGV[1] the task id it was set for; returns 1 removed | 0 not this task's
UNMARK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

app = Celery("celery_recipe")
app.conf.update(
    task_acks_late=True,  # acknowledge a message when its task ends, not when it starts...
    task_reject_on_worker_lost=True,  # ...and deliver it again if the worker process dies
    worker_prefetch_multiplier=1,
    # A whole worker host lost: its unacknowledged messages come back after this many seconds
    # (the Redis broker's default); keep it above every retry countdown.
    broker_transport_options={"visibility_timeout": 3600},
)
markers: redis.Redis  # where the markers live: set by use_redis


def use_redis(url: str) -> None:
    """Keep the locks, the markers, the broker and the result backend on ``url``."""
    global markers
    register_provider("default", url)
    app.conf.update(broker_url=url, result_backend=url)
    markers = redis.Redis.from_url(url)


use_redis(os.environ.get("REDIS_URL", "redis://localhost:6379/0"))


def queued_marker(day: str) -> str:
    """The key that says a report for ``day`` is queued or running."""
    return f"queued:report:{day}"


def release_marker(request: Any) -> None:
    """Remove the marker ``request``'s task was enqueued with, if it still stands for it."""
    headers: dict[str, Any] = request.headers or {}
    marker: str | None = headers.get(MARKER_HEADER)  # None: not sent by enqueue_report
    if marker:
        markers.eval(UNMARK, 1, marker, request.id)


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
    """Send ``build_report(day)`` unless one sent here is queued or running for that day."""
    marker, task_id = queued_marker(day), str(uuid.uuid4())
    if not markers.set(marker, task_id, nx=True, ex=MARKER_TTL):
        return None
    try:
        return build_report.apply_async(
            kwargs={"day": day}, task_id=task_id, headers={MARKER_HEADER: marker}
        )
    except BaseException:
        markers.eval(UNMARK, 1, marker, task_id)  # never sent: nothing else will remove it
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

"""``redlock-deco demo``: worker processes prove mutual exclusion and the semaphore bound.

Each worker alternates a deliberately non-atomic read-modify-write under ``@locked`` (any
overlap would lose an update) and a gauge under ``@limited`` (any over-admission would push
it past the limit), and records how long each hand-off of the lock took. The summary checks
both invariants and the exit status says whether they held.

The clock starts when every worker is ready: spawning a process and importing redis-py and
this package takes seconds on a busy machine, and workers that each started their own clock
as they came up ran staggered, with a "5 s" run showing nothing for its first 3 s. Each
worker says it is ready (a counter) and waits for the start (a list the parent pushes one
item per worker to, once all are ready); the progress line counts them meanwhile.

The demo may run on a user's own server, so it leaves nothing behind: every key it writes
expires ``KEEP_AFTER`` seconds after its last write (a hard kill cannot leave immortal keys),
and a Ctrl-C (SIGINT to the whole process group, as a terminal sends it) stops the workers
quietly -- they ignore SIGINT, the parent ends them -- and removes the keys at once.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import os
import secrets
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any, TextIO

import redis

from ._decorator_api import limited, locked
from ._inspection import describe_server
from ._providers import redact, register_provider
from .testing import find_redis_server, redis_url

KEEP_AFTER = 300  # seconds each demo key outlives its last write, whatever ends the demo
# How long a ready worker waits for the start before giving up (its parent is gone or stuck).
START_TIMEOUT = 120


def _ignore_sigint() -> None:
    """Pool initializer: a Ctrl-C reaches the whole process group, and the parent alone
    handles it (a worker would print a KeyboardInterrupt traceback of its own)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


_MASKS = hasattr(signal, "pthread_sigmask")  # POSIX; Windows sends no SIGINT to a group


def _mask_sigint(how: int) -> None:
    if _MASKS:
        signal.pthread_sigmask(how, {signal.SIGINT})


@contextmanager
def _worker_pool(workers: int) -> Iterator[multiprocessing.pool.Pool]:
    """A pool of spawned workers that ignore SIGINT, terminated when the block is left (by
    KeyboardInterrupt too).

    SIGINT stays blocked here while the workers start. They inherit the blocked mask (it is
    kept across exec), so none can raise KeyboardInterrupt before its initializer ignores
    SIGINT; and a Ctrl-C meanwhile is held, not lost: it arrives once the pool is there to be
    terminated."""
    if _MASKS:
        # It unblocks SIGINT around starting its own process: it must start before, not
        # while SIGINT is blocked here.
        resource_tracker.ensure_running()
    _mask_sigint(signal.SIG_BLOCK)
    try:
        with multiprocessing.get_context("spawn").Pool(workers, _ignore_sigint) as pool:
            _mask_sigint(signal.SIG_UNBLOCK)
            yield pool
    finally:
        _mask_sigint(signal.SIG_UNBLOCK)


def _count(client: redis.Redis, *changes: tuple[str, int]) -> list[int]:
    """Add to counters, each in one transaction with its EXPIRE (INCRBY keeps a key's expiry
    but creates a key without one: no interruption may leave a counter immortal)."""
    with client.pipeline() as step:
        for key, amount in changes:
            step.incrby(key, amount)
            step.expire(key, KEEP_AFTER)
        return [int(value) for value in step.execute()[::2]]


def worker(url: str, ns: str, seconds: float, limit: int) -> dict[str, Any]:
    """One demo process: returns its call counts, hand-off gaps and the gauge's peak."""
    register_provider("default", url)
    client = redis.Redis.from_url(url)
    me = os.getpid()
    gaps: list[float] = []
    peak = 0

    @locked(f"{ns}:counter", ttl=5, wait=30)
    def increment() -> None:
        entered = time.time()
        last = client.get(f"{ns}:released")
        if last:
            text = last if isinstance(last, str) else last.decode()
            pid, _, at = text.partition(":")
            if int(pid) != me:
                gaps.append(entered - float(at))
        value = int(client.get(f"{ns}:count") or 0)
        time.sleep(0.0005)  # widen the window a lost update would need
        client.set(f"{ns}:count", value + 1, ex=KEEP_AFTER)
        client.set(f"{ns}:released", f"{me}:{time.time()}", ex=KEEP_AFTER)  # just before release

    @limited(f"{ns}:slots", limit=limit, ttl=5, wait=30)
    def section() -> None:
        nonlocal peak
        [inside] = _count(client, (f"{ns}:inside", 1))
        peak = max(peak, inside)
        time.sleep(0.002)
        _count(client, (f"{ns}:inside", -1), (f"{ns}:limited", 1))

    # Ready (imported, connected): wait for the start, so that every worker runs the same
    # `seconds` from the same moment, the moment the parent's clock starts.
    _count(client, (f"{ns}:ready", 1))
    if client.blpop([f"{ns}:start"], timeout=START_TIMEOUT) is None:
        client.close()
        raise RuntimeError(f"the demo did not start within {START_TIMEOUT}s of this worker")
    locked_calls = limited_calls = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        increment()
        locked_calls += 1
        section()
        limited_calls += 1
    client.close()
    return {"locked": locked_calls, "limited": limited_calls, "gaps": gaps, "peak": peak}


class Progress:
    """One refreshing line on a terminal; at most one line a second in a log."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.last = 0.0

    def show(self, text: str, *, final: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            self.out.write("\r" + text.ljust(72) + ("\n" if final else ""))
            self.out.flush()
        elif final or now - self.last >= 1.0:
            self.out.write(text + "\n")
            self.out.flush()
            self.last = now


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def run(url: str | None, workers: int, seconds: float, limit: int, out: TextIO) -> int:
    """Run the demo; returns the exit status (0 when every invariant held)."""
    with redis_url(url) as chosen:
        throwaway = not (url or os.environ.get("REDIS_URL"))
        # The binary's own name: "a throwaway valkey-server" when that is what runs.
        where = f"a throwaway {Path(find_redis_server()).name}" if throwaway else ""
        client = redis.Redis.from_url(chosen)
        server = describe_server(client.info("server"))
        out.write(
            f"redlock-deco demo: {workers} worker processes for {seconds:g}s on "
            f"{redact(chosen)} ({server}{', ' + where if where else ''})\n"
        )
        ns = f"redlock-deco-demo:{secrets.token_hex(4)}"
        progress = Progress(out)
        try:
            results = _run_workers(chosen, client, ns, workers, seconds, limit, progress)
            counted = int(client.get(f"{ns}:count") or 0)
        except KeyboardInterrupt:
            # The workers are gone (the pool terminated them). A throwaway server got the
            # SIGINT too and took the keys with it; an unreachable one lets them expire.
            with suppress(redis.ConnectionError):
                _remove_keys(client, ns)
            raise
        _remove_keys(client, ns)
        client.close()
    return _summary(results, counted, limit, progress, out)


def _run_workers(
    url: str,
    client: redis.Redis,
    ns: str,
    workers: int,
    seconds: float,
    limit: int,
    progress: Progress,
) -> list[dict[str, Any]]:
    spawned = time.monotonic()
    started: float | None = None  # when every worker was ready and the start was given
    with _worker_pool(workers) as pool:
        pending = pool.starmap_async(worker, [(url, ns, seconds, limit)] * workers)
        while not pending.ready():
            if started is None:
                ready = int(client.get(f"{ns}:ready") or 0)
                if ready < workers:
                    if progress.tty:  # a log gets one line, once they are all ready
                        progress.show(
                            f"  starting {workers} worker processes: {ready} ready "
                            f"({time.monotonic() - spawned:.1f}s)"
                        )
                    pending.wait(0.05)
                    continue
                _start(client, ns, workers)
                started = time.monotonic()
                progress.show(
                    f"  {workers} workers ready after {started - spawned:.1f}s: "
                    f"the {seconds:g}s run starts now",
                    final=True,
                )
            pending.wait(0.2)
            progress.show(
                f"  {time.monotonic() - started:5.1f}s  "
                f"@locked calls {int(client.get(f'{ns}:count') or 0):6d}  "
                f"@limited calls {int(client.get(f'{ns}:limited') or 0):6d}"
            )
        results: list[dict[str, Any]] = pending.get()
    return results


def _start(client: redis.Redis, ns: str, workers: int) -> None:
    """Release every waiting worker at once: one item each, pushed with the list's expiry in
    one transaction (no interruption may leave the list immortal)."""
    with client.pipeline() as step:
        step.rpush(f"{ns}:start", *["go"] * workers)
        step.expire(f"{ns}:start", KEEP_AFTER)
        step.execute()


def _remove_keys(client: redis.Redis, ns: str) -> None:
    """Every key of this run: its counters, and the lock and semaphore keys of workers that
    were ended while holding (they would expire with their leases)."""
    for key in client.scan_iter(match=f"*{ns}:*"):
        client.delete(key)


def _summary(
    results: list[dict[str, Any]], counted: int, limit: int, progress: Progress, out: TextIO
) -> int:
    locked_calls = sum(r["locked"] for r in results)
    limited_calls = sum(r["limited"] for r in results)
    gaps = [g for r in results for g in r["gaps"]]
    peak = max(r["peak"] for r in results)
    lost = locked_calls - counted
    progress.show(f"  done: {locked_calls} @locked and {limited_calls} @limited calls", final=True)
    hand_off = (
        f"{statistics.median(gaps) * 1000:.2f} ms / {_percentile(gaps, 0.99) * 1000:.2f} ms"
        if gaps
        else "n/a (one worker)"
    )
    rows = [
        ("@locked calls (read-modify-write)", str(locked_calls), ""),
        ("lost updates", f"{lost}  (counter {counted} of {locked_calls})", _ok(lost == 0)),
        ("@limited calls", str(limited_calls), ""),
        ("max concurrent holders", f"{peak} of limit {limit}", _ok(peak <= limit)),
        ("lock hand-off p50 / p99", hand_off, ""),
    ]
    width = max(len(name) for name, _, _ in rows)
    out.write("\n")
    for name, value, verdict in rows:
        out.write(f"  {name.ljust(width)}  {value.ljust(36)} {verdict}\n".rstrip() + "\n")
    ok = lost == 0 and peak <= limit
    out.write("\n" + ("all invariants held" if ok else "INVARIANT BROKEN") + "\n")
    return 0 if ok else 1


def _ok(condition: bool) -> str:
    return "ok" if condition else "BROKEN"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(run(None, 4, 5.0, 3, sys.stdout))

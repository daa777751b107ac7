"""No lock of the package's, held by another thread as the process forks, stays held in the
child.

A fork copies only the forking thread: a ``threading.Lock`` another thread held at that
moment is held in the child for good, and the child's first call that takes it hangs. Every
module-level lock of the package (found by looking, so that a new one is covered as it is
written) must be a new one in a forked child -- taken again there, as the parent's
registries are (``os.register_at_fork``). Here a thread of the parent holds each of them
across a fork; the child must be able to take every one at once. So also for the locks of the
objects that live as long as the application's process (a listener, which goes on in the
child). No server: the child only takes locks.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pkgutil
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import redlock_deco
from redlock_deco import Lock
from redlock_deco.testing import RedisServer

LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def module_locks() -> Iterator[tuple[str, str]]:
    for info in pkgutil.iter_modules(redlock_deco.__path__, "redlock_deco."):
        if info.name.endswith(("__main__", "._cli")):
            continue  # (the command line's: a process of its own, never forked by a user)
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, LOCK_TYPES):
                yield info.name, name


LOCKS = sorted(module_locks())


def test_the_package_has_module_level_locks_to_look_at() -> None:
    assert ("redlock_deco._guard", "_held_lock") in LOCKS  # (the search finds what it should)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.timeout(30)
@pytest.mark.parametrize(("module", "name"), LOCKS)
def test_a_module_lock_held_by_another_thread_at_a_fork_is_free_in_the_child(
    module: str, name: str
) -> None:
    found = importlib.import_module(module)
    assert held_across_a_fork(
        lambda: getattr(found, name),
        lambda: taken_in_child(getattr(importlib.import_module(module), name)),
    ), f"{module}.{name}, held at the fork, could not be taken in the child"


def held_across_a_fork(parents: Callable[[], threading.Lock], child: Callable[[], None]) -> bool:
    """Whether ``child()`` ran well in a child forked while a thread of the parent held
    ``parents()`` (within 10 s; it exits non-zero when it did not)."""
    lock = parents()
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            holding.set()
            done.wait(20)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(5)
        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
        process.join(10)
        if process.exitcode is None:
            process.kill()
            process.join(5)
            return False
    finally:
        done.set()
        holder.join(5)
    return process.exitcode == 0


def take_in_child(module: str, name: str) -> None:
    taken_in_child(getattr(importlib.import_module(module), name))


def taken_in_child(lock: threading.Lock) -> None:
    if not lock.acquire(timeout=2):
        os._exit(3)
    lock.release()


def test_an_opentelemetry_listeners_lock_held_at_a_fork_is_free_in_the_child() -> None:
    """The listener's record of losses (matched with their releases) is kept under a lock
    that every loss and release event takes: held by a parent's thread at the fork, the
    child's first such event hung."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    from redlock_deco.otel import OpenTelemetryListener

    listener = OpenTelemetryListener(TracerProvider(), MeterProvider())
    assert held_across_a_fork(
        lambda: listener._losses_lock, lambda: taken_in_child(listener._losses_lock)
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.timeout(30)
def test_a_renewal_workers_lock_held_at_a_fork_leaves_the_childs_renewals_going(
    server: RedisServer,
) -> None:
    """Review 64, F1 (a lease lost, no signal): the child's renewer took every renewal
    worker's lock as it went round, the parent's too (kept in a module-level set): one held
    by a parent's thread at the fork stopped it at its first look, and the child's leases
    expired under their holders with no on_lost while another caller took them. F2: the
    parent's queued rounds ran in the child. A child never touches a parent's workers."""
    from redlock_deco import _renewal

    with Lock("parent", ttl=0.3):
        time.sleep(0.2)  # (renewed once: its target has its renewal worker)
        parents = list(_renewal._LANES)
    assert parents

    def child() -> None:
        lost: list[object] = []
        lock = Lock("child", ttl=0.6, on_lost=lost.append)
        if not lock.acquire():
            os._exit(4)
        time.sleep(1.5)
        if lost or not lock.owned() or Lock("child", wait=0).acquire():
            os._exit(3)
        if set(_renewal._LANES) & set(parents):
            os._exit(5)
        lock.release()

    assert held_across_a_fork(lambda: parents[0]._lock, child)

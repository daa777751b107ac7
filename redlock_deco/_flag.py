"""A :class:`threading.Event` that a KeyboardInterrupt cannot leave locked.

``Event.set()``, ``clear()`` and ``wait()`` take their Condition with ``with self._cond:``,
and ``Condition.__enter__`` is Python code: a KeyboardInterrupt raised as it returns, with
the lock taken and the ``with`` not yet begun, leaves the lock held for good. A thread that
sets an event on behalf of others -- the sync grant reader waking the thread whose grant
came, the first waiter telling the others that the subscription is up -- then wedges every
thread that touches the event again: a waiter never returned despite ``wait=3`` and its
lock stayed held by nobody for its ttl; every later waiter of the process hung (review 40,
4 and 5). Here the only lock is taken by ``with`` on the C lock itself, whose enter and exit
no interrupt can split, and each waiter sleeps on a lock of its own.

An interrupt inside :meth:`set` can leave a waiter unwoken; it then wakes at the end of
its own timeout, which every caller here bounds, and finds the flag set.
"""

from __future__ import annotations

import _thread
import threading


class Flag:
    """``set``, ``clear``, ``is_set`` and ``wait`` of :class:`threading.Event`."""

    __slots__ = ("_flag", "_lock", "_sleepers")

    def __init__(self) -> None:
        self._flag = False
        self._lock = threading.Lock()
        self._sleepers: list[_thread.LockType] = []  # each held until its waiter is woken

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._lock:
            self._flag = True
            # A function of its own: on 3.13 an interrupt at this loop's back edge, written
            # here, skipped the with's exit and left _lock held for good (test_back_edges).
            _wake(self._sleepers)

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the flag is set, once it is or ``timeout`` seconds have passed."""
        if self._flag:
            return True
        sleeper = _thread.allocate_lock()
        sleeper.acquire()
        try:
            with self._lock:
                if self._flag:
                    return True
                self._sleepers.append(sleeper)
            sleeper.acquire(True, -1 if timeout is None else max(timeout, 0.0))
        finally:
            with self._lock:
                if sleeper in self._sleepers:
                    self._sleepers.remove(sleeper)
        return self._flag


def _wake(sleepers: list[_thread.LockType]) -> None:
    for sleeper in sleepers:
        if sleeper.locked():  # (only set() releases one, and only under Flag._lock)
            sleeper.release()

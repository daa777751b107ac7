"""Automatic renewal: one background thread per process extends every held lease.

Not a thread per lease: leases are kept in a dict (O(1) to add at acquire and to drop at
release, so the hot path pays almost nothing), and the thread sleeps until the earliest
renewal is due. Adding a lease wakes the thread only when it is due before the planned wake-up.
A renewal that finds the token gone marks the lease lost; connection errors are retried until
the lease would have ended. A forked child starts with an empty renewer and no thread.
"""

from __future__ import annotations

import math
import os
import threading
import time

from redis.exceptions import RedisError

from . import drivers, protocol
from .lease import Lease


class Renewer:
    def __init__(self) -> None:
        self._leases: dict[int, Lease] = {}
        self._wake = threading.Condition(threading.Lock())
        self._next_wake = math.inf
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease) -> None:
        # Under the lock: the thread snapshots the leases and picks its wake-up time under it
        # too, so a lease added in between can never be overlooked until a later wake-up.
        with self._wake:
            self._leases[id(lease)] = lease
            if lease.next_renew < self._next_wake:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._loop, name="redlock-deco-renewer", daemon=True
                    )
                    self._thread.start()
                self._next_wake = lease.next_renew
                self._wake.notify()

    def remove(self, lease: Lease) -> None:
        lease.active = False
        with self._wake:
            self._leases.pop(id(lease), None)

    def __len__(self) -> int:
        return len(self._leases)

    def _loop(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                leases = list(self._leases.values())
                due = [lease for lease in leases if lease.next_renew <= now]
                if not due:
                    self._next_wake = min((lease.next_renew for lease in leases), default=math.inf)
                    timeout = None if self._next_wake == math.inf else self._next_wake - now
                    self._wake.wait(timeout)
                    continue
                self._next_wake = now  # new leases need no wake-up while this round runs
            for lease in due:
                self.renew(lease)

    def renew(self, lease: Lease) -> None:
        started = time.monotonic()
        try:
            ok = drivers.run(protocol.extend(lease.claim, lease.ttl_ms), lease.target)
        except RedisError:
            ok = None
        if not lease.active:
            return  # released while the renewal was in flight: nothing to record
        if ok:
            lease.renewed(started)
        elif ok is False or lease.renewal_failed(started):
            lease.mark_lost()
            self.remove(lease)


_renewer = Renewer()


def renewer() -> Renewer:
    """The renewer of this process."""
    return _renewer


def _after_fork_in_child() -> None:
    global _renewer
    _renewer = Renewer()


os.register_at_fork(after_in_child=_after_fork_in_child)

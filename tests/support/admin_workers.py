"""A stuck holder for tests/test_admin.py (multiprocessing "spawn": a fresh interpreter)."""

from __future__ import annotations

import time
from typing import Any

from redlock_deco import Lock, LockLost, register_provider


def hold_until_lost(url: str, name: str, ttl: float, out: Any) -> None:
    """Hold ``name`` (renewed) until renewal finds the lease gone, then leave the block; report
    ("holding", when), then ("LockLost", when on_lost was called) -- or ("kept", None) if the
    lease was never lost within 20 s, or the block ended without LockLost."""
    register_provider("default", url)
    lost_at: list[float] = []
    lock = Lock(name, ttl=ttl, wait=5, on_lost=lambda lease: lost_at.append(time.monotonic()))
    try:
        with lock:
            out.put(("holding", time.monotonic()))
            deadline = time.monotonic() + 20
            while not lost_at and time.monotonic() < deadline:
                time.sleep(0.005)
    except LockLost:
        out.put(("LockLost", lost_at[0] if lost_at else None))
        return
    out.put(("kept", None))

"""Who holds what, per owner: a thread for sync code (an asyncio task for async code).

Locks are re-entrant: one lease per (provider, key) and owner, counted. Semaphores are not:
each acquisition takes another slot, so an owner keeps a stack of them.

Re-entrancy is decided here without any round trip: a nested ``@locked`` of a name the owner
already holds only counts. The table is reset in a forked child: a child is a different
process and must take its own locks, never inherit its parent's.
"""

from __future__ import annotations

import os
import threading

from .lease import Lease

HoldingKey = tuple[str, str]  # (provider name, Redis key)

_local = threading.local()


def thread_holdings() -> dict[HoldingKey, Lease]:
    """The leases the current thread holds re-entrantly, by (provider, key)."""
    try:
        held: dict[HoldingKey, Lease] = _local.held
    except AttributeError:
        held = _local.held = {}
    return held


def thread_slots() -> dict[HoldingKey, list[Lease]]:
    """The semaphore slots the current thread holds through Semaphore objects, newest last."""
    try:
        slots: dict[HoldingKey, list[Lease]] = _local.slots
    except AttributeError:
        slots = _local.slots = {}
    return slots


def _after_fork_in_child() -> None:
    global _local
    _local = threading.local()


os.register_at_fork(after_in_child=_after_fork_in_child)

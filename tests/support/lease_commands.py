"""The commands every stateful machine's owners run on a lock or semaphore object, written
once for the three kinds of owner (threads and processes of tests/support/stateful_workers.py,
reader/writer threads and tasks of shared_stateful_workers.py, and the lock machine's tasks):
what differs between them is how ``acquire`` is called and what ``holders`` reports.

No hypothesis or pytest here: a spawned owner process imports this module."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redlock_deco import LockError

NOT_COMMON = object()  # the command is the caller's own (acquire, holders, reset)


def describe(lease: Any) -> tuple[str, bool, float] | None:
    """What the machine compares of a lease: token, lost flag, remaining seconds."""
    return None if lease is None else (lease.token, lease.lost, lease.remaining())


def run_common(obj: Any, op: str, arg: Any) -> Any:
    """release, extend, owned or probe on a sync object; NOT_COMMON for any other op."""
    if op == "release":
        return obj.release()
    if op == "extend":
        return obj.extend(to=arg)
    if op == "owned":
        return obj.owned(), describe(obj.lease)
    if op == "probe":
        return describe(obj.lease)
    return NOT_COMMON


async def run_common_async(obj: Any, op: str, arg: Any) -> Any:
    """run_common for an asyncio object."""
    if op == "release":
        return await obj.release()
    if op == "extend":
        return await obj.extend(to=arg)
    if op == "owned":
        return await obj.owned(), describe(obj.lease)
    if op == "probe":
        return describe(obj.lease)
    return NOT_COMMON


# An object reports no lease once the caller holds nothing through it; a bound keeps a
# bug there (a lease that never goes) from looping forever.
MOST_RELEASES = 100


def release_everything(objects: Iterable[Any]) -> tuple[int, int]:
    """Release everything the calling thread holds through ``objects``: (released, refused)."""
    released = failed = 0
    for obj in list(objects):
        for _ in range(MOST_RELEASES):
            if obj.lease is None:
                break
            try:
                obj.release()
                released += 1
            except LockError:
                failed += 1
    return released, failed


async def release_everything_async(objects: Iterable[Any]) -> tuple[int, int]:
    """release_everything for the calling task and asyncio objects."""
    released = failed = 0
    for obj in list(objects):
        for _ in range(MOST_RELEASES):
            if obj.lease is None:
                break
            try:
                await obj.release()
                released += 1
            except LockError:
                failed += 1
    return released, failed

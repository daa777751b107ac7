"""Taking and giving back a lease around a protected section, shared by every sync entry
point (``@locked``, ``@limited``, ``Lock``, ``Semaphore``), so they cannot disagree.
"""

from __future__ import annotations

import os
import time

from redis.exceptions import RedisError

from . import drivers, ownership, protocol, providers, renewal
from .errors import LockLost
from .lease import Lease
from .options import LeaseOptions
from .protocol import Claim, Keys, Kind
from .tokens import new_token


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, also on Python 3.10 (which only lacks the method)."""
    notes = getattr(error, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        error.__notes__ = notes  # type: ignore[attr-defined]  # the 3.11+ attribute, by hand
    notes.append(note)


def enter(
    kind: Kind, options: LeaseOptions, name: str, key: str, wait: float | None
) -> Lease | None:
    """Take the lease on ``key`` (or count a re-entry); None if ``wait`` ran out."""
    held = ownership.thread_holdings() if kind.reentrant else None
    if held is not None:
        lease = held.get((options.provider, key))
        if lease is not None:
            lease.count += 1
            return lease
    target = providers.sync_target(options.provider)
    claim = Claim(kind, Keys.for_key(key), new_token(), options.ttl_ms, options.limit)
    started = time.monotonic()
    if not drivers.run(protocol.acquire(claim, wait, target.max_block), target):
        return None
    lease = Lease(claim, name=name, provider=options.provider, target=target, started=started)
    if held is not None:
        held[(options.provider, key)] = lease
    if options.auto_renew:
        renewal.renewer().add(lease)
    return lease


def leave(lease: Lease) -> bool:
    """Give the lease back (or count down a re-entry). True if it was ours to the end."""
    lease.count -= 1
    if lease.count > 0:
        return not lease.lost  # only the outermost exit touches Redis
    if lease.claim.kind.reentrant:
        ownership.thread_holdings().pop((lease.provider, lease.key), None)
    renewal.renewer().remove(lease)
    if lease.pid != os.getpid():
        return True  # a forked child holds nothing: the lease is its parent's to release
    released = drivers.run(protocol.release(lease.claim), lease.target)
    return released and not lease.lost


def finish(lease: Lease, error: BaseException | None) -> None:
    """Leave, then make a lost lease loud: LockLost, or a note on the call's own error."""
    try:
        kept = leave(lease)
    except RedisError as exc:
        if error is None:
            raise
        add_note(error, f"releasing {lease.key!r} failed too ({exc!r}); it expires within its ttl")
        return
    if kept:
        return
    if error is None:
        raise LockLost(
            f"the lease on {lease.key!r} ended while the protected call ran (it expired or was "
            "taken over); nothing of the new holder's was touched. Raise ttl or keep auto_renew",
            name=lease.name,
            key=lease.key,
        )
    add_note(error, f"the lease on {lease.key!r} was also lost while the call ran")

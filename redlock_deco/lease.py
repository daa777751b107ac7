"""Lease bookkeeping: what one holder knows about the lease it holds. No I/O.

Times are local ``time.monotonic()`` readings, used only to schedule renewals and to decide
when a lease that could not be renewed must be presumed gone. The lease's real end is decided
by the Redis server's expiry; these are conservative estimates (measured from *before* the
request that set the expiry was sent).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

from .protocol import Claim

# Renew when a third of the lease has passed: two more attempts fit before it would expire.
RENEW_FRACTION = 1 / 3
# After a failed renewal (connection trouble), try again after at most this long.
RETRY_DELAY = 0.5


def _always() -> bool:
    return True


class Lease:
    """One held lease: its claim (key, token, ttl), where it lives, and what we know of it."""

    __slots__ = (
        "abandoned",
        "acquired_at",
        "active",
        "claim",
        "count",
        "expires_at",
        "fencing_token",
        "hold_until",
        "lost",
        "name",
        "next_renew",
        "on_lost",
        "owner_alive",
        "pid",
        "provider",
        "renewer",
        "renewing",
        "target",
        "ttl_ms",
    )

    def __init__(
        self, claim: Claim, *, name: str, provider: str, target: Any, started: float
    ) -> None:
        self.claim = claim
        self.name = name
        self.provider = provider
        self.target = target
        self.ttl_ms = claim.ttl_ms
        self.pid = os.getpid()  # a forked child must never release its parent's lease
        self.count = 1  # re-entrant depth of the owner
        self.active = True  # False once released (or lost): renewals then stop
        self.lost = False
        self.abandoned = False  # an acquire cut short: only ever released, never renewed
        self.acquired_at = time.monotonic()
        self.on_lost: Callable[[Lease], object] | None = None  # told when renewal finds it gone
        self.hold_until = math.inf  # max_hold: renewal stops at this instant
        self.fencing_token: int | None = None  # fencing=True: above every earlier acquisition
        self.renewer: Any = None  # the renewer keeping this lease, if auto-renewed
        self.renewing = False  # a renewal of it is in flight: never dispatch a second one
        # Renewal must not outlive the owner: a thread or task that ended without releasing
        # stops being renewed, and its lease then expires within ttl.
        self.owner_alive: Callable[[], bool] = _always
        self.expires_at = 0.0
        self.next_renew = 0.0
        self.renewed(started)

    @property
    def key(self) -> str:
        return self.claim.keys.key

    @property
    def token(self) -> str:
        return self.claim.token

    def renewed(self, started: float, ttl_ms: int | None = None) -> None:
        """The server set the lease to ``ttl_ms`` by a request sent at ``started``."""
        if ttl_ms is not None:
            self.ttl_ms = ttl_ms
        ttl = self.ttl_ms / 1000
        self.expires_at = started + ttl
        self.next_renew = started + ttl * RENEW_FRACTION

    def renewal_failed(self, started: float) -> bool:
        """A renewal sent at ``started`` got no answer. True if the lease must count as lost.

        Transient failures are retried until the lease would have ended anyway.
        """
        left = self.expires_at - started
        if left <= 0:
            return True
        self.next_renew = started + min(RETRY_DELAY, left / 4)
        return False

    def mark_lost(self) -> None:
        self.lost = True
        self.active = False

    def remaining(self, now: float | None = None) -> float:
        """Seconds left on the lease as far as this holder knows (0 if lost)."""
        if self.lost:
            return 0.0
        return max(0.0, self.expires_at - (time.monotonic() if now is None else now))

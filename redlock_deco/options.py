"""Validated, immutable configuration shared by the decorators and the primitives.

Everything is checked when the decorator or primitive is built, so a typo such as
``ttl=0`` fails at import time rather than on the first production call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

OnBusy = Literal["raise", "skip"]
#: ``on_lost``: a callback taking the lease, or "cancel" (async functions: cancel the call).
OnLost = Callable[[Any], object] | Literal["cancel"] | None
ON_BUSY_CHOICES: tuple[OnBusy, ...] = ("raise", "skip")


@dataclass(frozen=True, slots=True)
class LeaseOptions:
    """How one lock or semaphore is taken and held."""

    ttl: float
    wait: float | None
    auto_renew: bool
    provider: str
    prefix: str
    limit: int = 1
    replicas: int = 0
    on_lost: OnLost = None
    max_hold: float | None = None
    fencing: bool = False

    @property
    def ttl_ms(self) -> int:
        return to_ms(self.ttl)


def to_ms(seconds: float) -> int:
    """Seconds to the whole milliseconds Redis expiries take (at least 1)."""
    return max(1, round(seconds * 1000))


def check_seconds(option: str, value: object) -> float:
    """A finite number of seconds > 0 (ttl and the like)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{option} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{option} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def check_wait(value: object) -> float | None:
    """``None`` waits forever, ``0`` tries once, a positive number bounds the wait."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"wait must be seconds (a number) or None, got {value!r}")
    if math.isnan(value) or value < 0:
        raise ValueError(f"wait must be >= 0 seconds (0 = try once, None = forever), got {value!r}")
    return None if math.isinf(value) else float(value)


def check_on_busy(value: object) -> OnBusy:
    if value == "raise":
        return "raise"
    if value == "skip":
        return "skip"
    raise ValueError(f"on_busy must be one of {ON_BUSY_CHOICES}, got {value!r}")


def check_limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"limit must be an int >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"limit must be >= 1, got {value!r}")
    return value


def check_replicas(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"replicas must be an int >= 0, got {value!r}")
    if value < 0:
        raise ValueError(
            f"replicas must be >= 0 (replica acknowledgements to wait for), got {value!r}"
        )
    return value


def build_options(
    *,
    ttl: object,
    wait: object,
    auto_renew: object,
    provider: object,
    prefix: object,
    limit: object = 1,
    replicas: object = 0,
    on_lost: object = None,
    max_hold: object = None,
    fencing: object = False,
) -> LeaseOptions:
    """Check every option and return them frozen; raises TypeError/ValueError naming it."""
    if not isinstance(provider, str) or not provider:
        raise TypeError(f"provider must be a non-empty provider name (str), got {provider!r}")
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {prefix!r}")
    if not isinstance(auto_renew, bool):
        raise TypeError(f"auto_renew must be True or False, got {auto_renew!r}")
    if not isinstance(fencing, bool):
        raise TypeError(f"fencing must be True or False, got {fencing!r}")
    return LeaseOptions(
        ttl=check_seconds("ttl", ttl),
        wait=check_wait(wait),
        auto_renew=auto_renew,
        provider=provider,
        prefix=prefix,
        limit=check_limit(limit),
        replicas=check_replicas(replicas),
        on_lost=check_on_lost(on_lost),
        max_hold=None if max_hold is None else check_seconds("max_hold", max_hold),
        fencing=fencing,
    )


def check_on_lost(value: object) -> OnLost:
    """A callable taking the lease, "cancel" (async functions only), or None."""
    if value is None or value == "cancel":
        return "cancel" if value == "cancel" else None
    if not callable(value):
        raise TypeError(
            f"on_lost must be a callable taking the lease, 'cancel' or None, got {value!r}"
        )
    return value

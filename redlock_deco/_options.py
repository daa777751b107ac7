"""Validated, immutable configuration shared by the decorators and the primitives.

Everything is checked when the decorator or primitive is built, so a typo such as
``ttl=0`` fails at import time rather than on the first production call.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar

from ._events import Source
from ._lifecycle import Lease

P = ParamSpec("P")
R = TypeVar("R")

OnBusy = Literal["raise", "skip"]
#: ``on_busy`` as given: a choice, or a fallback called with the call's arguments.
OnBusyArg = OnBusy | Callable[..., object]
#: ``on_lost``: a callback taking the lease, or "cancel" (async functions: cancel the call).
OnLost = Callable[[Lease], object] | Literal["cancel"] | None
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
    # The labels of its events (template, function, provider), set once by the decorator;
    # None for a primitive used directly, whose name is its template.
    source: Source | None = None

    @property
    def ttl_ms(self) -> int:
        return to_ms(self.ttl)


def to_ms(seconds: float) -> int:
    """Seconds to the whole milliseconds Redis expiries take (at least 1)."""
    return max(1, round(seconds * 1000))


#: Shortest ttl, in seconds. A shorter lease can end before its holder even hears it was
#: granted (one round trip on a loaded network), and renewal could never keep up with it.
MIN_TTL = 0.01
#: Longest ttl, wait or max_hold, in seconds (about 31.7 years). Far larger values overflow
#: Redis's 64-bit millisecond expiries ("value is not an integer or out of range" on the first
#: call, not at decoration); below it every millisecond count stays exact in a double (2**53),
#: as the Lua scripts and sorted-set scores hold them.
MAX_SECONDS = 10**9
#: The least value of each seconds option beyond "more than 0".
_MINIMUM = {"ttl": MIN_TTL}
#: What None means, for the seconds options that accept it (named in the error message).
_NONE_MEANS = {"max_hold": "no limit"}


def check_seconds(option: str, value: object) -> float:
    """Seconds in ``option``'s range: ``ttl`` from MIN_TTL, others above 0; up to MAX_SECONDS."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{option} must be a number of seconds, got {value!r}")
    minimum = _MINIMUM.get(option, 0)
    # Compared, not converted first: NaN fails every comparison, and a huge int has no float.
    if not (value > 0 and minimum <= value <= MAX_SECONDS):
        lowest = f"from {minimum} ({minimum * 1000:g} ms)" if minimum else "above 0"
        none = f", or None for {_NONE_MEANS[option]}" if option in _NONE_MEANS else ""
        raise ValueError(
            f"{option} must be a number of seconds {lowest} up to {MAX_SECONDS:.0e} (about 31 "
            f"years){none}, got {value!r:.40}"
        )
    return float(value)


def check_wait(value: object) -> float | None:
    """``None`` waits forever, ``0`` tries once, a positive number bounds the wait."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"wait must be seconds (a number) or None, got {value!r}")
    if value == math.inf:
        return None
    if not 0 <= value <= MAX_SECONDS:  # NaN fails the comparison too
        raise ValueError(
            f"wait must be from 0 (try once) up to {MAX_SECONDS:.0e} seconds, or None to wait "
            f"forever, got {value!r:.40}"
        )
    return float(value)


def check_on_busy(value: object) -> OnBusyArg:
    """ "raise", "skip", or a fallback callable (checked against the function by
    ``_decorators``, which knows it)."""
    if value == "raise":
        return "raise"
    if value == "skip":
        return "skip"
    if isinstance(value, str):
        raise ValueError(
            f"on_busy must be one of {ON_BUSY_CHOICES} or a callable (a fallback called with "
            f"the call's arguments, whose result is returned), got {value!r}"
        )
    if not callable(value):
        raise TypeError(
            f"on_busy must be 'raise', 'skip' or a callable (a fallback called with the "
            f"call's arguments, whose result is returned), got {value!r:.80}"
        )
    return value


def acquire_wait(blocking: object, timeout: object, default: float | None) -> float | None:
    """``acquire(blocking, timeout)`` as a ``wait``, in :meth:`threading.Lock.acquire`'s
    meaning: ``blocking=False`` tries once; ``timeout=-1`` waits forever; ``timeout=S`` waits at
    most S seconds; ``timeout=None`` (not given) waits the object's own ``wait`` (``default``)
    -- not forever, as threading's default would: every wait of ours is bounded unless asked.
    """
    if not isinstance(blocking, bool):
        # acquire(5) meant wait=5 before blocking= existed: say so instead of waiting forever.
        raise TypeError(
            f"acquire(blocking=...) takes True or False, got {blocking!r:.40}; to wait at most "
            "S seconds pass timeout=S (or wait=S)"
        )
    if not blocking:
        if timeout is not None and timeout != -1:
            # threading.Lock raises this ValueError too: a timeout means nothing to one try.
            raise ValueError(
                f"can't specify a timeout for a non-blocking call (blocking=False tries once), "
                f"got timeout={timeout!r:.40}; drop timeout= or pass blocking=True"
            )
        return 0.0
    if timeout is None:
        return default
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be seconds (a number), -1 or None, got {timeout!r:.40}")
    if timeout == -1:
        return None
    if timeout < 0:
        raise ValueError(
            f"timeout must be >= 0 seconds, or -1 to wait forever (threading.Lock's meaning), "
            f"got {timeout!r}"
        )
    return check_wait(timeout)


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


def check_shared(shared: object, fencing: bool) -> bool:
    """``shared``: take the lock in shared (read) mode; never together with fencing."""
    if not isinstance(shared, bool):
        raise TypeError(
            f"shared must be True (read mode: many readers, no writer) or False (exclusive), "
            f"got {shared!r} (a decorator with several names takes them all in that mode)"
        )
    if shared and fencing:
        raise ValueError(
            "shared=True with fencing=True: readers write nothing a fencing token could guard, "
            "so they get none; pass fencing=True to the exclusive (writing) side only"
        )
    return shared


def check_on_lost(value: object) -> OnLost:
    """A callable taking the lease, "cancel" (async functions only), or None."""
    if value is None or value == "cancel":
        return "cancel" if value == "cancel" else None
    if not callable(value):
        raise TypeError(
            f"on_lost must be a callable taking the lease, 'cancel' or None, got {value!r}"
        )
    return value


# What users of other lock libraries reach for, and what it is called here.
_ALIASES = {
    "timeout": "ttl= for the lease length (redis-py's Lock calls it timeout) or wait= for how "
    "long to wait (threading's timeout)",
    "blocking_timeout": "wait=",
    "expire": "ttl=",
    "expires": "ttl=",
    "lease": "ttl=",
    "lock_timeout": "ttl=",
    "blocking": "wait= (0 tries once, None waits forever)",
    "key": "name= (the key is prefix + name)",
    "redis": "provider= (the name of a registered provider; see register_provider)",
    "client": "provider= (the name of a registered provider; see register_provider)",
}


def explains_bad_arguments(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap a public constructor or decorator factory so that a call it cannot bind raises a
    TypeError naming the public callable, the bad argument and the accepted ones, instead of
    Python's, which names an internal class (``_LockOptions.__init__() got an unexpected
    keyword argument 'timeout'``). Free on a good call: the signature is consulted only
    after a TypeError."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except TypeError:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as wrong:
                raise TypeError(_explain(func, signature, args, kwargs, wrong)) from None
            raise  # raised inside, by a bad value: that message already says what is wrong

    return checked


def _explain(
    func: Callable[..., Any],
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    wrong: TypeError,
) -> str:
    params = list(signature.parameters.values())
    if func.__name__ == "__init__" and args:
        owner = type(args[0])
        what = getattr(owner, "api_name", owner.__name__)
        params = params[1:]  # self
    else:
        what = func.__name__
    accepted = [f"*{p.name}" if p.kind == p.VAR_POSITIONAL else p.name for p in params]
    hints = []
    for unknown in (k for k in kwargs if k not in signature.parameters):
        alias = _ALIASES.get(unknown)
        close = difflib.get_close_matches(unknown, accepted, n=1)
        if alias:
            hints.append(f"for {unknown}=, use {alias}")
        elif close:
            hints.append(f"{unknown}= looks like a misspelt {close[0]}=")
    hint = "".join(f"; {one}" for one in hints)
    return f"{what}() {wrong}{hint}; it accepts: {', '.join(accepted)}"

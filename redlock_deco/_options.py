"""Every option of the decorators and the primitives, declared once: :data:`OPTIONS`.

A row says an option's name, its type as type checkers see it, its default, its bounds, which
public callables take it, how a value is checked and what the docs say of it. Read from it:

- validation and its error messages (:func:`check_options`, :func:`build_options`), at
  decoration or construction, so a typo such as ``ttl=0`` fails at import time rather than on
  the first production call;
- the run-time signatures of ``locked``/``limited`` (``_signatures.public_signature``);
- their overloads, rendered into ``_decorator_api.py``, and the docs' option table
  (docs/locked.md), by ``python -m tests.support.options_table --update``;
  tests/core/test_options.py fails when either differs from a fresh rendering, and when a
  constructor (``Lock``, ``Semaphore`` and their asyncio twins) takes other parameters than
  its rows (it prints the lines to write).

Why one module: the rows, the checks that read them and the arguments of calls (``acquire``'s
wait, ``extend``'s to/by) share one set of bounds and one way of saying a value is wrong; split,
an error message for the same bound would be written twice.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from ._events import Source
from ._lifecycle import Lease
from ._protocol import LOCK, SEMAPHORE

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
    # The labels of its events (template, function, provider), set once: by the decorator,
    # or from label= for a primitive used directly; None for a primitive without a label,
    # whose name is its template.
    source: Source | None = None
    label: str | None = None

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

#: The public callables options belong to (``Lock``/``Semaphore``/``Throttle`` stand for their
#: asyncio twins too, which share their constructors): those that hold a lease, then the
#: throttle's, which admits calls and holds nothing.
LEASE_APIS = ("locked", "limited", "Lock", "Semaphore")
THROTTLE_APIS = ("throttled", "Throttle")
APIS = (*LEASE_APIS, *THROTTLE_APIS)
#: The default key prefix of ``@throttled`` and ``Throttle``.
THROTTLE_PREFIX = "throttle:"
#: The shortest interval between two admissions (``per / rate``): the server's clock counts
#: microseconds, and a shorter interval would be rounded to nothing.
MIN_INTERVAL = 1e-6


class _Required:
    def __repr__(self) -> str:
        return "<required>"


#: The default of an option the caller must give (``limit``).
REQUIRED: Any = _Required()


@dataclass(frozen=True, slots=True)
class Option:
    """One option, everything known of it in one row."""

    name: str
    #: Its type as type checkers see it, in the namespace of the signatures that use it.
    annotation: str
    default: object
    #: The public callables that take it (of :data:`APIS`).
    takes: tuple[str, ...]
    #: The value as stored, or a TypeError/ValueError naming the option (given this row).
    check: Callable[[Option, object], Any]
    #: What it does: one line of markdown for the docs' tables.
    meaning: str
    #: Numbers: the least value allowed (None: anything above 0) and the largest.
    low: float | None = None
    high: float | None = None
    #: What None asks for, where None is allowed.
    none_means: str | None = None
    #: The bounds of a value that is no number, as the docs and error messages say them.
    values: str = ""
    #: Another default for some callables: ((api, default), ...).
    defaults: tuple[tuple[str, object], ...] = ()

    def default_for(self, api: str) -> object:
        return dict(self.defaults).get(api, self.default)

    @property
    def bounds(self) -> str:
        """What values it takes, in words (the docs' "bounds" column)."""
        words = [self.values] if self.values else []
        if self.high is not None:
            low = "above 0" if self.low is None else _number(self.low)
            seconds = " seconds" if self.check in (_seconds, _wait) else ""
            words.insert(0, f"{low} to {_number(self.high)}{seconds}")
        elif self.low is not None:
            words.insert(0, f">= {_number(self.low)}")
        if self.none_means:
            words.append(f"`None`: {self.none_means}")
        return "; ".join(words)


def _number(value: float) -> str:
    """``1e9`` for MAX_SECONDS, as the docs write it; other bounds as they are."""
    return f"{value:.0e}".replace("e+0", "e") if value >= 10**6 else f"{value:g}"


def _seconds(option: Option, value: object) -> float | None:
    """A number of seconds between the row's bounds (``ttl``, ``max_hold``)."""
    if value is None and option.none_means:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{option.name} must be a number of seconds, got {value!r}")
    low, high = option.low or 0, option.high or MAX_SECONDS
    # Compared, not converted first: NaN fails every comparison, and a huge int has no float.
    if not (value > 0 and low <= value <= high):
        lowest = f"from {low} ({low * 1000:g} ms)" if low else "above 0"
        none = f", or None for {option.none_means}" if option.none_means else ""
        raise ValueError(
            f"{option.name} must be a number of seconds {lowest} up to {high:.0e} (about 31 "
            f"years){none}, got {value!r:.40}"
        )
    return float(value)


def _wait(option: Option, value: object) -> float | None:
    """``None`` or infinity wait forever, ``0`` tries once, a positive number bounds it. A
    negative one is refused, ``-1`` too (API.md: ``wait < 0`` raises ValueError): a budget the
    caller computed, and found spent, must fail at once, not wait forever -- ``-1`` meant
    "forever" here for a while, as threading's ``acquire(timeout=-1)`` does (review 61, F2).
    ``acquire(timeout=-1)`` keeps threading's meaning (see acquire_wait)."""
    if isinstance(value, bool):
        raise TypeError(f"wait must be seconds (a number) or None, got {value!r}")
    if value is None or value == math.inf:
        return None
    if not isinstance(value, (int, float)):
        raise TypeError(f"wait must be seconds (a number) or None, got {value!r}")
    if not 0 <= value <= MAX_SECONDS:  # NaN fails the comparison too
        raise ValueError(
            f"wait must be from 0 (try once) up to {MAX_SECONDS:.0e} seconds, or None to wait "
            f"forever, got {value!r:.40}"
        )
    return float(value)


def _count(option: Option, value: object) -> int:
    """An int from the row's ``low`` (``limit``, ``replicas``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{option.name} must be an int >= {option.low:g}, got {value!r}")
    if value < (option.low or 0):
        raise ValueError(f"{option.name} must be >= {option.low:g}, got {value!r}")
    return value


def _flag(option: Option, value: object) -> bool:
    """``True`` or ``False``: a truthy value is more likely a mistake (``shared="no"``)."""
    if not isinstance(value, bool):
        raise TypeError(f"{option.name} must be True or False, got {value!r}")
    return value


def _text(option: Option, value: object) -> str:
    """A str (``prefix``); ``provider`` must not be blank either."""
    if not isinstance(value, str):
        raise TypeError(f"{option.name} must be {option.values}, got {value!r:.80}")
    if option.name != "prefix" and not value.strip():
        raise TypeError(f"{option.name} must be {option.values}, got {value!r:.80}")
    return value


def _label(option: Option, value: object) -> str | None:
    """A fixed, non-blank str, or None. No ``{``/``}``: a label is used as written, never
    rendered, so a template there is a mistake that would pass for a fixed label."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"label must be {option.values}, got {value!r:.80}")
    if not value.strip() or "{" in value or "}" in value:
        raise ValueError(
            f"label must be {option.values}: it is used as written, never rendered (a value "
            f"per call would make a metric series per call), got {value!r:.80}"
        )
    return value


def _on_busy(option: Option, value: object) -> OnBusyArg:
    """ "raise", "skip", or a fallback callable (checked against the function by
    ``_decorators``, which knows it)."""
    if value == "raise" or value == "skip":
        return "raise" if value == "raise" else "skip"
    what = "a callable (a fallback called with the call's arguments, whose result is returned)"
    if isinstance(value, str):
        raise ValueError(f"on_busy must be one of {ON_BUSY_CHOICES} or {what}, got {value!r}")
    if not callable(value):
        raise TypeError(f"on_busy must be 'raise', 'skip' or {what}, got {value!r:.80}")
    return value


def _on_lost(option: Option, value: object) -> OnLost:
    """A callable taking the lease, "cancel" (async functions only), or None."""
    if value is None or value == "cancel":
        return "cancel" if value == "cancel" else None
    if not callable(value):
        raise TypeError(
            f"on_lost must be a callable taking the lease, 'cancel' or None, got {value!r}"
        )
    return value


def _rate(option: Option, value: object) -> float:
    """A positive number (``rate``: admissions per ``per`` seconds, fractions allowed)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{option.name} must be a number above 0, got {value!r:.40}")
    if not 0 < value <= MAX_SECONDS:  # NaN fails the comparison too
        raise ValueError(f"{option.name} must be a number above 0 up to 1e9, got {value!r:.40}")
    return float(value)


def _burst(option: Option, value: object) -> float | None:
    """A number >= 1 (how many admissions a quiet spell saves up), or None (``rate``'s)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"burst must be a number >= 1, or None for rate's, got {value!r:.40}")
    if not 1 <= value <= MAX_SECONDS:
        raise ValueError(
            f"burst must be a number from 1 (one call at a time, evenly spaced) up to 1e9, or "
            f"None for rate's, got {value!r:.40}"
        )
    return float(value)


_ALL = LEASE_APIS  # every lease-holding callable (a throttle holds nothing)
_LOCKS = ("locked", "Lock")
_DECORATORS = ("locked", "limited", "throttled")
_SEMAPHORES = ("limited", "Semaphore")
_THROTTLES = THROTTLE_APIS
_WAITS = APIS
_S = MAX_SECONDS

# In signature order (limit is placed by hand in @limited: positional, after name). The docs'
# tables show these words as they are: keep them short, in markdown, true of every callable
# in ``takes``.
_FLAG = "`True` or `False`"
OPTIONS: tuple[Option, ...] = (
    Option("limit", "int", REQUIRED, _SEMAPHORES, _count,
           "how many may hold it at once, per name", low=1),
    Option("rate", "float", REQUIRED, _THROTTLES, _rate,
           "how many calls are admitted per `per` seconds, per name", high=_S),
    Option("per", "float", 1.0, _THROTTLES, _seconds,
           "the period `rate` counts over", high=_S),
    Option("burst", "float | None", None, _THROTTLES, _burst,
           "how many may start at once after a quiet spell; in any `T` seconds at most "
           "`burst + rate * T / per` start", low=1, high=_S, none_means="`rate` (at least 1)"),
    Option("ttl", "float", 30.0, _ALL, _seconds,
           "lease length; if the holder dies, it frees within `ttl`", low=MIN_TTL, high=_S),
    Option("wait", "float | None", 10.0, _WAITS, _wait,
           "how long to wait for it (a throttle: how far ahead a call may reserve its slot)",
           low=0, high=_S, values="`0`: try once; a negative one, `-1` too, is a `ValueError`",
           none_means="wait forever"),
    Option("auto_renew", "bool", True, _ALL, _flag,
           "extend the lease in the background while it is held", values=_FLAG),
    Option("on_busy", "OnBusyArg", "raise", _DECORATORS, _on_busy,
           "when `wait` runs out (a throttle: when no slot comes within it): raise "
           "`LockNotAcquired` (a throttle: `Throttled`); `\"skip\"` the call and return "
           "`None` (typed `T | None`); or call the fallback with the call's arguments "
           "(`self`/`cls` included) and return its result (typed `T | R`; an `async def` may "
           "take an async one, awaited)", values='`"raise"`, `"skip"` or a callable'),
    Option("provider", "str", "default", _WAITS, _text,
           "which registered Redis to use", values="a registered provider's name"),
    Option("prefix", "str", LOCK.prefix, _WAITS, _text,  # each kind's own (_protocol.Kind)
           "key prefix: the key is `prefix + name`", values="a str",
           defaults=(("limited", SEMAPHORE.prefix), ("Semaphore", SEMAPHORE.prefix),
                     ("throttled", THROTTLE_PREFIX), ("Throttle", THROTTLE_PREFIX))),
    Option("replicas", "int", 0, _ALL, _count,
           "replica acknowledgements (`WAIT`) required after acquiring", low=0),
    Option("on_lost", "OnLost", None, _ALL, _on_lost,
           "called with the lease as soon as renewal finds it gone; `\"cancel\"` cancels the "
           "call (async functions only)", values='a callable, `"cancel"` or `None`'),
    Option("max_hold", "float | None", None, _ALL, _seconds,
           "stop renewing after this long, so a stuck holder cannot keep it forever (it "
           "then ends in `LockLost`)", high=_S, none_means="no limit"),
    Option("fencing", "bool", False, _LOCKS, _flag,
           "give each acquisition a token greater than every earlier one of its name "
           "(`current_lease().fencing_token`)", values=_FLAG),
    Option("shared", "bool", False, _LOCKS, _flag,
           "take it in shared (read) mode: any number of shared holders, or one exclusive",
           values=_FLAG),
    Option("label", "str | None", None, _WAITS, _label,
           "the events' and metrics' `template` label: for a `Lock`/`Semaphore` whose names "
           "grow with your data, in place of its name; for a decorator, in place of its "
           "template", values="a non-empty str without `{` or `}`",
           none_means="the name or template"),
)  # fmt: skip
BY_NAME: Mapping[str, Option] = {option.name: option for option in OPTIONS}
#: extend()'s arguments: to= is a ttl (its bounds); by= any positive number of seconds.
_EXTEND_TO = replace(BY_NAME["ttl"], name="extend(to=...), the new ttl,")
_EXTEND_BY = replace(BY_NAME["ttl"], name="extend(by=...)", low=None)


def options_of(api: str) -> tuple[Option, ...]:
    """The rows ``api`` takes, in signature order."""
    return tuple(option for option in OPTIONS if api in option.takes)


def check_options(api: str, given: Mapping[str, object]) -> dict[str, Any]:
    """Every option of ``api``, checked: the given ones, and defaults for the rest. A TypeError
    names an option it does not take (``explains_bad_arguments`` then says which it does)."""
    unknown = [name for name in given if name not in BY_NAME or api not in BY_NAME[name].takes]
    if unknown:
        raise TypeError(f"{api}() got an unexpected keyword argument {unknown[0]!r}")
    values = {}
    for option in options_of(api):
        value = given.get(option.name, option.default_for(api))
        if value is REQUIRED:
            raise TypeError(f"{api}() needs {option.name}=<{option.annotation}>: {option.meaning}")
        values[option.name] = option.check(option, value)
    if "rate" in values:
        _check_throttle(values)
    if values.get("shared") and values.get("fencing"):
        raise ValueError(
            "shared=True with fencing=True: readers write nothing a fencing token could guard, "
            "so they get none; pass fencing=True to the exclusive (writing) side only"
        )
    return values


def _check_throttle(values: dict[str, Any]) -> None:
    """``rate`` and ``per`` together: an interval the server's microseconds can count."""
    rate, per = values["rate"], values["per"]
    if per / rate < MIN_INTERVAL:
        raise ValueError(
            f"rate={rate:g} per={per:g} s admits a call every {per / rate * 1e6:.3g} us, finer "
            "than the server's clock (1 us): at most one call per microsecond per name; lower "
            "rate, or split the load over several names"
        )
    if values["burst"] is None:
        values["burst"] = max(1.0, rate)
    if values["burst"] * per / rate > MAX_SECONDS:
        # Beyond it the script's microsecond sums overflow: a delay past 2**63 us came back
        # negative and the call started at once; PEXPIRE got "1e+21" after HSET had run.
        raise ValueError(
            f"burst={values['burst']:g} calls at rate={rate:g} per={per:g} s take "
            f"{values['burst'] * per / rate:.3g} s to refill, more than 1e9 s (about 31 "
            "years); raise rate or lower per or burst"
        )


def lease_options(values: Mapping[str, Any]) -> LeaseOptions:
    """The checked values a lease is taken and held by (not on_busy, shared: the caller's)."""
    kept = {name: value for name, value in values.items() if name not in ("on_busy", "shared")}
    label = kept.get("label")
    # A primitive used directly labels its events by its label (its name without one); a
    # decorator replaces this source with its own, keeping the label as its template.
    source = None if label is None else Source.direct(label, kept["provider"])
    return LeaseOptions(**kept, source=source)


def build_options(api: str = "Lock", /, **given: object) -> LeaseOptions:
    """Check ``api``'s options (defaults for those not given) and return them frozen."""
    return lease_options(check_options(api, given))


def check_seconds(option: str, value: object) -> float:
    """Seconds in ``option``'s bounds (``ttl``: from MIN_TTL; others above 0), up to MAX_SECONDS."""
    seconds = _seconds(BY_NAME[option], value)
    if seconds is None:  # max_hold's "no limit" is no number of seconds
        raise TypeError(f"{option} must be a number of seconds here, got None")
    return seconds


def check_wait(value: object) -> float | None:
    """``None`` waits forever, ``0`` tries once, a positive number bounds the wait."""
    return _wait(BY_NAME["wait"], value)


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


@dataclass(frozen=True)
class Extension:
    """What an ``extend()`` call asks for, checked: ``ms`` from now (``to=``), or ``ms`` more
    than the lease has left (``by=``, ``additive``)."""

    ms: int
    additive: bool = False


def extension(ttl: object, to: object, by: object, default_ms: int) -> Extension:
    """``extend(ttl, to=, by=)`` as an :class:`Extension`; ``default_ms`` (the object's ttl)
    when nothing is given.

    ``extend(60)`` and ``extend(ttl=60)`` set the lease to 60 s from now, as they always did,
    with a DeprecationWarning: redis-py's ``Lock.extend(60)`` *adds* 60 s, and a user moving
    from it would shorten a long lease without noticing.
    """
    given = [name for name, value in (("ttl", ttl), ("to", to), ("by", by)) if value is not None]
    if len(given) > 1:
        raise TypeError(
            f"extend() takes one of to= and by=, got {' and '.join(given)}: to=S sets the lease "
            "to S seconds from now, by=S adds S seconds to what it has left"
        )
    if by is not None:
        return Extension(to_ms(_seconds(_EXTEND_BY, by) or 0.0), additive=True)
    if ttl is not None:
        warnings.warn(
            f"extend({ttl!r:.20}) sets the lease to {ttl!r:.20} s from now, where redis-py's "
            "Lock.extend adds that much: write extend(to=...) for this, or extend(by=...) to "
            "add; the positional and ttl= forms will go in version 1.0",
            DeprecationWarning,
            stacklevel=3,
        )
        to = ttl
    if to is None:
        return Extension(default_ms)
    return Extension(to_ms(_seconds(_EXTEND_TO, to) or 0.0))

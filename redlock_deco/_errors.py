"""The exceptions of redlock-deco: one base class, semantic subclasses carrying context.

Connection failures are deliberately absent: redis-py's own ``ConnectionError`` and
``TimeoutError`` pass through unwrapped, so existing retry/alerting code keeps working.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def _rebuild(
    cls: type[RedlockDecoError], args: tuple[object, ...], state: dict[str, object]
) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


def _also_from_args(init: Callable[..., None]) -> Callable[..., None]:
    """``init``, which also accepts what the error's ``args`` hold: ``(message, context)``.

    Celery's JSON results store an error as its type and ``args`` and rebuild it with
    ``cls(*args)``; the subclasses' own constructors take keyword-only context, so without
    this the rebuild fails and Celery hands back a bare ``Exception``.
    """

    @functools.wraps(init)
    def __init__(self: RedlockDecoError, *args: Any, **kwargs: Any) -> None:
        if not kwargs and len(args) == 2 and isinstance(args[1], dict):
            RedlockDecoError.__init__(self, str(args[0]), **args[1])
        else:
            init(self, *args, **kwargs)

    return __init__


class RedlockDecoError(Exception):
    """Base class of every error raised by redlock-deco itself.

    Its context (``name``, ``key``, ``waited``...) is kept as attributes and in ``args``,
    after the message: ``(message, {"name": ..., ...})``, and ``str()`` is the message. So it
    survives pickling (Celery's pickle results) and ``cls(*args)`` (Celery's JSON results)
    with its type, message and attributes.
    """

    def __init__(self, message: str = "", /, **context: Any) -> None:
        if context:
            super().__init__(message, context)
        else:
            super().__init__(message)
        self.__dict__.update(context)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _also_from_args(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, dict(self.__dict__))


class ProviderError(RedlockDecoError):
    """A provider value is unusable, or gives the wrong kind of client for the call."""

    provider: str | None

    def __init__(self, message: str, *, provider: str | None = None) -> None:
        super().__init__(message, provider=provider)


class ProviderNotFound(ProviderError, LookupError):
    """No provider is registered under the requested name."""

    def __init__(self, provider: str) -> None:
        super().__init__(
            f"no Redis provider is registered under {provider!r}; register one before the "
            f"first call, e.g. redlock_deco.register_provider({provider!r}, "
            f'"redis://localhost:6379/0")'
            + (" or set the REDIS_URL environment variable" if provider == "default" else ""),
            provider=provider,
        )


class KeyTemplateError(RedlockDecoError, ValueError):
    """A lock-name template does not fit the decorated function or its arguments."""

    template: str | None
    field: str | None

    def __init__(
        self, message: str, *, template: str | None = None, field: str | None = None
    ) -> None:
        super().__init__(message, template=template, field=field)


class LockError(RedlockDecoError):
    """A lock or semaphore operation failed; ``name`` and ``key`` say which one."""

    name: str
    key: str

    def __init__(self, message: str, *, name: str, key: str) -> None:
        super().__init__(message, name=name, key=key)


class LockNotAcquired(LockError):
    """The wait ran out before the lock (or a semaphore slot) could be taken."""

    waited: float

    def __init__(self, *, name: str, key: str, waited: float) -> None:
        RedlockDecoError.__init__(
            self,
            # (not "by someone else": a semaphore nested in its own holder's section waits
            # for its own slot, a `with` block for its thread's bare acquire() -- review 57)
            f"could not acquire {key!r} within {waited:.3f}s: it stayed taken, by another "
            "holder or by this thread or task itself (semaphore slots, and a bare acquire() "
            "of another object, are never re-entered); raise `wait`, or pass on_busy='skip' "
            "to return None instead",
            name=name,
            key=key,
            waited=waited,
        )


class LockNotOwned(LockError):
    """Release or extend of a lease that this owner does not (or no longer) hold."""


class LockLost(LockError):
    """The lease ended (expired or taken over) while the protected call was running."""


class LockNotReplicated(LockNotAcquired):
    """The lock was granted, but fewer replicas than ``replicas=`` acknowledged it in time, so
    it was given back: on failover it could have been granted to someone else as well.

    Raised whatever ``on_busy`` says: a missing replica is a fault to see, not a busy lock.
    """

    replicas: int
    acknowledged: int

    def __init__(
        self, *, name: str, key: str, waited: float, replicas: int, acknowledged: int
    ) -> None:
        RedlockDecoError.__init__(
            self,
            f"acquired {key!r} on the primary, but only {acknowledged} of the {replicas} "
            f"replica(s) required by replicas={replicas} acknowledged it (tried for "
            f"{waited:.3f}s), so it was released; check that the replicas are attached and "
            "in sync (INFO replication), or lower replicas=",
            name=name,
            key=key,
            waited=waited,
            replicas=replicas,
            acknowledged=acknowledged,
        )


class Throttled(RedlockDecoError):
    """A throttle (``@throttled``, ``Throttle``) had no slot for the call within its ``wait``;
    nothing was taken. ``retry_after``: seconds until a call of that cost would have been
    admitted at once, as the server saw it (later callers may take that slot first)."""

    name: str
    key: str
    retry_after: float
    wait: float

    def __init__(self, *, name: str, key: str, retry_after: float, wait: float) -> None:
        RedlockDecoError.__init__(
            self,
            f"throttle {key!r} has no slot within wait={wait:g}s: the next one is "
            f"{retry_after:.3f}s away; raise `wait` to reserve it and sleep until then, or "
            "pass on_busy='skip' to return None instead",
            name=name,
            key=key,
            retry_after=retry_after,
            wait=wait,
        )


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, also on Python 3.10 (which only lacks the method)."""
    notes = getattr(error, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        error.__notes__ = notes  # type: ignore[attr-defined]  # the 3.11+ attribute, by hand
    notes.append(note)

"""The exceptions of redlock-deco: one base class, semantic subclasses carrying context.

Connection failures are deliberately absent: redis-py's own ``ConnectionError`` and
``TimeoutError`` pass through unwrapped, so existing retry/alerting code keeps working.
"""

from __future__ import annotations

from typing import Any


def _rebuild(
    cls: type[RedlockDecoError], args: tuple[object, ...], state: dict[str, object]
) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class RedlockDecoError(Exception):
    """Base class of every error raised by redlock-deco itself.

    Pickles with its type, message and attributes (Celery stores task errors that way): the
    subclasses take keyword-only context, which the default pickling cannot pass back.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, dict(self.__dict__))


class ProviderError(RedlockDecoError):
    """A provider value is unusable, or gives the wrong kind of client for the call."""

    def __init__(self, message: str, *, provider: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider


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

    def __init__(
        self, message: str, *, template: str | None = None, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.template = template
        self.field = field


class LockError(RedlockDecoError):
    """A lock or semaphore operation failed; ``name`` and ``key`` say which one."""

    def __init__(self, message: str, *, name: str, key: str) -> None:
        super().__init__(message)
        self.name = name
        self.key = key


class LockNotAcquired(LockError):
    """The wait ran out before the lock (or a semaphore slot) could be taken."""

    def __init__(self, *, name: str, key: str, waited: float) -> None:
        super().__init__(
            f"could not acquire {key!r} within {waited:.3f}s (it is held by someone else); "
            "raise `wait`, or pass on_busy='skip' to return None instead",
            name=name,
            key=key,
        )
        self.waited = waited


class LockNotOwned(LockError):
    """Release or extend of a lease that this owner does not (or no longer) hold."""


class LockLost(LockError):
    """The lease ended (expired or taken over) while the protected call was running."""


class LockNotReplicated(LockNotAcquired):
    """The lock was granted, but fewer replicas than ``replicas=`` acknowledged it in time, so
    it was given back: on failover it could have been granted to someone else as well.

    Raised whatever ``on_busy`` says: a missing replica is a fault to see, not a busy lock.
    """

    def __init__(
        self, *, name: str, key: str, waited: float, replicas: int, acknowledged: int
    ) -> None:
        LockError.__init__(
            self,
            f"acquired {key!r} on the primary, but only {acknowledged} of the {replicas} "
            f"replica(s) required by replicas={replicas} acknowledged it (tried for "
            f"{waited:.3f}s), so it was released; check that the replicas are attached and "
            "in sync (INFO replication), or lower replicas=",
            name=name,
            key=key,
        )
        self.waited = waited
        self.replicas = replicas
        self.acknowledged = acknowledged

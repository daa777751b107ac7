"""redlock-deco: distributed locks, semaphores and rate limits on Redis as one-line decorators."""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from ._admin import Released
from ._decorator_api import limited, locked, throttled
from ._errors import (
    KeyTemplateError,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    LockNotReplicated,
    ProviderError,
    ProviderNotFound,
    RedlockDecoError,
    Throttled,
)
from ._events import LockEvent, LoggingListener, add_listener, remove_listener
from ._lifecycle import Lease
from ._lock import Lock
from ._ownership import current_lease
from ._process import aclose
from ._providers import register_provider, unregister_provider
from ._semaphore import Semaphore
from ._throttle import Throttle

try:
    __version__: str = _version("redlock-deco")
except _PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"


__all__ = [
    "KeyTemplateError",
    "Lease",
    "Lock",
    "LockError",
    "LockEvent",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwned",
    "LockNotReplicated",
    "LoggingListener",
    "ProviderError",
    "ProviderNotFound",
    "RedlockDecoError",
    "Released",
    "Semaphore",
    "Throttle",
    "Throttled",
    "__version__",
    "aclose",
    "add_listener",
    "current_lease",
    "limited",
    "locked",
    "register_provider",
    "remove_listener",
    "throttled",
    "unregister_provider",
]

# Our exceptions live in a private module; they name the public one, so tracebacks read
# "redlock_deco.LockNotAcquired" and pickles (Celery's result backend) keep working whatever
# the private layout becomes: every error exported above.
for _name in __all__:
    _exported = globals()[_name]
    if isinstance(_exported, type) and issubclass(_exported, RedlockDecoError):
        _exported.__module__ = __name__
del _name, _exported

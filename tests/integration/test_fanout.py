"""The sync quorum round (fanout.QuorumSyncTarget): one command written to every master, every
reply read against one deadline. Late, paused, killed and script-less masters; the order of
commands on a master that answers late; concurrent rounds; connections handed back."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from redlock_deco._drivers import SyncTarget
from redlock_deco._fanout import MAX_OWED, QuorumSyncTarget
from redlock_deco._protocol import Eval, Fanout, Sleep
from redlock_deco._providers import url_client_options
from redlock_deco._scripts import Script
from redlock_deco.testing import LocalCluster, RedisServer


def script(name: str, source: str) -> Script:
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


# Replies that tell rounds apart: a stale reply read as a fresh one would show.
ECHO = script("test_echo", "return ARGV[1]")
# What a master ran, in the order it ran it.
APPEND = script("test_append", "redis.call('RPUSH', KEYS[1], ARGV[1]) return ARGV[1]")


def echo(word: str) -> Fanout:
    return Fanout(Eval(ECHO, (), (word,)))


def append(key: str, word: str) -> Fanout:
    return Fanout(Eval(APPEND, (key,), (word,)))


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[RedisServer]]:
    servers = [RedisServer() for _ in range(3)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.kill()


@pytest.fixture
def masters(fleet: list[RedisServer]) -> Iterator[list[RedisServer]]:
    """Three live masters, empty and without cached scripts."""
    for server in fleet:
        if server.process is None:  # a test killed it
            server.start()
        server.resume()
        with server.client() as client:
            client.flushall()
            client.script_flush()
    yield fleet
    for server in fleet:
        if server.process is not None:
            server.resume()


Make = Callable[..., QuorumSyncTarget]


@pytest.fixture
def make(masters: list[RedisServer]) -> Iterator[Make]:
    """Build a quorum target over the masters (client keyword arguments: like providers'
    quorum clients unless given); retired and closed at the end."""
    built: list[tuple[QuorumSyncTarget, list[redis.Redis]]] = []

    def build(node_timeout: float = 0.25, **kwargs: Any) -> QuorumSyncTarget:
        options = kwargs or url_client_options("sync", node=True)
        clients = [server.client(**options) for server in masters]
        target = QuorumSyncTarget([SyncTarget(c) for c in clients], node_timeout=node_timeout)
        built.append((target, clients))
        return target

    yield build
    for target, clients in built:
        target.retire()
        for client in clients:
            client.close()


def timed(target: QuorumSyncTarget, step: Fanout) -> tuple[list[Any], float]:
    started = time.monotonic()
    replies = target.execute(step)
    return replies, time.monotonic() - started


@pytest.mark.parametrize("decoded", [False, True], ids=["bytes", "decoded"])
def test_a_round_returns_every_masters_reply(make: Make, decoded: bool) -> None:
    options = {**url_client_options("sync", node=True), "decode_responses": decoded}
    target = make(node_timeout=2.0, **options)  # (replies, not timing: a busy machine)
    word: str | bytes = "hello" if decoded else b"hello"
    assert target.execute(echo("hello")) == [word] * 3  # scripts loaded by EVAL on NOSCRIPT
    assert target.execute(echo("hello")) == [word] * 3  # and run by EVALSHA since
    assert target.execute(Sleep(0.01)) is None


def test_a_paused_master_costs_the_node_timeout_and_nothing_else(
    make: Make, masters: list[RedisServer]
) -> None:
    target = make(node_timeout=0.25)  # clients with a 1 s socket timeout, like providers'
    target.execute(echo("warm"))
    masters[2].pause()
    for word in ("one", "two", "three"):  # later rounds too: never a socket timeout
        replies, took = timed(target, echo(word))
        assert replies[:2] == [word.encode()] * 2
        assert isinstance(replies[2], redis.exceptions.TimeoutError)
        assert 0.2 < took < 0.25 + 0.2


def test_a_master_paused_before_first_contact_costs_no_more(
    make: Make, masters: list[RedisServer]
) -> None:
    """A client with no socket timeout at all: redis-py's connection handshake would wait for
    the paused master forever, so connections are never made on the caller's thread."""
    masters[0].pause()
    target = make(node_timeout=0.25, socket_timeout=None)
    for _ in range(3):
        replies, took = timed(target, echo("x"))
        assert replies[1:] == [b"x", b"x"]
        assert isinstance(replies[0], redis.exceptions.TimeoutError)
        assert took < 0.25 + 0.2
    masters[0].resume()
    deadline = time.monotonic() + 5
    while target.execute(echo("back")) != [b"back"] * 3:  # the handshake completes
        assert time.monotonic() < deadline


def test_the_round_after_a_timeout_reads_its_own_replies(
    make: Make, masters: list[RedisServer]
) -> None:
    target = make()
    target.execute(echo("warm"))
    masters[1].pause()
    assert isinstance(target.execute(echo("late"))[1], redis.exceptions.TimeoutError)
    masters[1].resume()
    assert target.execute(echo("fresh")) == [b"fresh"] * 3  # "late" was read and dropped
    other: list[Any] = []
    worker = threading.Thread(target=lambda: other.extend(target.execute(echo("elsewhere"))))
    worker.start()
    worker.join()
    assert other == [b"elsewhere"] * 3


def test_a_late_command_is_never_overtaken_by_the_next(
    make: Make, masters: list[RedisServer]
) -> None:
    """The acquire a paused master has not answered, then the release sent after it: the
    master runs them in that order when it resumes (closing the connection would let the
    release, sent on another, run first and leave the lease behind)."""
    target = make()
    target.execute(append("warm", "up"))  # the script is loaded: what is sent later runs
    masters[2].pause()
    for word in ("acquire", "release"):
        replies = target.execute(append("ran", word))
        assert replies[:2] == [word.encode()] * 2
        assert isinstance(replies[2], redis.exceptions.TimeoutError)
    masters[2].resume()
    assert target.execute(append("ran", "after")) == [b"after"] * 3
    for server in masters:
        with server.client() as client:
            assert client.lrange("ran", 0, -1) == [b"acquire", b"release", b"after"]


def test_noscript_on_one_master_falls_back_to_eval_there(
    make: Make, masters: list[RedisServer]
) -> None:
    target = make()
    assert target.execute(echo("loaded")) == [b"loaded"] * 3
    with masters[1].client() as client:
        client.script_flush()
        assert client.script_exists(ECHO.sha) == [False]
        replies, took = timed(target, echo("again"))
        assert replies == [b"again"] * 3 and took < 0.25
        assert client.script_exists(ECHO.sha) == [True]  # EVAL cached it again


@pytest.mark.parametrize("client", ["quorum-options", "default-client"])
def test_a_killed_master_is_a_failure_entry_promptly(
    make: Make, masters: list[RedisServer], client: str
) -> None:
    # A long node timeout, so that "promptly" cannot be mistaken for "at the deadline". A
    # default client retries a refused connection for seconds: that happens off the round.
    options = {} if client == "quorum-options" else {"socket_timeout": None}
    target = make(node_timeout=1.0, **options)
    target.execute(echo("warm"))
    masters[0].kill()
    replies, took = timed(target, echo("x"))  # its ready connection is dead
    assert replies[1:] == [b"x", b"x"]
    assert isinstance(replies[0], redis.exceptions.ConnectionError)
    assert took < 0.5
    replies, took = timed(target, echo("y"))  # a new one is refused
    assert replies[1:] == [b"y", b"y"]
    assert isinstance(replies[0], redis.exceptions.RedisError)
    assert took < 1.0 + 0.2 if client == "default-client" else took < 0.5
    masters[0].start()
    deadline = time.monotonic() + 15  # a default client's retries back off up to 1 s each
    while target.execute(echo("back")) != [b"back"] * 3:  # connects again once it is back
        assert time.monotonic() < deadline


def test_concurrent_rounds_each_read_their_own_replies_within_small_pools(make: Make) -> None:
    # Pools of 4 connections: rounds must keep to the lanes, or a full pool would raise.
    target = make(node_timeout=2.0, max_connections=4, socket_timeout=2.0)
    wrong: list[object] = []

    def rounds(n: int) -> None:
        for i in range(60):
            word = f"{n}-{i}"
            replies = target.execute(echo(word))
            if replies != [word.encode()] * 3:
                wrong.append(replies)

    threads = [threading.Thread(target=rounds, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_retiring_hands_every_connection_back(make: Make, masters: list[RedisServer]) -> None:
    target = make()
    target.execute(echo("warm"))
    masters[2].pause()
    target.execute(echo("owed"))  # master 2's connection still owes this reply
    pools = [node.client.connection_pool for node in target.nodes]
    assert [len(pool._in_use_connections) for pool in pools] == [1, 1, 1]
    target.retire()
    # The one owing a reply is drained first (closed, it might lose a release the master
    # had received: see the module's docstring), then handed back once the master answers.
    assert [len(pool._in_use_connections) for pool in pools] == [0, 0, 1]
    masters[2].resume()
    deadline = time.monotonic() + 5
    while len(pools[2]._in_use_connections) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [len(pool._in_use_connections) for pool in pools] == [0, 0, 0]


def test_a_pool_disconnected_under_the_target_is_never_reconnected_in_the_round(
    make: Make, masters: list[RedisServer]
) -> None:
    """Its ready connections are closed (``client.close()``, a fork): writing to one would
    make redis-py connect on the caller's thread, and wait for a paused master forever."""
    target = make(node_timeout=0.25, socket_timeout=None)
    target.execute(echo("warm"))
    for node in target.nodes:
        node.client.connection_pool.disconnect()
    masters[1].pause()
    replies, took = timed(target, echo("x"))
    assert replies[0] == replies[2] == b"x"
    assert isinstance(replies[1], redis.exceptions.TimeoutError)
    assert took < 0.25 + 0.2


def test_a_master_stalled_for_good_costs_one_connection_not_more(
    make: Make, masters: list[RedisServer]
) -> None:
    """Commands are queued behind unanswered ones up to MAX_OWED; then the connection is
    closed and another one carries on, so a long stall never fills the socket buffers."""
    target = make(node_timeout=0.02)
    target.execute(echo("warm"))
    pool = target.nodes[0].client.connection_pool
    masters[0].pause()
    for i in range(MAX_OWED + 5):
        replies, took = timed(target, echo(f"stalled-{i}"))
        assert isinstance(replies[0], redis.exceptions.RedisError)
        assert took < 0.02 + 0.2
        assert len(pool._in_use_connections) <= 2
    masters[0].resume()
    deadline = time.monotonic() + 5
    while target.execute(echo("back")) != [b"back"] * 3:
        assert time.monotonic() < deadline


@pytest.mark.slow
def test_a_cluster_client_can_be_one_of_the_masters(masters: list[RedisServer]) -> None:
    """A cluster client has no pool of its own to pipeline on: its part of the round goes
    through its node, within the same deadline."""
    with LocalCluster(masters=3) as cluster:
        clients: list[Any] = [cluster.client(), masters[0].client(), masters[1].client()]
        target = QuorumSyncTarget([SyncTarget(c) for c in clients])
        try:
            assert target.execute(append("{k}", "a")) == [b"a"] * 3
            assert target.execute(append("{k}", "b")) == [b"b"] * 3
            assert [c.lrange("{k}", 0, -1) for c in clients] == [[b"a", b"b"]] * 3
        finally:
            target.retire()
            for client in clients:
                client.close()


def test_a_thread_whose_replies_went_missing_gets_back_in_step(masters: list[RedisServer]) -> None:
    """Replies withheld on a live connection (a proxy holding them back) leave the thread
    counting replies late on it; after MAX_BEHIND that connection is closed and its rounds
    read their own replies again (before, every later round waited out the node timeout
    there, for good -- and with one more master down, nothing was acquired any more)."""
    from redlock_deco import Lock, register_provider
    from redlock_deco._fanout import MAX_BEHIND
    from redlock_deco.testing import FaultProxy

    def cycle() -> float:
        started = time.monotonic()
        with Lock("behind", provider="q", ttl=5, wait=2):
            pass
        return time.monotonic() - started

    with FaultProxy(masters[0].port) as proxy:
        register_provider("q", [proxy.url, masters[1].url, masters[2].url])
        cycle()
        proxy.withhold_replies()
        cycle(), cycle()
        proxy.resume()
        deadline = time.monotonic() + MAX_BEHIND + 3
        while cycle() > 0.1:  # a round waits out the node timeout on the first master
            assert time.monotonic() < deadline, "the first master's replies stay one behind"
        assert max(cycle() for _ in range(20)) < 0.1

"""Redis Cluster, Sentinel failover and replica acknowledgement (replicas=N), on real
processes: a local 3-master cluster, a primary with a replica and three sentinels, each built
with ordinary commands through redis-py (testing.LocalCluster, LocalSentinels), so they run on
any server binary, Valkey's included."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from support.caching import caching_allowed
from support.handing import handed_within
from support.subscriptions import every_cut

from redlock_deco import (
    Lock,
    LockLost,
    LockNotAcquired,
    LockNotReplicated,
    Semaphore,
    _drivers,
    limited,
    locked,
    register_provider,
)
from redlock_deco import _providers as providers
from redlock_deco._drivers import MIGRATION_PATIENCE, checkout
from redlock_deco._protocol import WAIT_LAG_MS
from redlock_deco.asyncio import Lock as AsyncLock
from redlock_deco.asyncio import Semaphore as AsyncSemaphore
from redlock_deco.testing import LocalCluster, LocalSentinels, RedisServer

pytestmark = pytest.mark.slow


# -- Redis Cluster -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3) as local:
        yield local


@pytest.fixture
def cluster_client(cluster: LocalCluster) -> Iterator[redis.RedisCluster]:
    client = cluster.client()
    client.flushall(target_nodes=client.PRIMARIES)
    register_provider("cluster", client)
    yield client
    client.close()


def test_cluster_locks_and_semaphores_across_nodes(cluster_client: redis.RedisCluster) -> None:
    names = [f"order:{i}" for i in range(12)]
    homes = {cluster_client.get_node_from_key(f"lock:{n}").port for n in names}
    assert len(homes) == 3  # the names really are spread over the three masters
    for name in names:
        with Lock(name, provider="cluster", ttl=5) as lock:
            assert lock.owned() and lock.locked()
        with Semaphore(name, provider="cluster", limit=2, ttl=5) as sem:
            assert sem.holders() == 1
    assert cluster_client.dbsize(target_nodes=cluster_client.PRIMARIES) == 0


def test_cluster_waiting_renewal_and_hand_off(cluster_client: redis.RedisCluster) -> None:
    # ttl 1 s (a renewal due every third of it): with 0.3 s a renewal came too late on a
    # machine loaded by a mutation run beside CI's slow leg.
    @locked("job:{n}", provider="cluster", ttl=1.0)
    def renewed(n: int) -> int:
        time.sleep(2.5)  # past two ttls
        return int(cluster_client.pttl(f"lock:job:{n}"))

    assert renewed(1) > 0

    holder = Lock("handoff", provider="cluster", ttl=10)
    holder.acquire()
    got: list[float] = []
    second = Lock("handoff", provider="cluster", wait=5)  # kept: it holds once handed over
    waiter = threading.Thread(target=lambda: got.append(second.acquire() and time.perf_counter()))
    waiter.start()
    while not cluster_client.exists("{lock:handoff}:queue"):
        time.sleep(0.002)
    released = time.perf_counter()
    holder.release()
    waiter.join(10)
    assert got and got[0] - released < 0.05
    second.release()


def test_a_node_connection_given_back_owing_a_reply_is_closed_before_another_command_reads_it(
    cluster_client: redis.RedisCluster,
) -> None:
    """The cluster's twin of test_connect_interrupts' test: redis-py's cluster writes a
    command and reads its reply on a node's pooled connection with its own lines between, and
    gives the connection back in a ``finally``. A Ctrl-C there (here: as the node's
    ``parse_response`` starts) left the reply on its way, and the next command on that
    connection read it as its own -- an acquire that read an earlier acquire's success would
    hold nothing. The node's server is paused, so that the reply is still on its way."""
    with Lock("{t}guarded", provider="cluster", ttl=5):  # (pools guarded at the first call)
        pass
    node = cluster_client.get_node_from_key("{t}")
    node_client = cluster_client.get_redis_connection(node)
    plain = node_client.parse_response

    def cut_short(*args: Any, **options: Any) -> Any:
        node_client.parse_response = plain  # type: ignore[method-assign]
        raise KeyboardInterrupt

    node_client.parse_response = cut_short  # type: ignore[method-assign]
    with redis.Redis(host=node.host, port=node.port) as other:
        other.execute_command("CLIENT", "PAUSE", "300")
    with pytest.raises(KeyboardInterrupt):
        cluster_client.set("{t}written", "yes")
    assert cluster_client.get("{t}other") is None  # (not b"OK": the SET's reply)
    with Lock("{t}after", provider="cluster", ttl=5):
        assert cluster_client.exists("lock:{t}after")
    assert cluster_client.keys("lock:*", target_nodes=cluster_client.PRIMARIES) == []


def test_an_asyncio_node_connection_given_back_owing_a_reply_is_closed_before_a_lock_reads_it(
    cluster: LocalCluster,
) -> None:
    """The asyncio cluster's twin (review 50, R1): redis.asyncio's cluster node writes a
    command, reads its reply and gives the connection back in a ``finally`` (8.x) or puts it
    back after the read (5.x); a ``KeyboardInterrupt`` as the read starts left the reply on
    its way, and the next acquire on that connection read the ``OK`` as its own. The node's
    server is paused, so that the reply is still on its way."""
    port = cluster.servers[0].port

    async def scenario() -> None:
        client = redis.asyncio.RedisCluster(host="127.0.0.1", port=port)
        register_provider("acluster", lambda: client)
        try:
            async with AsyncLock("{t}guarded", provider="acluster", ttl=5):
                pass  # (the nodes it knows are guarded at the first call)
            await client.set("lock:{t}held", "someone-else")
            node = client.get_node_from_key("{t}")
            plain = node.parse_response

            async def cut_short(*args: Any, **options: Any) -> Any:
                raise KeyboardInterrupt

            type(node).parse_response = cut_short  # type: ignore[method-assign]
            try:
                with redis.Redis(host=node.host, port=node.port) as other:
                    other.execute_command("CLIENT", "PAUSE", "300")
                with pytest.raises(KeyboardInterrupt):
                    await client.set("{t}written", "yes")
            finally:
                type(node).parse_response = plain.__func__  # type: ignore[attr-defined]
            with pytest.raises(LockNotAcquired):
                async with AsyncLock("{t}held", provider="acluster", ttl=5, wait=0):
                    pass  # (not inside on the OK)
            assert await client.get("{t}other") is None  # (not b"OK": the SET's reply)
        finally:
            register_provider("acluster", cluster.url)
            await client.aclose()

    asyncio.run(scenario())


def test_an_asyncio_node_pipeline_in_flight_at_the_guard_leaves_no_reply_to_a_lock(
    cluster: LocalCluster,
) -> None:
    """Review 53, R53-2: a node's connection checked out when the library first guards the
    node was made whole counting nothing owed; a pipeline on it cut between its replies went
    back owing the rest, and the next acquire there read them (a second holder). Made whole
    while checked out, it is marked as it goes back. (The BLPOP's reply comes 0.3 s late.)"""
    port = cluster.servers[0].port
    pipeline = [("SET", "{t}first", "1"), ("BLPOP", "{t}nothing", "0.3"), ("SET", "{t}3", "3")]

    async def scenario() -> None:
        client = redis.asyncio.RedisCluster(host="127.0.0.1", port=port)
        register_provider("acluster", lambda: client)
        try:
            await client.set("{t}before", "1")  # (the application's first: nodes known)
            await client.set("lock:{t}held", "someone-else")
            node = client.get_node_from_key("{t}")
            connection = node.acquire_connection()
            await connection.send_packed_command(connection.pack_commands(pipeline))
            async with AsyncLock("{t}guarded", provider="acluster", ttl=5):
                pass  # (the library's first call: the nodes are guarded)
            assert await connection.read_response() == b"OK"  # (then cut)
            release = getattr(node, "release", None)  # (redis-py 5.x puts it back so)
            release(connection) if release is not None else node._free.append(connection)
            with pytest.raises(LockNotAcquired):
                async with AsyncLock("{t}held", provider="acluster", ttl=5, wait=0):
                    pass  # (not inside on the pipeline's replies)
            assert await client.set("{t}after", "yes") is True
            assert await client.get("{t}after") == b"yes"
        finally:
            register_provider("acluster", cluster.url)
            await client.aclose()

    asyncio.run(scenario())


def test_an_asyncio_cluster_lock_with_replicas_and_none_there_is_refused(
    cluster: LocalCluster,
) -> None:
    """Review 53, R53-3: on redis-py 5.x an asyncio cluster node has no ``release``, and the
    replicated attempt's give-back raised AttributeError in place of its outcome (and kept
    the connection out for good). The local cluster has no replicas: refused, too few
    copies, and the key given back."""
    port = cluster.servers[0].port

    async def scenario() -> None:
        client = redis.asyncio.RedisCluster(host="127.0.0.1", port=port)
        register_provider("acluster", lambda: client)
        try:
            for _ in range(2):  # (the connection is back for the second)
                with pytest.raises(LockNotAcquired):
                    async with AsyncLock("{t}copied", provider="acluster", ttl=5, wait=0,
                                         replicas=1):  # fmt: skip
                        pass
            assert await client.get("lock:{t}copied") is None
        finally:
            register_provider("acluster", cluster.url)
            await client.aclose()

    asyncio.run(scenario())


def test_async_cluster_client(cluster: LocalCluster) -> None:
    port = cluster.servers[0].port
    register_provider("acluster", lambda: redis.asyncio.RedisCluster(host="127.0.0.1", port=port))

    counted: list[int] = []

    # ttl 3 s: a renewal due every second. CI's slow leg runs this beside tests of 64-125
    # processes, and with ttl 0.3 s and then 1 s a renewal came too late there (not under
    # four CPU-bound processes here, nor alone).
    @limited("exports:{tenant}", limit=2, provider="acluster", ttl=3.0)
    async def export(tenant: str, both_counted: asyncio.Event) -> int:
        await asyncio.sleep(6.5)  # past two ttls: renewed on the cluster
        count = await AsyncSemaphore(f"exports:{tenant}", limit=2, provider="acluster").holders()
        counted.append(count)
        if len(counted) == 2:
            both_counted.set()
        await both_counted.wait()  # neither leaves before both have looked
        return count

    async def scenario() -> None:
        try:
            both = asyncio.Event()
            assert await asyncio.gather(export("a", both), export("a", both)) == [2, 2]
            async with AsyncLock("alock", provider="acluster") as lock:
                assert await lock.owned()
        finally:  # a failure here left 29 sockets for the next test's warnings check
            await providers.async_target("acluster").client.aclose()

    asyncio.run(scenario())


class SlotMove:
    """Moves the slot of ``key`` to the next master as redis-cli's reshard does -- importing
    and migrating marks, then MIGRATE of its keys -- in two halves: ``start(first)`` moves
    only the keys named (the slot's keys are split between two nodes), ``finish()`` the rest
    and gives the slot to its new node."""

    def __init__(self, cluster: LocalCluster, key: str) -> None:
        self.nodes = [server.client(decode_responses=True) for server in cluster.servers]
        self.ports = [server.port for server in cluster.servers]
        self.ids = [node.cluster("MYID") for node in self.nodes]
        self.slot = self.nodes[0].cluster("KEYSLOT", key)
        owner = next(
            span[2][1]
            for span in self.nodes[0].execute_command("CLUSTER", "SLOTS")
            if span[0] <= self.slot <= span[1]
        )
        self.source = self.ports.index(owner)
        self.target = (self.source + 1) % len(self.nodes)

    def start(self, first: list[str]) -> None:
        source, target = self.nodes[self.source], self.nodes[self.target]
        target.cluster("SETSLOT", self.slot, "IMPORTING", self.ids[self.source])
        source.cluster("SETSLOT", self.slot, "MIGRATING", self.ids[self.target])
        for key in first:
            self._migrate([key])

    def finish(self) -> None:
        self._migrate(self.nodes[self.source].cluster("GETKEYSINSLOT", self.slot, 100))
        for node in self.nodes:
            node.cluster("SETSLOT", self.slot, "NODE", self.ids[self.target])

    def finish_in(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self.finish)
        timer.start()
        return timer

    def _migrate(self, keys: list[str]) -> None:
        if keys:
            port = self.ports[self.target]
            self.nodes[self.source].execute_command(
                "MIGRATE", "127.0.0.1", port, "", 0, 5000, "REPLACE", "KEYS", *keys
            )

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def test_a_release_while_its_slot_migrates_waits_for_the_move(
    cluster: LocalCluster, cluster_client: redis.RedisCluster
) -> None:
    """Review 33: the lock's slot was being moved (its key on the new node, its queue and
    fence still on the old one), and the release of a completed body raised ClusterError
    ("TTL exhausted.") after redis-py's 0.1 s of TRYAGAIN: the caller saw a failure, and the
    lock was left to its ttl. The scripts touch several keys of the slot, which the
    importing node refuses while they are split; the library sends them again meanwhile."""
    with Lock("moving", provider="cluster", ttl=5, fencing=True):
        pass  # the fence counter now exists: the next acquire touches a key that is there
    move = SlotMove(cluster, "lock:moving")
    try:
        with Lock("moving", provider="cluster", ttl=5, fencing=True):
            move.start(["lock:moving"])  # the lock on the new node, the fence on the old
            timer = move.finish_in(0.3)
            started = time.monotonic()
        took = time.monotonic() - started
        timer.join(5)
        assert 0.25 < took < MIGRATION_PATIENCE, took
        assert not cluster_client.exists("lock:moving")
        move.close()
        move = SlotMove(cluster, "lock:moving")  # and back, while an acquire runs
        move.start(["{lock:moving}:fence"])
        timer = move.finish_in(0.3)
        lock = Lock("moving", provider="cluster", ttl=5, fencing=True)
        assert lock.acquire(blocking=False)  # sent again until the move ended: taken
        lock.release()
        timer.join(5)
    finally:
        move.close()


def test_a_slot_migrating_for_long_does_not_hold_up_other_renewals(
    cluster: LocalCluster, cluster_client: redis.RedisCluster
) -> None:
    """Review 34, 03: a slot marked migrating refuses our scripts as long as any of their
    keys is missing there (the queue, the fence: nearly always), before any key moves. A
    renewal refused so waited its 2 s of patience on the renewal thread, which renews every
    lease of the target one at a time, and a lease on another node, nothing to do with the
    move, was lost. Renewals are not sent again: the refused one tries at its next round."""
    stuck_home = cluster_client.get_node_from_key("lock:stuck").port
    calm = next(
        f"calm{i}"
        for i in range(100)
        if cluster_client.get_node_from_key(f"lock:calm{i}").port != stuck_home
    )
    lost: list[str] = []
    move = SlotMove(cluster, "lock:stuck")
    try:
        with Lock("stuck", provider="cluster", ttl=1.5, on_lost=lambda *_: lost.append("stuck")):
            move.start([])  # marked migrating; no key moved
            with Lock(calm, provider="cluster", ttl=0.6, on_lost=lambda *_: lost.append(calm)):
                time.sleep(2.0)  # several renewals of each, the stuck ones refused
                assert cluster_client.pttl(f"lock:{calm}") > 0
            move.finish()
    except LockLost:
        pass  # the stuck lease may be lost: its slot refused it past its ttl (as documented)
    finally:
        move.close()
    assert calm not in lost, lost


@pytest.mark.parametrize("kind", ["reader", "semaphore"])
def test_a_release_that_empties_a_migrating_slots_key_runs_to_its_end(
    cluster: LocalCluster, cluster_client: redis.RedisCluster, kind: str
) -> None:
    """Review 35, 06: with every key of a lock on the old node of a slot being moved, the
    script runs there -- and Redis refuses its command on a key the script itself emptied
    (the last reader's or holder's sorted set), keeping its earlier writes: the completed
    body's exit raised ResponseError("...non local key..."), the key still said SHARED, and
    the queued writer was not served. Now the release runs to its end; the writer, its
    grant's write refused, gets the lock at its next check once the move is over."""
    name = "{mv}rw" if kind == "reader" else "{mv}sem"

    def holding(wait: float | None = None) -> Lock | Semaphore:
        if kind == "reader":
            return Lock(name, provider="cluster", ttl=10, shared=True, wait=wait)
        return Semaphore(name, limit=1, provider="cluster", ttl=10, wait=wait)

    def exclusive(wait: float) -> Lock | Semaphore:
        if kind == "reader":
            return Lock(name, provider="cluster", ttl=10, wait=wait)
        return holding(wait)

    served: list[float] = []

    def writer() -> None:
        with exclusive(30):
            served.append(time.monotonic())

    move = SlotMove(cluster, "{mv}")
    first = holding()
    first.acquire()
    waiting = threading.Thread(target=writer)
    try:
        waiting.start()
        source = move.nodes[move.source]
        deadline = time.monotonic() + 5
        while not any(key.endswith(":queue") for key in source.keys("*")):
            assert time.monotonic() < deadline, "the writer never queued"
            time.sleep(0.01)
        move.start([])  # marked migrating, no key moved: the scripts run on the old node
        first.release()  # raised ResponseError: "Script attempted to access a non local key"
        for node in move.nodes:
            node.cluster("SETSLOT", move.slot, "STABLE")  # the move called off
        ended = time.monotonic()
        waiting.join(10)
    finally:
        for node in move.nodes:
            node.cluster("SETSLOT", move.slot, "STABLE")
        move.close()
    assert served, "the writer was never served"
    assert served[0] - ended < 2.0  # its next check, not the first holder's ttl (10 s)


def test_the_simulators_migrating_slot_answers_as_a_real_one(
    cluster: LocalCluster, cluster_client: redis.RedisCluster
) -> None:
    """The simulator's model of a script on a slot being moved (tests/simulation/store.py,
    ``Store.migrating``), against a real one: every key there when the script starts, one
    of them emptied by the script itself; which commands on it are refused ("non local
    key") and which are not. (Redis 6.2, 7 and Valkey word the error differently; the
    scripts look for "non local key", in all three.)"""
    from simulation.store import Error, Store

    probes = ["GET {s}k", "ZSCORE {s}z a", "ZCARD {s}z", "ZRANGE {s}z 0 0", "ZPOPMIN {s}z",
              "ZREM {s}z a", "ZREMRANGEBYSCORE {s}z -inf 5", "PTTL {s}z", "EXISTS {s}z",
              "DEL {s}z", "PEXPIRE {s}z 100", "ZADD {s}z 1 b", "SET {s}z v", "GET {s}q",
              "ZCARD {s}q", "TIME", "PUBLISH ch m"]  # fmt: skip
    body = "redis.call('ZREM', KEYS[2], 'a'); redis.call('DEL', KEYS[1]); local out = {}\n"
    for i, probe in enumerate(probes):
        words = ", ".join(f"'{w}'" for w in probe.replace("{s}k", "KEYS[1]").split())
        words = words.replace("'KEYS[1]'", "KEYS[1]").replace("'{s}z'", "KEYS[2]")
        words = words.replace("'{s}q'", "KEYS[3]")
        body += (f"local r{i} = redis.pcall({words}); out[{i + 1}] = (type(r{i}) == 'table' "
                 f"and r{i}.err and string.find(r{i}.err, 'non local key', 1, true)) "
                 f"and 'refused' or 'ran'\n")  # fmt: skip
    body += "return out"
    keys = ["{s}k", "{s}z", "{s}q"]

    move = SlotMove(cluster, "{s}")
    try:
        source = move.nodes[move.source]
        source.set("{s}k", "v")
        source.zadd("{s}z", {"a": 1})
        source.zadd("{s}q", {"w": 1})
        move.start([])
        real = source.eval(body, 3, *keys)
    finally:
        for node in move.nodes:
            node.cluster("SETSLOT", move.slot, "STABLE")
        move.close()

    store = Store(lambda: 1_700_000_000_000_000)
    store.migrating = True
    for args in (["SET", "{s}k", "v"], ["ZADD", "{s}z", "1", "a"], ["ZADD", "{s}q", "1", "w"]):
        store.execute(args)
    simulated = store.execute(["EVAL", body, "3", *keys])
    assert not isinstance(simulated, Error), simulated
    assert [x.decode() for x in simulated] == list(real), dict(zip(probes, real, strict=True))


def test_an_asyncio_release_while_its_slot_migrates_waits_for_the_move(
    cluster: LocalCluster, cluster_client: redis.RedisCluster
) -> None:
    port = cluster.servers[0].port
    register_provider("acluster", lambda: redis.asyncio.RedisCluster(host="127.0.0.1", port=port))

    async def scenario() -> float:
        async with AsyncLock("amoving", provider="acluster", ttl=5, fencing=True):
            pass
        move = SlotMove(cluster, "lock:amoving")
        try:
            async with AsyncLock("amoving", provider="acluster", ttl=5, fencing=True):
                move.start(["lock:amoving"])
                timer = move.finish_in(0.3)
                started = time.monotonic()
            took = time.monotonic() - started
            timer.join(5)
            return took
        finally:
            move.close()
            await providers.async_target("acluster").client.aclose()

    took = asyncio.run(scenario())
    # redis.asyncio's cluster client drops the node objects a slot move replaced without
    # closing their connections (its own leak, not ours: aclose() closes only current nodes);
    # collected here, not in whatever test the collector would otherwise pick.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    assert 0.25 < took < MIGRATION_PATIENCE, took
    assert not cluster_client.exists("lock:amoving")


def test_a_replicated_cluster_attempt_follows_a_slot_moved_or_moving(
    cluster: LocalCluster, cluster_client: redis.RedisCluster
) -> None:
    """Review 58: with replicas=N the attempt and its WAIT go to the key's node on one
    connection, where redis-py follows no redirect: after a reshard (MOVED) and during a
    move (ASK) the caller got MovedError / AskError, where replicas=0 follows them. The slot
    map is learnt again and the attempt sent again while the move lasts. (This cluster has
    no replicas: the outcome is too few copies, LockNotAcquired.)"""
    port = cluster.servers[0].port
    register_provider(
        "acluster-moved", lambda: redis.asyncio.RedisCluster(host="127.0.0.1", port=port)
    )

    async def attempt(name: str) -> None:
        try:
            with pytest.raises(LockNotAcquired):
                await AsyncLock(name, provider="acluster-moved", replicas=1, wait=0.1).acquire()
        finally:
            await providers.async_target("acluster-moved").client.aclose()

    def tried(name: str) -> None:
        if name.startswith("async"):
            asyncio.run(attempt(name))
            return
        with pytest.raises(LockNotAcquired):
            Lock(name, provider="cluster", replicas=1, wait=0.1).acquire()

    for name in ("sync-moved", "async-moved"):
        tried(name)  # (the slot map learnt)
        reshard = SlotMove(cluster, f"lock:{name}")
        reshard.start([])
        reshard.finish()
        tried(name)  # (after the reshard: MOVED)
        move = SlotMove(cluster, f"lock:{name}")
        move.start([])
        timer = move.finish_in(0.3)
        try:
            tried(name)  # (during a move: ASK, until it ends)
        finally:
            timer.join()
    assert cluster_client.dbsize(target_nodes=cluster_client.PRIMARIES) == 0


def test_a_replicated_cluster_attempt_fails_with_cluster_error_when_a_move_outlasts_patience(
    cluster: LocalCluster, cluster_client: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A move longer than the library's patience fails the call with redis-py's ClusterError
    (GUARANTEES), whichever step meets it: a replicated attempt, which meets the ASK on its
    own connection, raised AskError -- a ResponseError, which a caller catching ClusterError
    missed. Nothing is left held, sync and asyncio."""
    monkeypatch.setattr(_drivers, "MIGRATION_PATIENCE", 0.3)
    port = cluster.servers[0].port
    register_provider(
        "acluster-long-move", lambda: redis.asyncio.RedisCluster(host="127.0.0.1", port=port)
    )

    async def attempt(name: str) -> None:
        try:
            with pytest.raises(redis.exceptions.ClusterError, match="migration"):
                await AsyncLock(name, provider="acluster-long-move", replicas=1).acquire()
        finally:
            client = providers.async_target("acluster-long-move").client
            # (redis-py's: a refused command marks the client to be initialized again, and
            # its aclose() then closes nothing -- its connections were left to the collector)
            await client.initialize()
            await client.aclose()

    for name in ("sync-long-move", "async-long-move"):
        move = SlotMove(cluster, f"lock:{name}")
        move.start([])  # (never finished within the patience: ASK until then)
        try:
            started = time.monotonic()
            if name.startswith("async"):
                asyncio.run(attempt(name))
            else:
                with pytest.raises(redis.exceptions.ClusterError, match="migration"):
                    Lock(name, provider="cluster", replicas=1).acquire()
            assert time.monotonic() - started < 3
        finally:
            move.finish()
            move.close()
    assert cluster_client.dbsize(target_nodes=cluster_client.PRIMARIES) == 0


def test_cluster_replicas_are_counted_on_the_keys_node_connection(
    cluster: LocalCluster, cluster_client: redis.RedisCluster
) -> None:
    """replicas=N on a cluster: the attempt and its WAIT go to the key's node on one
    connection (this cluster has no replicas: 0 of 1 acknowledge, and the lock is given
    back), sync and asyncio."""
    port = cluster.servers[0].port
    register_provider(
        "acluster-wait", lambda: redis.asyncio.RedisCluster(host="127.0.0.1", port=port)
    )
    for name in ("w1", "w2", "w3"):
        with pytest.raises(LockNotAcquired):
            Lock(name, provider="cluster", replicas=1, wait=0.2).acquire()

        async def scenario(name: str = name) -> None:
            with pytest.raises(LockNotAcquired):
                await AsyncLock(name, provider="acluster-wait", replicas=1, wait=0.2).acquire()
            from redlock_deco import _providers as providers

            await providers.async_target("acluster-wait").client.aclose()

        asyncio.run(scenario())
    assert cluster_client.dbsize(target_nodes=cluster_client.PRIMARIES) == 0


# -- replicas=N --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    with RedisServer(args=PRIMARY_ARGS) as primary:
        replica = RedisServer(args=("--replicaof", "127.0.0.1", str(primary.port)))
        with replica:
            yield primary, replica


PRIMARY_ARGS = ("--repl-diskless-sync-delay", "0")  # no 5 s pause before the first sync


def await_replication(primary: RedisServer, replicas: int) -> None:
    """Until ``replicas`` replicas are online (synced, so WAIT can count them)."""
    deadline = time.monotonic() + 15
    while True:
        info = primary.client().info("replication")
        online = sum(
            1
            for key, value in info.items()
            if key.startswith("slave") and isinstance(value, dict) and value["state"] == "online"
        )
        if online >= replicas:
            return
        assert time.monotonic() < deadline, f"replicas not online: {info}"
        time.sleep(0.05)


@pytest.mark.parametrize("socket_timeout", [0.05, 0.3])
def test_a_slow_replica_under_a_short_socket_timeout_is_too_few_copies_not_a_timeout(
    pair: tuple[RedisServer, RedisServer], socket_timeout: float
) -> None:
    """Review 58: WAIT was given up to 1 s whatever the connection's socket timeout, so with
    ``socket_timeout`` under it a replica that did not answer raised TimeoutError at the
    first attempt, never tried again within ``wait`` and never LockNotReplicated. WAIT now
    ends in time for the socket's timeout, and a reply later still (the server ends a WAIT
    at its cron tick, up to 100 ms late: review 60) counts as no copy, sync and asyncio."""
    primary, replica = pair
    if replica.process is None:
        replica.start()
    await_replication(primary, 1)
    url = primary.url + f"?socket_timeout={socket_timeout}"
    register_provider("short", url)
    register_provider("ashort", url)
    assert replica.process is not None
    os.kill(replica.process.pid, signal.SIGSTOP)  # (connected, and answering nothing)
    probe = primary.client()
    try:
        with pytest.raises(LockNotReplicated):  # (the provider's connections made)
            Lock("warm-copy", provider="short", replicas=1, wait=0.3).acquire()
        made = probe.info("stats")["total_connections_received"]
        started = time.monotonic()
        with pytest.raises(LockNotReplicated):
            Lock("slow-copy", provider="short", replicas=1, wait=0.6).acquire()
        assert time.monotonic() - started >= 0.6  # (tried again within wait)
        if socket_timeout > WAIT_LAG_MS / 1000:
            # (each WAIT ended in time: no attempt's connection closed for a late reply)
            now = probe.info("stats")["total_connections_received"]
            assert now - made <= 1, now - made

        async def scenario() -> None:
            with pytest.raises(LockNotReplicated):
                await AsyncLock("slow-copy", provider="ashort", replicas=1, wait=0.6).acquire()

        asyncio.run(scenario())
        assert not probe.exists("lock:slow-copy")
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)
        probe.close()


def test_replicas_acknowledge_then_replica_down_fails_cleanly(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = pair
    if replica.process is None:
        replica.start()
    await_replication(primary, 1)
    register_provider("primary", primary.url)
    with Lock("safe", provider="primary", replicas=1, wait=1) as lock:
        assert lock.owned()
        assert replica.client().get("lock:safe") == primary.client().get("lock:safe")

    replica.kill()
    started = time.monotonic()

    @locked("unsafe", provider="primary", replicas=1, wait=0.5)
    def needs_a_copy() -> None: ...

    with pytest.raises(LockNotAcquired):
        needs_a_copy()
    assert time.monotonic() - started < 0.5 + 1.2  # wait + one WAIT at most
    assert not primary.client().exists("lock:unsafe")  # released: nothing held on the primary
    replica.start()
    await_replication(primary, 1)


def test_readers_wait_for_replicas_too(pair: tuple[RedisServer, RedisServer]) -> None:
    primary, replica = pair
    if replica.process is None:
        replica.start()
    await_replication(primary, 1)
    register_provider("primary", primary.url)
    with Lock("report", provider="primary", shared=True, replicas=1, wait=1) as lock:
        assert lock.owned()
        copy = replica.client()
        assert copy.get("lock:report") == b"redlock-deco:shared"
        assert copy.zrange("{lock:report}:readers", 0, -1) == primary.client().zrange(
            "{lock:report}:readers", 0, -1
        )
    replica.kill()
    with (
        pytest.raises(LockNotAcquired),
        Lock("report", provider="primary", shared=True, replicas=1, wait=0.5),
    ):
        pass
    # The share too few replicas acknowledged was given back: nothing held on the primary.
    assert not primary.client().exists("lock:report", "{lock:report}:readers")
    replica.start()
    await_replication(primary, 1)


class FifoPool(redis.ConnectionPool):
    """Hands out the connection idle longest (redis-py's pool hands out the last returned):
    what another thread taking the last returned connection in between does to a caller."""

    def get_connection(self, *args: object, **kwargs: object) -> redis.Connection:
        with self._lock:
            if len(self._available_connections) > 1:
                self._available_connections.insert(0, self._available_connections.pop())
        return super().get_connection(*args, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_replicas_are_counted_on_the_connection_that_carried_the_acquire(flavour: str) -> None:
    """Finding c01: WAIT counts the calling connection's writes only. Sent on another
    pooled connection, whose last write the replica had acknowledged, it "confirmed" an
    acquisition the replica never saw (cut off here): after a failover a second caller
    would take the lock. The WAIT must go on the acquire's own connection."""
    from redlock_deco.testing import FaultProxy

    with RedisServer(args=PRIMARY_ARGS) as primary, FaultProxy(primary.port) as link:
        replica = RedisServer(args=("--replicaof", "127.0.0.1", str(link.port)))
        with replica:
            await_replication(primary, 1)
            if flavour == "sync":
                pool = FifoPool.from_url(primary.url)
                client = redis.Redis(connection_pool=pool)
                # Two pooled connections that never wrote: WAIT there counts every replica
                # still attached, however far behind.
                first, second = checkout(pool, []), checkout(pool, [])
                for conn in (first, second):
                    conn.send_command("PING")
                    assert conn.read_response() in (b"PONG", "PONG")
                pool.release(first)
                pool.release(second)
                link.stall()  # the replica acknowledges nothing from now on
                register_provider("fifo", client)
                with pytest.raises(LockNotAcquired):  # LockNotReplicated, 0 of 1
                    Lock("copied", provider="fifo", replicas=1, wait=0.3).acquire()
            else:
                link.stall()

                async def scenario() -> None:
                    client = redis.asyncio.Redis.from_url(primary.url)
                    register_provider("afifo", client)
                    try:
                        lock = AsyncLock("copied", provider="afifo", replicas=1, wait=0.3)
                        with pytest.raises(LockNotAcquired):
                            await lock.acquire()
                    finally:
                        await client.aclose()

                asyncio.run(scenario())
            assert not primary.client().exists("lock:copied")  # given back: too few copies
            link.heal()


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_wait_re_sent_on_a_new_connection_confirms_nothing(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review 10, 01: the acquire's connection reset as WAIT went out; the URL client's retry
    reconnected and sent WAIT again on a socket that had written nothing, where Valkey counts
    every replica at once: an acquisition no replica had (the link is stalled here) was
    confirmed. A WAIT whose connection was replaced since the attempt confirms nothing."""
    from redlock_deco.testing import FaultProxy

    cuts: list[str] = []

    def at_wait(command: object) -> bool:
        parts = command if isinstance(command, (list, tuple)) else [command]
        return not cuts and any(b"WAIT" in bytes(part) for part in parts)  # type: ignore[call-overload]

    sync_send = redis.Connection.send_packed_command
    async_send = redis.asyncio.Connection.send_packed_command

    def cut_sync(self: redis.Connection, command: object, check_health: bool = True) -> None:
        if at_wait(command):
            cuts.append("WAIT")
            self.disconnect()  # as a reset: the retry reconnects and sends WAIT again
            raise redis.exceptions.ConnectionError("reset at WAIT (test)")
        sync_send(self, command, check_health)  # type: ignore[arg-type]

    async def cut_async(
        self: redis.asyncio.Connection, command: object, check_health: bool = True
    ) -> None:
        if at_wait(command):
            cuts.append("WAIT")
            await self.disconnect()
            raise redis.exceptions.ConnectionError("reset at WAIT (test)")
        await async_send(self, command, check_health)  # type: ignore[arg-type]

    with (
        RedisServer(args=PRIMARY_ARGS) as primary,
        FaultProxy(primary.port) as link,
        RedisServer(args=("--replicaof", "127.0.0.1", str(link.port))),
    ):
        await_replication(primary, 1)
        link.stall()  # the replica acknowledges nothing from now on
        register_provider("cut", primary.url)  # a URL client: its retry sends again
        monkeypatch.setattr(redis.Connection, "send_packed_command", cut_sync)
        monkeypatch.setattr(redis.asyncio.Connection, "send_packed_command", cut_async)
        if flavour == "sync":
            with pytest.raises(LockNotAcquired):  # LockNotReplicated, 0 of 1
                Lock("recut", provider="cut", replicas=1, wait=0).acquire()
        else:

            async def scenario() -> None:
                with pytest.raises(LockNotAcquired):
                    await AsyncLock("recut", provider="cut", replicas=1, wait=0).acquire()

            asyncio.run(scenario())
        assert cuts == ["WAIT"]
        assert not primary.client().exists("lock:recut")  # given back
        link.heal()


# -- Sentinel ----------------------------------------------------------------------------


def test_sentinel_failover_then_new_acquisitions_succeed() -> None:
    with RedisServer(args=PRIMARY_ARGS) as primary, RedisServer() as replica:
        replica.client().replicaof("127.0.0.1", primary.port)
        await_replication(primary, 1)
        with LocalSentinels(primary, service="mymaster") as sentinels:
            watcher = sentinels.client(socket_timeout=1)
            register_provider("ha", watcher.master_for("mymaster", socket_timeout=1))
            with Lock("before", provider="ha") as lock:
                assert lock.owned()
            assert sentinels.failover() == replica.port
            assert watcher.discover_master("mymaster") == ("127.0.0.1", replica.port)
            deadline = time.monotonic() + 15
            acquired = False
            while not acquired:  # the first call may meet the demoted primary once
                try:
                    with Lock("after", provider="ha", wait=1) as lock:
                        acquired = lock.owned()
                except (redis.exceptions.ConnectionError, redis.exceptions.ReadOnlyError):
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert replica.client().info("replication")["role"] == "master"


def test_a_sentinel_client_with_client_side_caching_hands_a_freed_lock_on_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review 48, H1: a Sentinel's ``master_for(..., cache_config=...)`` client subscribed
    through the cache's connection proxy, which redis-py's PubSub cannot read (8.1:
    AttributeError): every waiter polled, 2 s for a lock held 0.1 s. Its subscription has
    an uncached pool of its own, its connections still found through the sentinels."""
    with RedisServer() as primary, LocalSentinels(primary, service="mymaster") as sentinels:
        caching_allowed(primary, monkeypatch)  # (skipped before redis-py 5.1)
        from redis.cache import CacheConfig

        watcher = sentinels.client(socket_timeout=1)
        client = watcher.master_for(
            "mymaster", socket_timeout=1, protocol=3, cache_config=CacheConfig()
        )
        register_provider("default", client)
        try:
            for _ in range(2):  # (the first subscribes)
                took = handed_within(0.1)
                assert took is not None and took < 0.6, took
        finally:
            register_provider("default", primary.url)
            client.close()


def test_several_names_across_cluster_slots(cluster_client: redis.RedisCluster) -> None:
    @locked("acct:{src}", "acct:{dst}", provider="cluster", ttl=5)
    def transfer(src: str, dst: str) -> int:
        return int(cluster_client.exists("lock:acct:1")) + int(cluster_client.exists("lock:acct:9"))

    slots = {cluster_client.keyslot(f"lock:acct:{n}") for n in (1, 9)}
    assert len(slots) == 2  # really two slots
    assert transfer("9", "1") == 2
    assert cluster_client.dbsize(target_nodes=cluster_client.PRIMARIES) == 0


def test_names_with_a_stray_brace_work_on_a_cluster(cluster_client: redis.RedisCluster) -> None:
    @locked("cfg:{opts}", provider="cluster", ttl=5)
    def configure(opts: object) -> bool:
        return bool(cluster_client.exists("lock:cfg:{}"))

    assert configure({})  # renders "cfg:{}": an empty tag, so the whole key is hashed
    with Lock("a}b", provider="cluster", ttl=5) as lock:
        assert lock.owned()
    assert cluster_client.dbsize(target_nodes=cluster_client.PRIMARIES) == 0


@pytest.mark.timeout(120)
def test_a_cluster_grant_subscription_cut_as_it_closes_never_closes_a_connection_in_use(
    cluster: LocalCluster,
) -> None:
    """test_waiting's cut at each line of a grant subscription's close, on a cluster: a
    cluster's subscription picks its node's pool at its SUBSCRIBE, after it was made, so it
    had no pool that forgets first, and redis-py's PubSub.reset hole stayed open there
    (review 94b's note)."""
    every_cut(cluster.client)

"""The least-privilege ACL (``redlock_deco.acl``) on a real server: every key layout the
library writes works under it with no NOPERM, and it really restricts.

The rules come from one function, which GUARANTEES.md shows verbatim (checked below), so the
documented ACL cannot drift from the code again: it once missed the waiter keys of names with
a stray ``}`` (``{s123}:lock:...``), and every call on such a name failed with NOPERM.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redlock_deco import Lock, Semaphore, Throttle, limited, locked, register_provider
from redlock_deco._protocol import sibling
from redlock_deco.acl import acl_rules, acl_setuser
from redlock_deco.testing import LocalCluster, RedisServer

USER, PASSWORD = "locker", "locks-only"
CUSTOM = "app}{[1]*?:"  # a custom prefix with braces and every glob special in it
# Every shape a name can give its key (see protocol.sibling): no braces, its own {tag}, a
# stray '}', a '{' never closed, an empty tag '{}', and '}' before '{'.
NAMES = ["order:7", "{user1}:cart", "smiley :}", "half{open", "{}empty", "a}b{c}", "x}{"]
SUFFIXES = ("queue", "limit", "fence")
# Refusals the library meets on purpose and lives with: redis-py's connection handshake on
# Redis 7.2+ (ignored by redis-py), and the one-time eviction check (silent when refused:
# CONFIG GET would expose every setting, passwords included).
# Redis 6.2 logs the command alone ("client", "config") where 7 names the subcommand.
TOLERATED = {"client|setinfo", "config|get", "client", "config"}


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client(decode_responses=True)
    client.acl_log_reset()
    yield client
    client.close()


@pytest.fixture
def least(server: RedisServer, admin: redis.Redis) -> Iterator[str]:
    """The restricted user, registered as provider "least"; its refusals checked at the end."""
    rules = acl_rules(("lock:", "sem:", "throttle:", CUSTOM))
    admin.execute_command("ACL", "SETUSER", USER, "on", f">{PASSWORD}", *rules)
    url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{server.port}/0"
    register_provider("least", url)
    yield url
    refused = [entry for entry in admin.acl_log() if entry["username"] == USER]
    admin.execute_command("ACL", "DELUSER", USER)
    assert {entry["object"] for entry in refused} <= TOLERATED, refused


def until(condition: Callable[[], object], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition never met"
        time.sleep(0.005)


def in_thread(action: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=action)
    thread.start()
    return thread


def contend(make: Callable[..., Any], key: str, admin: redis.Redis) -> None:
    """Busy, a waiter that gives up, then one the release hands the lease to: every waiting
    script, the queue, the grant (PUBLISH on the waiter's channel) and the subscription that
    hears it run under the restricted user."""
    holder = make()
    assert holder.acquire() and holder.owned() and holder.locked()
    holder.extend()
    outcomes: list[Any] = []
    in_thread(lambda: outcomes.append(make(wait=0).acquire())).join()  # busy, never joins
    in_thread(lambda: outcomes.append(make(wait=0.05).acquire())).join()  # joins, gives up
    checked = threading.Event()

    def woken() -> None:
        second = make(wait=5)
        outcomes.append(second.acquire())
        checked.wait(5)  # hold it until the hand-off was looked at
        second.release()

    waiter = in_thread(woken)
    queue = sibling(key, "queue")
    until(lambda: admin.exists(queue))  # it waits in Redis now (queued only once listening)
    [entry] = admin.zrange(queue, 0, -1)
    # The queue entry is the waiter's token and its terms, in the watcher's own type.
    queued = entry.split(b"|" if isinstance(entry, bytes) else "|")[0]
    holder.release()  # hands it over: its token in the lease, a grant on its channel
    if admin.type(key) in ("string", b"string"):
        handed = admin.get(key) == queued
    else:
        handed = admin.zscore(key, queued) is not None
    until(lambda: len(outcomes) == 3)
    checked.set()
    waiter.join(5)
    assert outcomes == [False, False, True] and handed


@pytest.mark.parametrize("prefix", ["lock:", CUSTOM])
@pytest.mark.parametrize("fencing", [False, True], ids=["plain", "fenced"])
@pytest.mark.parametrize("name", NAMES)
def test_locks_of_every_layout_run_under_the_acl(
    least: str, admin: redis.Redis, name: str, fencing: bool, prefix: str
) -> None:
    def make(wait: float = 5) -> Lock:
        return Lock(name, provider="least", prefix=prefix, ttl=5, wait=wait, fencing=fencing)

    contend(make, prefix + name, admin)


@pytest.mark.parametrize("prefix", ["sem:", CUSTOM])
@pytest.mark.parametrize("name", NAMES)
def test_semaphores_of_every_layout_run_under_the_acl(
    least: str, admin: redis.Redis, name: str, prefix: str
) -> None:
    def make(wait: float = 5) -> Semaphore:
        return Semaphore(name, limit=1, provider="least", prefix=prefix, ttl=5, wait=wait)

    contend(make, prefix + name, admin)
    assert make().holders() == 0


def test_decorators_several_names_and_renewal_under_the_acl(least: str, r: redis.Redis) -> None:
    @locked("acct:{src}", "acct:{dst}", provider="least", ttl=0.3, fencing=True)
    def transfer(src: str, dst: str) -> str:
        time.sleep(0.5)  # outlasts the ttl: renewals run under the restricted user
        return f"{src}->{dst}"

    @limited("export:{tenant}", limit=2, provider="least", ttl=0.3)
    def export(tenant: str) -> str:
        time.sleep(0.5)
        return tenant

    assert transfer("{a}", "b}") == "{a}->b}"
    assert export("smiley :}") == "smiley :}"
    # Fencing counters are kept (7 days) on purpose; everything else is gone.
    assert all(key.endswith(b":fence") for key in r.keys("*"))


@pytest.mark.parametrize("prefix", ["throttle:", CUSTOM])
@pytest.mark.parametrize("name", NAMES)
def test_throttles_of_every_layout_run_under_the_acl(
    least: str, admin: redis.Redis, name: str, prefix: str
) -> None:
    limiter = Throttle(name, rate=1, per=0.2, burst=1, wait=None, provider="least", prefix=prefix)
    assert limiter.acquire() and limiter.acquire()  # the second reserved its slot and slept
    assert not limiter.acquire(wait=0)
    assert admin.exists(prefix + name) == 1
    until(lambda: admin.exists(prefix + name) == 0)  # expires as its slots come


def test_the_acl_refuses_everything_else(least: str, admin: redis.Redis) -> None:
    restricted = redis.Redis.from_url(least)
    for refused in (
        lambda: restricted.get("payments:secret"),  # outside the prefixes
        lambda: restricted.set("{s1}:payments", 1),  # a slot tag, but not of our prefix
        lambda: restricted.sadd("lock:x", "v"),  # our prefix, a command we never use
        lambda: restricted.keys("*"),
        lambda: restricted.flushall(),
        lambda: restricted.config_get("*"),
        lambda: restricted.publish("lock:x", "hi"),  # not a hand-off channel
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            refused()
    assert restricted.publish("redlock-deco:host:1:0a1b2c3d", "t") == 0  # hand-offs: granted
    restricted.close()
    admin.acl_log_reset()  # these refusals were the point: keep them out of the final check


def test_guarantees_md_shows_the_rules() -> None:
    text = (Path(__file__).resolve().parents[2] / "GUARANTEES.md").read_text()
    block = re.search(r"```\s*\n\s*(ACL SETUSER .*?)```", text, re.DOTALL)
    assert block and " ".join(block[1].split()) == acl_setuser()


ACL_CASES = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@ACL_CASES
@given(
    prefix=st.sampled_from(["lock:", "sem:", CUSTOM, "{app}:", "p}"]),
    name=st.text(alphabet="{}ab:s1*?[] ", max_size=10),
)
def test_every_key_of_any_name_is_granted(admin: redis.Redis, prefix: str, name: str) -> None:
    """ACL DRYRUN (Redis >= 7) asks the server itself: are the lease key and all its
    bookkeeping keys granted, for any name, under any prefix?"""
    try:  # asked of the server itself: version numbers differ between Redis and Valkey
        admin.execute_command("ACL", "DRYRUN", "default", "PING")
    except redis.ResponseError as error:
        pytest.skip(f"no ACL DRYRUN on this server ({error}); the layout tests above cover it")
    admin.execute_command("ACL", "SETUSER", "dry", "on", ">x", *acl_rules([prefix]))
    try:
        key = prefix + name
        for each in (key, *(sibling(key, suffix) for suffix in SUFFIXES)):
            assert admin.execute_command("ACL", "DRYRUN", "dry", "GET", each) == "OK", each
        assert admin.execute_command("ACL", "DRYRUN", "dry", "GET", "other" + key) != "OK"
    finally:
        admin.execute_command("ACL", "DELUSER", "dry")


@pytest.mark.slow
def test_cluster_rules_cover_a_cluster_client() -> None:
    """``cluster=True``: redis-py's cluster client starts and runs every layout (a stray '}'
    name's queue lives on its own slot's node) under the restricted user; hand-offs are
    published cluster-wide."""
    with LocalCluster(masters=3) as cluster:
        nodes = [server.client(decode_responses=True) for server in cluster.servers]
        for node in nodes:
            node.execute_command("ACL", "SETUSER", USER, "on", f">{PASSWORD}",
                                 *acl_rules(cluster=True))  # fmt: skip
        client = cluster.client(username=USER, password=PASSWORD)
        watcher = cluster.client()
        register_provider("least", client)
        try:
            for name in ("smiley :}", "{user1}:cart", "order:7"):
                contend(lambda wait=5, n=name: Lock(n, provider="least", ttl=5, wait=wait),
                        "lock:" + name, watcher)  # fmt: skip
                with Semaphore(name, limit=2, provider="least"):
                    pass
            refused = [e for node in nodes for e in node.acl_log() if e["username"] == USER]
            assert {entry["object"] for entry in refused} <= TOLERATED, refused
        finally:
            for each in (client, watcher, *nodes):
                each.close()

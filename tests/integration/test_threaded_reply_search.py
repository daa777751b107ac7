"""The reply search (test_reply_search.py) with the application's threads sharing one client.

Two reviews in a row found a reply read by the wrong command only with threads: the
library's first call guarded a pool while another thread moved a connection between the
pool's lists (review 57), and a connection marked as checked out went back through a release
begun before the guard (review 58). The single-threaded search cannot meet those: nothing
else runs while its steps do. Here several threads each run a seeded sequence of the
reply search's steps -- each with its own keys, lock, lists and channel, so that its model of
what its keys hold is its own -- on the one client the library also sends through, and the
library's first call lands amid the others' commands, some of them cut short. Every reply
must still be its own command's (each run checks its own, as in the search), and afterwards
no idle connection that counts no reply owed has one waiting, and the server has received
no more connections than the cuts and the threads explain.

Threads interleave as the machine schedules them: a seed replays the steps each thread
takes, not their interleaving. A failure prints the seed and every thread's last steps.
"""

from __future__ import annotations

import threading
import traceback

import pytest
import redis
from support.caching import caching_allowed
from support.replies import NOT_A_NUMBER, searching, seeds
from test_reply_search import Run, client_for, connections

import redlock_deco
from redlock_deco import Lock, LockNotAcquired
from redlock_deco.testing import RedisServer

THREADS = 3
STEPS = 50  # per thread
# Not "health": its injected PING failure is one flag for the process, not a thread's. Not
# the pooled client-side caching kinds: redis-py's cache hit reads the invalidations waiting
# on the connection that fetched the entry -- another thread's, in the middle of its own
# command -- and takes that command's reply (a GET raised another thread's INCR error, and
# the INCR timed out waiting). redis-py's, with or without the library; the library's own
# commands go around the cache on such a client (_pools.uncached). A single-connection
# client's drain runs under its one lock, and stays.
KINDS = ["plain", "traced", "resp3", "single", "cached-single"]


def search(server: RedisServer, kind: str, seed: int) -> None:
    client = client_for(server, kind, seed)
    probe = server.client()
    runs = [
        Run(seed * THREADS + n, client, server.client(), kind, prefix=f"t{n}:")
        for n in range(THREADS)
    ]
    for run in runs:
        # (checked once at the end: a look at the idle connections while other threads
        # check them out and write on them would see their replies on the way)
        run.check_idle = False
    failures: list[str] = []
    start = threading.Barrier(THREADS + 1, timeout=10)

    def work(run: Run) -> None:
        try:
            start.wait()
            for _ in range(STEPS):
                run.step()
        except BaseException:  # (a thread's own: reported by the test)
            failures.append(f"{run.prefix}\n{traceback.format_exc()}")

    threads = [threading.Thread(target=work, args=(run,), daemon=True) for run in runs]
    try:
        probe.flushall()
        probe.set(NOT_A_NUMBER, "x")
        probe.set("lock:held", "someone-else")
        if seed % 2:
            # The application's connections first, made before the library sees the client.
            assert client.get("t0:k0") is None
            assert client.pipeline().get("t1:k1").execute() == [None]
        redlock_deco.register_provider("default", client)
        before = connections(server)
        for thread in threads:
            thread.start()
        start.wait()
        # The library's first call on the client, amid the threads' own commands (a thread's
        # lock step may come first).
        with pytest.raises(LockNotAcquired), Lock("held", ttl=5, wait=0.2):
            pass
        for thread in threads:
            thread.join(120)
        assert not any(thread.is_alive() for thread in threads), "a thread never finished"
        assert not failures, "\n".join(failures)
        runs[0].nothing_waits_unowed()
        made = connections(server) - before
        cuts = sum(run.cuts for run in runs)
        # Beside the cuts' (see the search), each thread may need connections of its own at
        # once: a command, a pipeline, a subscription's, the library's.
        assert made <= 2 * cuts + 4 * THREADS + 4, f"{made} connections for {cuts} cuts"
    except BaseException:
        print(f"seed {seed} ({kind}), REDLOCK_DECO_SEED={seed} replays each thread's steps:")
        for run in runs:
            print(f"-- thread {run.prefix}")
            print("\n".join(run.log[-12:]))
        raise
    finally:
        redlock_deco.register_provider("default", server.url)
        for run in runs:
            run.end()
            run.probe.close()
        probe.close()
        client.close()


@searching(KINDS)
def test_threads_sharing_a_client_each_read_their_own_replies(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch, kind: str, runs: int
) -> None:
    """See the module; the kinds of client: test_reply_search's ``client_for``."""
    if kind.startswith("cached"):
        caching_allowed(server, monkeypatch)
    if kind.endswith("single") and not hasattr(redis.Redis(), "single_connection_lock"):
        pytest.skip("redis-py < 5.1: the library refuses such a client (it has no lock)")
    for seed in seeds(max(1, runs // 6)):
        search(server, kind, seed)

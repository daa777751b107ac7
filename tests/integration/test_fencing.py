"""fencing=True: each acquisition of a name gets a token strictly greater than every earlier
one -- across processes, across lease expiry, even after the counter key itself is gone."""

from __future__ import annotations

import itertools
import multiprocessing

import pytest
import redis
from support import workers
from support.dropped import warns_dropped
from support.flavours import Api

from redlock_deco import Lock, ProviderError, current_lease, locked, register_provider
from redlock_deco.testing import RedisServer

spawn = multiprocessing.get_context("spawn")


@pytest.mark.slow
def test_tokens_increase_strictly_across_processes(server: RedisServer, r: redis.Redis) -> None:
    with spawn.Pool(3) as pool:
        pool.starmap(workers.fenced_appender, [(server.url, 20)] * 3)
    tokens = [int(t) for t in r.lrange("fence-log", 0, -1)]
    assert len(tokens) == 60
    assert all(a < b for a, b in itertools.pairwise(tokens))  # in lock order


def test_tokens_increase_across_expiry_and_a_lost_counter(api: Api, r: redis.Redis) -> None:
    seen: list[int] = []

    async def body() -> None:
        lease = current_lease()
        assert lease is not None and lease.fencing_token is not None
        seen.append(lease.fencing_token)

    fenced = api.decorate(locked("f", fencing=True, ttl=5), body)

    async def scenario(api: Api) -> None:
        await api.call(fenced)

        async def vanish() -> bool:  # another owner takes it and never releases it
            # (ttl 1 s: a lease that has ended when its object is collected gives no warning)
            return bool(await api.Lock("f", fencing=True, ttl=1, auto_renew=False).acquire())

        with warns_dropped():
            assert await api.join(api.spawn(vanish))  # (dropped unreleased: said so)
        await api.sleep(1.1)  # ... its lease just expires
        await api.call(fenced)
        r.delete("{lock:f}:fence")  # even the counter is gone (it expires after 7 days)
        await api.call(fenced)

    api.run(scenario)
    assert len(seen) == 3 and seen[0] < seen[1] < seen[2]
    assert 0 < r.pttl("{lock:f}:fence") <= 7 * 24 * 3600 * 1000  # the storage it costs


def test_unfenced_locks_have_no_token_and_write_no_counter(r: redis.Redis) -> None:
    with Lock("plain") as lock:
        lease = current_lease()
        assert lease is not None and lease.fencing_token is None and lock.owned()
    assert r.dbsize() == 0


def test_fencing_is_refused_on_a_quorum() -> None:
    servers = [RedisServer() for _ in range(3)]
    try:
        for srv in servers:
            srv.start()
        register_provider("q", [s.url for s in servers])
        with pytest.raises(ProviderError, match="fencing=True needs one Redis"):
            Lock("x", provider="q", fencing=True).acquire()
    finally:
        for srv in servers:
            srv.__exit__(None, None, None)

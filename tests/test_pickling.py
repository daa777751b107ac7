"""Decorated functions pickle by reference (ProcessPoolExecutor, multiprocessing spawn,
Celery), and every exception of ours pickles with its type, message and attributes."""

from __future__ import annotations

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import pickled_workers
import pytest

from redlock_deco import (
    KeyTemplateError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    LockNotReplicated,
    ProviderError,
    ProviderNotFound,
    locked,
)
from redlock_deco.testing import RedisServer


def test_a_decorated_module_level_function_pickles_by_reference() -> None:
    assert pickle.loads(pickle.dumps(pickled_workers.double)) is pickled_workers.double
    method = pickle.loads(pickle.dumps(pickled_workers.Account.charge))
    assert method(pickled_workers.Account(), 5) == 5
    bound = pickle.loads(pickle.dumps(pickled_workers.Account().charge))
    assert bound(7) == 7


def test_a_local_decorated_function_says_why_it_cannot_pickle() -> None:
    @locked("local")
    def local() -> None:
        pass

    with pytest.raises(pickle.PicklingError, match="module level"):
        pickle.dumps(local)


@pytest.mark.slow
def test_spawned_processes_run_the_decorated_function(server: RedisServer) -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context, initializer=pickled_workers.use,
                             initargs=(server.url,)) as pool:  # fmt: skip
        assert list(pool.map(pickled_workers.double, [1, 2, 3])) == [2, 4, 6]


@pytest.mark.parametrize(
    "error",
    [
        LockNotAcquired(name="n", key="lock:n", waited=1.5),
        LockNotReplicated(name="n", key="lock:n", waited=1.0, replicas=2, acknowledged=1),
        LockLost("lost", name="n", key="lock:n"),
        LockNotOwned("not owned", name="n", key="lock:n"),
        KeyTemplateError("bad", template="{x}", field="x"),
        ProviderError("bad provider", provider="p"),
        ProviderNotFound("p"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_every_error_pickles_with_its_type_message_and_attributes(error: Exception) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
    assert again.__dict__ == error.__dict__

"""Decorated functions pickle by reference (ProcessPoolExecutor, multiprocessing spawn,
Celery), and every exception of ours pickles with its type, message and attributes."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest
from support import pickled_workers

from redlock_deco import (
    KeyTemplateError,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    LockNotReplicated,
    ProviderError,
    ProviderNotFound,
    RedlockDecoError,
)
from redlock_deco.testing import RedisServer


def test_a_decorated_module_level_function_pickles_by_reference() -> None:
    assert pickle.loads(pickle.dumps(pickled_workers.double)) is pickled_workers.double
    method = pickle.loads(pickle.dumps(pickled_workers.Account.charge))
    assert method(pickled_workers.Account(), 5) == 5
    bound = pickle.loads(pickle.dumps(pickled_workers.Account().charge))
    assert bound(7) == 7


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


@pytest.mark.parametrize(
    "error",
    [
        LockNotAcquired(name="n", key="lock:n", waited=1.5),
        LockNotReplicated(name="n", key="lock:n", waited=1.0, replicas=2, acknowledged=1),
        LockLost("lost", name="n", key="lock:n"),
        LockNotOwned("not owned", name="n", key="lock:n"),
        LockError("failed", name="n", key="lock:n"),
        KeyTemplateError("bad", template="{x}", field="x"),
        ProviderError("bad provider", provider="p"),
        ProviderNotFound("p"),
        RedlockDecoError("plain"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_every_error_rebuilds_from_its_json_args(error: RedlockDecoError) -> None:
    """Celery's JSON results store an error's type and args, and rebuild it as
    ``cls(*args)`` (a failed rebuild becomes a bare Exception)."""
    again = type(error)(*json.loads(json.dumps(error.args)))
    assert type(again) is type(error) and str(again) == str(error)
    assert again.__dict__ == error.__dict__


def test_pickling_a_decorated_main_function_by_value_is_refused() -> None:
    """cloudpickle (joblib/loky, Dask, Ray) pickles functions of __main__ by value, which
    would rebuild the plain function without its lock in the other process."""
    pytest.importorskip("cloudpickle")
    script = (
        "import cloudpickle, pickle\n"
        "from redlock_deco import locked\n"
        "@locked('main:{x}')\n"
        "def bump(x):\n"
        "    return x\n"
        "try:\n"
        "    cloudpickle.dumps(bump)\n"
        "except pickle.PicklingError as error:\n"
        "    print(error)\n"
        "else:\n"
        "    print('pickled by value')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "bump is decorated by redlock-deco and is being pickled by value" in done.stdout
    assert "importable module" in done.stdout

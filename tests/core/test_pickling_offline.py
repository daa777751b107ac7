"""Decorated callables copy and pickle as plain functions do (or say why they cannot),
without a server."""

from __future__ import annotations

import copy
import pickle

import pytest
from support import pickled_workers

from redlock_deco import (
    locked,
)


def test_a_local_decorated_function_says_why_it_cannot_pickle() -> None:
    @locked("local")
    def local() -> None:
        pass

    with pytest.raises(pickle.PicklingError, match="module level"):
        pickle.dumps(local)


def test_decorated_callables_copy_as_plain_functions_and_methods_do() -> None:
    assert copy.copy(pickled_workers.double) is pickled_workers.double
    assert copy.deepcopy({"f": pickled_workers.double})["f"] is pickled_workers.double
    account = pickled_workers.Account()
    account.id = 7
    bound = copy.deepcopy(account.charge)
    assert bound.__self__ is not account and bound.__self__.id == 7  # type: ignore[attr-defined]
    through_class = pickled_workers.Account.charge
    assert copy.copy(through_class) is through_class


def test_cloudpickle_pickles_an_importable_decorated_function_by_reference() -> None:
    cloudpickle = pytest.importorskip("cloudpickle")
    assert cloudpickle.loads(cloudpickle.dumps(pickled_workers.double)) is pickled_workers.double

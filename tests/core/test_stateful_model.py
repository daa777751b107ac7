"""The stateful machines' lease model (tests/support/stateful.py) judges owners' replies: a
model that accepted anything would let every machine pass. These cases pin its verdicts."""

from __future__ import annotations

import pytest
from support.stateful import ALIVE, GONE, MAYBE, LeaseModel


def model(sent: float = 0.0, replied: float = 0.01, ttl: float = 1.0) -> LeaseModel:
    lease = LeaseModel()
    lease.token, lease.ttl, lease.renewed = "t", ttl, False
    lease.sent, lease.replied, lease.gone, lease.lost = sent, replied, False, False
    lease.released, lease.vanished_at, lease.evicted = False, 0.0, False
    return lease


def test_status_is_certain_only_outside_the_window_of_expiry() -> None:
    lease = model()
    assert lease.status(0.5, 0.6) == ALIVE
    assert lease.status(0.995, 1.005) == MAYBE
    assert lease.status(1.2, 1.3) == GONE


def test_a_release_that_succeeds_after_the_lease_certainly_went_is_caught() -> None:
    with pytest.raises(AssertionError, match="released a lost lease"):
        model().judge_release(("ok", None), "release", 1.2, 1.3)
    model().judge_release(("ok", None), "release", 0.5, 0.6)


def test_a_release_refused_while_the_lease_is_certainly_live_is_caught() -> None:
    with pytest.raises(AssertionError, match="lease was live"):
        model().judge_release(("raised", "LockNotOwned", ""), "release", 0.5, 0.6)
    with pytest.raises(AssertionError, match="expected LockNotOwned"):
        model().judge_release(("raised", "LockLost", ""), "release", 1.2, 1.3)
    released = model()
    released.judge_release(("raised", "LockNotOwned", ""), "release", 1.2, 1.3)
    assert released.released and released.gone


def test_extend_verdicts() -> None:
    with pytest.raises(AssertionError, match="not on the server"):
        model().judge_extend(("ok", None), "extend", 1.2, 1.3, 2.0)
    with pytest.raises(AssertionError, match="refused although the lease is live"):
        model().judge_extend(("raised", "LockNotOwned", ""), "extend", 0.5, 0.6, 2.0)
    extended = model()
    extended.judge_extend(("ok", None), "extend", 0.5, 0.6, 2.0)
    assert (extended.sent, extended.replied, extended.ttl) == (0.5, 0.6, 2.0)
    refused = model()
    refused.judge_extend(("raised", "LockNotOwned", ""), "extend", 0.995, 1.005, 2.0)
    assert refused.gone and refused.lost is True


def test_owned_verdicts() -> None:
    with pytest.raises(AssertionError, match=r"owned\(\) False, model alive"):
        model().judge_owned(False, ("t", False), "owned", 0.5, 0.6)
    with pytest.raises(AssertionError, match="owned"):
        model().judge_owned(True, ("other token", False), "owned", 0.5, 0.6)
    with pytest.raises(AssertionError, match=r"lease\.lost is True"):
        model().judge_owned(True, ("t", True), "owned", 0.5, 0.6)
    maybe = model()
    maybe.judge_owned(False, ("t", False), "owned", 0.995, 1.005)
    assert maybe.gone

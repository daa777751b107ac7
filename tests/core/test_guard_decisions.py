"""The guard's decisions, taken without I/O: which re-entries are refused, what a release's
answer means for the lease (and for a release the client re-sent), which LockLost a section
ends in, what a wait that ran out raises. The sync and asyncio shells of tests/integration
only carry these answers to and from the server."""

from __future__ import annotations

import time

import pytest
from support.core_helpers import make_claim

from redlock_deco import LockError, LockLost, LockNotReplicated
from redlock_deco import _protocol as protocol
from redlock_deco._guard import _check_reentry, _lost_lease, _not_granted, _released
from redlock_deco._lifecycle import Lease
from redlock_deco._options import LeaseOptions
from redlock_deco._protocol import NotGranted


def lease(kind: protocol.Kind = protocol.LOCK, left: float = 10.0) -> Lease:
    made = Lease(make_claim("lock:k", kind=kind, ttl_ms=10_000), name="k", provider="default",
                 target=None, started=time.monotonic(), io=None, alive=lambda: True)  # fmt: skip
    made.expires_at = time.monotonic() + left
    return made


def options(**overrides: object) -> LeaseOptions:
    given: dict[str, object] = {"ttl": 10.0, "wait": 0.0, "auto_renew": True,
                                "provider": "default", "prefix": "lock:", **overrides}  # fmt: skip
    return LeaseOptions(**given)  # type: ignore[arg-type]


def test_an_upgrade_from_shared_to_exclusive_is_refused() -> None:
    with pytest.raises(LockError, match="upgrading a shared lock is refused"):
        _check_reentry(lease(protocol.SHARED), protocol.LOCK, options(), "lock:k")
    _check_reentry(lease(protocol.LOCK), protocol.SHARED, options(), "lock:k")  # stays exclusive
    _check_reentry(lease(protocol.SHARED), protocol.SHARED, options(), "lock:k")


def test_a_fenced_reentry_into_an_unfenced_hold_is_refused() -> None:
    with pytest.raises(LockError, match="no fencing token to give it"):
        _check_reentry(lease(), protocol.LOCK, options(fencing=True), "lock:k")


@pytest.mark.parametrize(
    ("answer", "resent", "left", "released"),
    [
        (True, False, 10.0, True),  # the server released it
        (False, False, 10.0, False),  # not ours any more: lost, whatever the clock says
        (None, False, 10.0, True),  # unconfirmed (quorum): the holder's clock decides
        (None, False, -1.0, False),
        (False, True, 10.0, True),  # re-sent: the first sending may have released it
        (False, True, -1.0, False),  # re-sent, but past its end by the holder's clock
        (True, True, -1.0, True),  # a released answer stands
    ],
)
def test_what_a_release_answer_means(
    answer: bool | None, resent: bool, left: float, released: bool
) -> None:
    held = lease(left=left)
    assert _released(held, answer, was_lost=False, resent=resent) is released
    assert held.lost is not released


def test_a_lease_renewal_found_lost_stays_lost_whatever_the_release_says() -> None:
    assert _released(lease(), True, was_lost=True) is False


def test_the_lock_lost_a_section_ends_in() -> None:
    held = lease()
    assert _lost_lease(held, None, kept=True) is None
    lost = _lost_lease(held, None, kept=False)
    assert isinstance(lost, LockLost) and "'lock:k'" in str(lost) and lost.name == "k"
    own = ValueError("the body's own error")
    assert _lost_lease(held, own, kept=False) is None  # the body's error goes on, noted
    assert any("also lost" in note for note in getattr(own, "__notes__", []))


def test_a_wait_that_ran_out_for_want_of_replicas_says_so() -> None:
    with pytest.raises(LockNotReplicated) as info:
        _not_granted(NotGranted(acknowledged=0), options(replicas=1), "k", "lock:k", 0.0)
    assert info.value.replicas == 1 and info.value.acknowledged == 0
    _not_granted(NotGranted(acknowledged=None), options(), "k", "lock:k", 0.0)  # busy: no raise


def test_a_lease_has_one_last_exit_even_when_one_runs_inside_another() -> None:
    """Review 93a, N1: the lease's gate is re-entrant, and the collector may run a finaliser
    inside it -- after an exit's discard -- that closes another section dropped open on the
    same lease. That exit found the set empty and answered "last"; so did the outer one, and
    the lease was given back twice (the second a false loss). One of them is the last."""
    import inspect
    import sys
    from typing import Any

    made = lease()
    made._enter(1)
    made._enter(2)
    answers: list[bool] = []
    code = Lease._exit.__code__
    lines, first = inspect.getsourcelines(code)
    verdict = first + next(n for n, line in enumerate(lines) if "if self.sections" in line)

    def inside(frame: Any, event: str, arg: object) -> object:
        if event == "line" and frame.f_lineno == verdict and not answers:
            sys.settrace(None)
            answers.append(made._exit(2))  # (the outer exit's discard has run)
        return inside

    def tracer(frame: Any, event: str, arg: object) -> object:
        return inside if frame.f_code is code else None

    sys.settrace(tracer)
    try:
        answers.append(made._exit(1))
    finally:
        sys.settrace(None)
    assert sorted(answers) == [False, True], answers
    # An exit repeated (an interrupted exit's clean-up closes its section again, and gives
    # the lease back on that answer) answers as it did (review 94a, F1: answered "no" the
    # second time, the lease stayed held and renewed with no block open).
    last = 2 if answers[0] else 1
    assert made._exit(last) and not made._exit(3 - last)

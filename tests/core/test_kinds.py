"""The primitive kinds are declared once (``_protocol.KINDS``) and everything reads them there.

No server: a kind's declaration is compared with the scripts, key layout, defaults and
operator tools that depend on it.
"""

from __future__ import annotations

import inspect

import pytest

import redlock_deco
from redlock_deco import Lock, Semaphore, acl, limited, locked
from redlock_deco import _keys as keys
from redlock_deco import _protocol as protocol
from redlock_deco import asyncio as aio
from redlock_deco._protocol import KINDS, LOCK, SEMAPHORE, SHARED, SUFFIXES, Keys


def test_each_kind_has_its_own_name_and_scripts() -> None:
    assert len({kind.name for kind in KINDS}) == len(KINDS)
    assert len({kind.acquire_script for kind in KINDS}) == len(KINDS)
    assert {kind.redis_type for kind in KINDS} <= {"string", "zset"}


def test_the_bookkeeping_suffixes_are_the_kinds_and_each_has_a_role() -> None:
    assert set(SUFFIXES) == {suffix for kind in KINDS for suffix in kind.siblings}
    assert set(keys.ROLES) == set(SUFFIXES)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_a_kind_writes_only_its_declared_bookkeeping(kind: protocol.Kind) -> None:
    fenced = "fence" in kind.siblings  # a fencing counter is declared by the kinds offering it
    layout = Keys.for_key(kind.prefix + "x", kind, fencing=fenced)
    written = {
        suffix
        for suffix in SUFFIXES
        if protocol.sibling(layout.key, suffix) in (layout.queue, layout.limit, layout.fence,
                                                    layout.readers)
    }  # fmt: skip
    assert written <= set(kind.siblings)
    offers = {"fencing" in inspect.signature(call).parameters
              for call, of in PUBLIC if of is kind}  # fmt: skip
    assert offers <= {fenced}


PUBLIC = ((Lock, LOCK), (aio.Lock, LOCK), (locked, LOCK), (Semaphore, SEMAPHORE),
          (aio.Semaphore, SEMAPHORE), (limited, SEMAPHORE))  # fmt: skip


def test_default_prefixes_come_from_the_kinds() -> None:
    assert acl.DEFAULT_PREFIXES == ("lock:", "sem:", "throttle:")  # a throttle is no lease kind
    assert inspect.signature(redlock_deco.throttled).parameters["prefix"].default == "throttle:"
    for call, kind in PUBLIC:
        assert inspect.signature(call).parameters["prefix"].default == kind.prefix, call
    assert SHARED.prefix == LOCK.prefix  # readers and writers of a name share its key


def test_only_an_unfenced_plain_lock_starts_with_a_plain_set() -> None:
    for kind in KINDS:
        for fencing in (False, True):
            claim = protocol.Claim(kind, Keys.for_key("k", kind, fencing), "t", 1000)
            plain = claim.plain_step()
            assert (plain is not None) == (kind.plain_first and not fencing), (kind.name, fencing)
    assert [kind.name for kind in KINDS if kind.plain_first] == ["lock"]

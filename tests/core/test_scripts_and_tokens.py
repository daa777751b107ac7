"""Pure facts about what goes to the server: token shape and randomness, quorum sizes and
validity, an unconfirmed quorum release judged by the holder's clock, the CLI's argument
parsing."""

from __future__ import annotations

import os
import re
import time
from importlib import resources

import pytest
import redis
from support.samples import TOKEN

from redlock_deco import _drivers as drivers
from redlock_deco._cli import _watch_arguments
from redlock_deco._quorum import quorum, validity_ms
from redlock_deco._tokens import holder_of, new_token
from redlock_deco.acl import SCRIPT_COMMANDS, glob_escape


def test_scripts_run_exactly_the_granted_data_commands() -> None:
    called: set[str] = set()
    for script in resources.files("redlock_deco").joinpath("lua").iterdir():
        calls = re.findall(r"redis\.p?call\('(\w+)'(?:, '(\w+)')?", script.read_text())
        # A command with subcommands is granted only the one the scripts use (pubsub|numsub).
        called |= {f"{c}|{sub}".lower() if c == "PUBSUB" else c.lower() for c, sub in calls}
    # Missing: NOPERM inside a script. Extra: a grant nothing needs.
    assert called == set(SCRIPT_COMMANDS)


def test_glob_specials_in_a_prefix_match_only_themselves() -> None:
    assert glob_escape("a[1]*?\\:") == "a\\[1\\]\\*\\?\\\\:"


def test_tokens_carry_128_random_bits_and_never_repeat() -> None:
    tokens = [new_token() for _ in range(20_000)]
    assert len(set(tokens)) == len(tokens)
    for token in tokens[:100]:
        found = TOKEN.match(token)
        assert found and int(found["pid"]) == os.getpid()
        assert holder_of(token) == f"{found['host']}:{found['pid']}"  # never the secret


def test_quorum_sizes_and_validity() -> None:
    assert [quorum(3), quorum(5), quorum(7)] == [2, 3, 4]
    # Semaphores: (L + 1) * Q > N * L, so L + 1 holders can never all hold a quorum.
    assert [quorum(3, 2), quorum(5, 2), quorum(5, 3), quorum(7, 2)] == [3, 4, 4, 5]
    for n in range(3, 10):
        for limit in range(1, 6):
            q = quorum(n, limit)
            assert (limit + 1) * q > n * limit >= (limit + 1) * (q - 1)
    assert validity_ms(10_000, 50) == pytest.approx(10_000 - 50 - 102)


def test_watch_takes_a_pattern_given_where_seconds_may_go() -> None:
    assert _watch_arguments(None, None) == ("*", None)
    assert _watch_arguments(None, "") == ("*", 2.0)
    assert _watch_arguments("lock:*", "0.5") == ("lock:*", 0.5)
    assert _watch_arguments(None, "lock:*") == ("lock:*", 2.0)  # `--watch 'lock:*'`
    with pytest.raises(Exception, match="SECONDS"):
        _watch_arguments("lock:*", "soon")


def test_an_unconfirmed_quorum_release_is_judged_by_the_holders_clock() -> None:
    """Nobody refused, too few confirmed in time: clean only if the lease had not run out."""
    from support.core_helpers import make_claim

    from redlock_deco._guard import _released
    from redlock_deco._lifecycle import Lease

    def make() -> Lease:
        claim = make_claim("lock:q", ttl_ms=1000)
        return Lease(claim, name="q", provider="q", target=None, started=time.monotonic(),
                     io=None, alive=lambda: True)  # fmt: skip

    fresh, stale = make(), make()
    stale.expires_at = time.monotonic() - 1  # ran out (auto_renew=False, a long section)
    fresh.expires_at = time.monotonic() + 10
    assert _released(fresh, None, was_lost=False) is True and not fresh.lost
    assert _released(stale, None, was_lost=False) is False and stale.lost


PACKED = [
    ("EVALSHA", "0" * 40, 1, "throttle:ü€😀", "tok", "1.5", 1_000_000_000_000_000, 0),
    ("SET", "lock:order:7", "host:1:ab:cd", "NX", "PX", 30000),
    ("GET", ""),
    ("EVAL", "return 1\r\n-- a script's text\n", 0),
]


@pytest.mark.parametrize("args", PACKED)
def test_commands_are_packed_as_redis_py_packs_them(args: tuple[str | int, ...]) -> None:
    """The direct path's packing (hiredis's where installed, else ours) writes the bytes
    redis-py's own connection would."""
    expected = b"".join(redis.Connection().pack_command(*args))
    assert drivers.pack_text(args) == expected
    assert drivers.pack(args) == expected


def test_a_cluster_claim_runs_the_cluster_text_of_every_script_that_empties_keys() -> None:
    """On a Redis Cluster (PUBLISH counts prove nothing there: ``counted=False``) the lock
    and semaphore scripts run behind lua/moving.lua (a slot being moved must not stop them
    half-way, review 35); on one server, or a quorum's masters, as they are."""
    import dataclasses

    from redlock_deco import _admin as admin
    from redlock_deco import _scripts as scripts
    from redlock_deco._protocol import KINDS, Claim, Keys, undo_step

    moving = resources.files("redlock_deco").joinpath("lua", "moving.lua").read_text()
    for kind in KINDS:
        single = Claim(kind, Keys.for_key("k", kind), kind.token("t"), 1000)
        cluster = dataclasses.replace(single, counted=False)
        for step in ("acquire_step", "release_step", "extend_step", "owned_step"):
            args = (1000,) if step == "extend_step" else ()
            plain = getattr(single, step)(*args).script
            there = getattr(cluster, step)(*args).script
            assert plain.on_cluster is None or moving not in plain.source
            assert there is (plain.on_cluster or plain)
        acquire = cluster.acquire_step().script
        assert acquire.source == moving + "\n" + single.acquire_step().script.source
        assert acquire.sha != single.acquire_step().script.sha
        undone = undo_step(cluster.acquire_step())
        assert undone is not None and undone.script is cluster.release_step().script
    for counted in (True, False):
        step = next(admin.force_release("lock:k", "lock", counted=counted, masters=1))
        assert step.script is scripts.FORCE_RELEASE.on(not counted)
    assert scripts.FORCE_RELEASE.on_cluster is not None
    assert scripts.LOCK_EXTEND.on_cluster is None  # touches no key after deleting one

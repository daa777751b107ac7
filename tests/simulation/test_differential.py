"""The simulated store against a real redis-server: the same random command sequences --
the library's own scripts (built by the production ``Claim``/``force_release`` step
builders, so they follow every change of arguments) and the plain commands they and the
drivers use, plus probes of Redis's Lua <-> RESP conversion rules -- must give the same
replies and leave the same state (keys, types, values, members, scores and TTLs within a
tolerance: both clocks are the real server's, read before each command).

This is what lets the simulator run the Lua outside a real server.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis._parsers.base import BaseParser

from redlock_deco import _admin as admin
from redlock_deco import _protocol as protocol
from redlock_deco import _scripts as scripts
from redlock_deco import _throttle as throttle
from redlock_deco._drivers import checkout
from redlock_deco.testing import RedisServer

from .store import Error, Store

SEQUENCES = 120
LENGTH = 40
# Times in replies and state (ms left, ms or us since the epoch) may differ by the time
# between reading the server's clock and the command running there: by this, plus how far
# the server's clock moved over the step (a busy machine: 254 ms once, beside a review).
TOLERANCE = 200  # ms (or us / 1000 for microsecond values)

PREFIXES = ("simhost:101:0badcafe:", "simhost:202:f00dfeed:")
LOCKS = ("dl:a", "dl:b")
SEMAPHORE = "ds:s"
# Long leases: nothing expires while a sequence runs, on either side.
TTLS = (10_000, 20_000, 60_000)

PROBES = (
    "return {1, 2.7, -2.7, 'x', false, 3}",
    "return {1, nil, 3}",
    "return true",
    "return false",
    "return nil",
    "return 3.99",
    "return -3.99",
    "return 'text'",
    "return {err='MYERR custom'}",
    "return redis.error_reply('MYERR again')",
    "return redis.status_reply('FINE')",
    "return {ok='STATUS'}",
    "return {{1, 2}, {'a', false}}",
    "return redis.call('SET', KEYS[1], 0.1)",
    "return redis.call('GET', KEYS[1])",
    "redis.call('SET', KEYS[1], 12345678901234); return redis.call('GET', KEYS[1])",
    "redis.call('SET', KEYS[1], 1.5e20); return redis.call('GET', KEYS[1])",
    "return redis.call('GET', 'dl:nothing-here')",
    "return type(redis.call('GET', 'dl:nothing-here'))",
    "local r = redis.pcall('LPUSH', KEYS[1], 'x'); return type(r) == 'table' and r.err ~= nil",
    "return redis.pcall('ZADD', KEYS[1], 'nan-ish', 'm')",
    "return redis.call('EXISTS', KEYS[1], 'dl:nothing-here')",
    "return redis.call('PTTL', 'dl:nothing-here')",
    "return #redis.call('TIME')",
    "return redis.call('LPOS', 'dl:nothing-here', 'x')",
    "return redis.call('ZRANGE', 'dl:nothing-here', 0, -1)",
    "return redis.sha1hex('abc')",
    "return tostring(0.1 + 0.2)",
    "return string.format('%d', 3)",
    "return math.floor(7 / 2)",
    "return tonumber('12') + 1",
    "return {redis.call('TYPE', KEYS[1])}",
    "return redis.call('TYPE', KEYS[1])['ok']",
)


def token(rng: random.Random, reader: bool = False) -> str:
    secret = f"{rng.randrange(4):032x}"
    return rng.choice(PREFIXES) + secret + (protocol.READER_SUFFIX if reader else "")


THROTTLE = "dt:t"


def throttle_command(rng: random.Random) -> tuple[Any, ...]:
    """A throttle's admit or give-back, as the production builders make them."""
    # Intervals of 20 s and more: its key's expiry stays long, as every key's here.
    options = throttle.ThrottleOptions(
        rng.choice((1.0, 0.5)), rng.choice((20.0, 60.0)), rng.choice((1.0, 3.0)), None,
        "default", "throttle:",
    )  # fmt: skip
    token = f"t{rng.randrange(3)}"
    if rng.random() < 0.25:
        step = throttle.return_step(THROTTLE, token, 1.0, options)
    else:
        wait = rng.choice((None, 0.0, 30.0, 200.0))
        step = throttle.admit_step(THROTTLE, token, rng.choice((1.0, 0.5)), options, wait)
    return ("EVAL", step.script.source, len(step.keys), *step.keys, *step.args)


def command(rng: random.Random, now_ms: int) -> tuple[Any, ...]:
    """One random command: mostly the library's scripts, some plain commands and probes."""
    if rng.random() < 0.1:
        return throttle_command(rng)
    draw = rng.random()
    name = rng.choice(LOCKS)
    ttl = rng.choice(TTLS)
    if draw < 0.55:
        which = rng.choice(("lock", "shared", "semaphore"))
        kind = {"lock": protocol.LOCK, "shared": protocol.SHARED, "semaphore": protocol.SEMAPHORE}[
            which
        ]
        key = SEMAPHORE if which == "semaphore" else name
        keys = protocol.Keys.for_key(key, kind, fencing=which == "lock" and rng.random() < 0.2)
        # Uncounted: a cluster's claim, which runs the scripts' cluster text (moving.lua).
        claim = protocol.Claim(
            kind, keys, token(rng, kind.shared), ttl, limit=rng.choice((1, 2, 3)),
            counted=rng.random() < 0.7,
        )  # fmt: skip
        op = rng.choice(("acquire", "acquire", "acquire", "release", "extend", "owned", "count"))
        if op == "acquire":
            step = claim.acquire_step(rng.choice((protocol.TRY, protocol.QUEUE, protocol.AGAIN)))
        elif op == "release":
            step = claim.release_step(leaving=rng.random() < 0.3)
        elif op == "extend":
            step = claim.extend_step(rng.choice(TTLS))
        elif op == "owned":
            step = claim.owned_step()
        else:
            step = kind.count_step(key)
        return ("EVAL", step.script.source, len(step.keys), *step.keys, *step.args)
    if draw < 0.6:
        steps = admin.force_release(
            rng.choice((*LOCKS, SEMAPHORE)),
            rng.choice(("lock", "semaphore", "")),
            counted=rng.random() < 0.7,
            masters=1,
            force=rng.random() < 0.5,
        )
        step = next(steps)
        return ("EVAL", step.script.source, len(step.keys), *step.keys, *step.args)
    if draw < 0.7:
        probe = rng.choice(PROBES)
        return ("EVAL", probe, 1, rng.choice((name, f"{{{name}}}:queue", SEMAPHORE)))
    queue = f"{{{name}}}:queue"
    entry = token(rng) + rng.choice(("", f"|{ttl}|1"))
    plain: list[tuple[Any, ...]] = [
        ("SET", name, token(rng), "NX", "PX", ttl),
        ("SET", name, protocol.SHARED_VALUE, "PX", ttl),
        ("GET", name),
        ("DEL", rng.choice((name, queue, SEMAPHORE))),
        ("PEXPIRE", rng.choice((name, queue, SEMAPHORE)), rng.choice(TTLS)),
        ("PTTL", rng.choice((name, queue, SEMAPHORE))),
        ("ZADD", queue, "NX", rng.choice((-1, 0, 1, 2, 3)), entry),
        ("ZPOPMIN", queue),
        ("ZRANGE", queue, 0, 0),
        ("ZRANGE", queue, rng.choice((0, -1)), -1, "WITHSCORES"),
        ("ZREM", queue, entry),
        ("ZCARD", queue),
        ("ZADD", SEMAPHORE, now_ms + rng.choice(TTLS), token(rng)),
        ("ZADD", SEMAPHORE, "XX", now_ms + rng.choice(TTLS), token(rng)),
        ("ZSCORE", SEMAPHORE, token(rng)),
        ("ZREM", SEMAPHORE, token(rng)),
        ("ZCARD", SEMAPHORE),
        ("ZCOUNT", SEMAPHORE, f"({now_ms}", "+inf"),
        ("ZREMRANGEBYSCORE", SEMAPHORE, "-inf", now_ms + 15_000),
        ("ZRANGE", SEMAPHORE, 0, -1, "WITHSCORES"),
        ("ZRANGE", SEMAPHORE, -1, -1, "WITHSCORES"),
        ("EXISTS", name, queue, SEMAPHORE),
        ("TYPE", rng.choice((name, queue, SEMAPHORE))),
        ("GET", queue),  # WRONGTYPE while it is a sorted set
        ("PUBLISH", "redlock-deco:" + rng.choice(PREFIXES).rstrip(":"), "hello"),
        ("PUBSUB", "NUMSUB", "redlock-deco:" + rng.choice(PREFIXES).rstrip(":")),
    ]
    return rng.choice(plain)


SCRIPT_ERROR_6 = re.compile(r"^Error running script \(call to f_[0-9a-f]+\): @user_script:\d+: ")


def normal(reply: Any) -> Any:
    """A reply as compared: an error as the exception redis-py makes of it (class and
    message, less the script location Redis appends)."""
    if isinstance(reply, Error):
        reply = BaseParser.parse_error(reply.message)
    if isinstance(reply, redis.ResponseError):
        # Redis 6.2 wraps a script's error: "Error running script (call to f_<sha>):
        # @user_script:<line>: <the error>"; 7.0 appends " script: ..." instead.
        message = SCRIPT_ERROR_6.sub("", str(reply)).split(" script: ")[0]
        return ("error", type(reply).__name__, message)
    if isinstance(reply, list):
        return [normal(item) for item in reply]
    return reply


def close(real: Any, simulated: Any, slack: float = TOLERANCE) -> bool:
    """Equal, but for times: numbers of 500 and more (ms left, clock readings) may differ by
    ``slack`` ms (microsecond clock readings by ``slack`` in ms)."""
    if isinstance(real, list) and isinstance(simulated, list):
        if len(real) != len(simulated):
            return False
        if all(close(a, b, slack) for a, b in zip(real, simulated, strict=True)):
            return True
        # Member/time pairs (a sorted set WITHSCORES, a script's leases left) may come in
        # another order when their times differ by less than the tolerance (CI, under load:
        # the real server's clock moved 1 ms between two readers' joins, and their lease ends
        # tied only on the simulated side): then they are compared member by member.
        pairs = [_pairs(side) for side in (real, simulated)]
        return None not in pairs and all(
            close(a, b, slack) for a, b in zip(pairs[0], pairs[1], strict=True)
        )
    if real == simulated:
        return True
    a, b = _number(real), _number(simulated)
    if a is None or b is None or type(real) is not type(simulated):
        return False
    scale = 1000 if max(abs(a), abs(b)) > 10**14 else 1
    return min(abs(a), abs(b)) >= 500 and abs(a - b) <= slack * scale


def _pairs(flat: list[Any]) -> list[list[Any]] | None:
    """``[member, time, member, time, ...]`` as ``[member, time]`` pairs sorted by member,
    or None for a list of any other shape."""
    if len(flat) % 2:
        return None
    pairs = list(zip(flat[::2], flat[1::2], strict=True))
    if not all(isinstance(m, bytes) and _number(t) is not None for m, t in pairs):
        return None
    return sorted([m, t] for m, t in pairs)


def _number(value: Any) -> float | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, bytes):
        try:
            return float(value)
        except ValueError:
            return None
    return None


class Real:
    """A raw RESP2 connection to the real server: replies as the drivers' direct path reads
    them, errors as values."""

    def __init__(self, client: redis.Redis) -> None:
        info = client.info("server")
        self.valkey = info.get("server_name") == "valkey" or "valkey_version" in info
        self.conn = checkout(client.connection_pool, [])  # as redis-py 5.0 to 8 want it asked

    def __call__(self, *args: Any) -> Any:
        self.conn.send_command(*args)
        try:
            return self.conn.read_response()
        except redis.ResponseError as exc:
            return exc


def state(run: Any) -> dict[str, Any]:
    """Every key: type, value and ms left, read with commands (the same on both sides)."""
    found = {}
    for raw in run("KEYS", "*"):
        key = raw.decode()
        kind = run("TYPE", key)
        if kind == b"string":
            value = run("GET", key)
            if value.startswith(b"gcra "):  # a throttle's: its times (us) compared in ms
                parts = value.split()
                value = [parts[0], *(int(float(p) // 1000) for p in parts[1:3]), *parts[3:]]
        elif kind == b"list":
            value = run("LRANGE", key, 0, -1)
        elif kind == b"zset":
            value = run("ZRANGE", key, 0, -1, "WITHSCORES")
        else:
            value = kind
        found[key] = [kind, value, run("PTTL", key)]
    return found


@pytest.fixture
def real(server: RedisServer) -> Iterator[Real]:
    client = server.client(protocol=2)
    subscriber = client.pubsub()
    # One of the two "processes" listens, so scripts see both a heard and an unheard grant.
    subscriber.subscribe("redlock-deco:" + PREFIXES[0].rstrip(":"))
    subscriber.get_message(timeout=1)
    yield Real(client)
    subscriber.close()
    client.close()


@pytest.mark.parametrize("block", range(4))
def test_store_matches_a_real_server(real: Real, block: int) -> None:
    clock = {"us": 0}
    simulated = Store(lambda: clock["us"])
    simulated.channels["redlock-deco:" + PREFIXES[0].rstrip(":")] = 1
    if real.valkey:
        simulated.lua_doubles = "%.14g"  # Valkey 9 formats Lua numbers as Lua does

    def sim(*args: Any) -> Any:
        return simulated.execute(args)

    throttle_source = scripts.THROTTLE_ADMIT.source

    for sequence in range(block * SEQUENCES // 4, (block + 1) * SEQUENCES // 4):
        rng = random.Random(f"differential:{sequence}")
        real("FLUSHALL")
        simulated.flush()
        history: list[str] = []

        def now() -> int:
            seconds, micros = real("TIME")
            return int(seconds) * 1_000_000 + int(micros)

        for _ in range(LENGTH):
            clock["us"] = started = now()
            args = command(rng, clock["us"] // 1000)
            expected = normal(real(*args))
            got = normal(sim(*args))
            if args[1] == throttle_source:  # its delay in us: compared in ms, as the rest
                expected, got = (
                    [r[0], r[1] // 1000] if isinstance(r, list) else r for r in (expected, got)
                )
            shown = args if args[0] != "EVAL" or len(args[1]) < 80 else ("EVAL", "<script>",
                                                                       *args[2:])  # fmt: skip
            history.append(f"{shown} -> {expected!r}")
            clock["us"] = after = now()
            assert close(expected, got, TOLERANCE + (after - started) / 1000), (
                f"sequence {sequence}: replies differ for {shown}: real {expected!r}, "
                f"simulated {got!r}\n" + "\n".join(history)
            )
            before, after = state(real), state(sim)
            slack = TOLERANCE + (now() - clock["us"]) / 1000
            assert before.keys() == after.keys() and all(
                close(before[k], after[k], slack) for k in before
            ), (
                f"sequence {sequence}: state differs after {shown}:\nreal      {before}\n"
                f"simulated {after}\n" + "\n".join(history)
            )


def test_expiry_is_lazy_and_exact() -> None:
    """A key lives through its last millisecond and is gone after it (Redis: now > when);
    an emptied list goes with its expiry, and a list made again has none."""
    clock = {"us": 5_000_000}
    store = Store(lambda: clock["us"])
    assert store.execute(("SET", "k", "v", "PX", 100)) == b"OK"
    clock["us"] += 100_000
    assert store.execute(("PTTL", "k")) == 0 and store.execute(("GET", "k")) == b"v"
    clock["us"] += 1_000
    assert store.execute(("GET", "k")) is None and store.execute(("PTTL", "k")) == -2
    store.execute(("RPUSH", "q", "a"))
    store.execute(("PEXPIRE", "q", 50))
    store.execute(("LPOP", "q"))
    store.execute(("RPUSH", "q", "b"))
    assert store.execute(("PTTL", "q")) == -1

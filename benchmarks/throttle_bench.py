"""A rate limit: redlock-deco's ``Throttle`` (GCRA on the server's clock) against the Python
Redis rate limiters people reach for -- ``limits`` (its moving window and its sliding window
counter) and ``pyrate-limiter`` (its ``RedisBucket``, a sliding-window log, and the GCRA it
keeps in a ``RedisStateStore``) -- each deciding at once (ours: ``wait=0``), since the anchors
only answer allowed or denied.

1. Decisions/s from one process in a tight loop on one name, with a limit that allows
   everything (1,000,000/s) and one that denies nearly everything (10/s); interleaved rounds,
   the median reported. Per decision, from the same loops: the client's CPU, the server's CPU
   (``INFO cpu``: networking included, a script's inner commands counted once) and the
   commands the server ran (``INFO commandstats``: a script's inner commands are counted as
   commands too, so one EVALSHA running four commands counts 5). For context, not as an
   anchor: the throttle's own script sent with redis-py's ``evalsha`` (the anchors' client
   path: the same round trip and script, without redlock-deco's own command path).
2. Server memory per name: one decision on each of 10,000 names at 1 per 60 s (so every key
   is alive when measured), ``used_memory`` after minus before, per name; and the keys each
   name leaves, and whether they expire.
3. Admission accuracy: 8 processes hammer one name for 3 s at 100 per 1 s with a burst of 10
   (the anchors without a burst: ``100/second``), each recording its admitted calls' send and
   reply instants (``time.time()``; the server is on this host, so its clock is the same
   clock). Against the GCRA bound ``burst + rate * T / per``: the whole run (T from the
   first request sent to the last reply), and every sliding 1 s and 100 ms window, counted
   two ways: by reply instant (the client's view: a reply's delivery can move an admission
   into a later window, so this count may exceed the bound by the delivery jitter), and the
   admissions *definitely* inside the window (sent at or after its start and replied by its
   end: their decision was inside, on the server's schedule, so this count must never exceed
   the bound). And redlock-deco with ``wait=None`` (each call sleeps until its reserved slot):
   admitted/s after the burst, against the rate.

Workers are spawned (as ``shared_bench``), build their limiter and warm it up on another
name, then all start at a barrier; one pool of workers runs every accuracy scenario in turn.

A library that is not installed is skipped, with a note (``pip install limits
pyrate-limiter``; both are in the ``bench`` extra).

Standalone: ``python -m benchmarks.throttle_bench [--seconds 3] [--rounds 10]`` (its own
redis-server, under a minute).
"""

from __future__ import annotations

import bisect
import importlib
import importlib.util
import multiprocessing
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import redis

from .contention import server_cpu

#: decide(name) -> admitted?, built inside the process that uses it (its own clients)
Decide = Callable[[str], bool]
#: (url, rate, per, burst) -> Decide
Factory = Callable[[str, float, float, int], Decide]

OURS = "redlock-deco Throttle (wait=0)"
WAITING = "redlock-deco Throttle (wait=None)"
RAW = "its script via redis-py's evalsha"
FLOOR = "its script over a bare socket"
OPEN = (1_000_000, 1.0, 1_000_000)  # rate, per, burst: everything allowed
SHUT = (10, 1.0, 10)  # denies all but ~10 a second
ACCURATE = (100, 1.0, 10)  # the accuracy run: 100 per 1 s, burst 10
MEMORY = (1, 60.0, 1)  # 1 per 60 s: every name's key alive when measured
NAMES = 10_000
PROCESSES = 8
LOOP = 0.1  # seconds per tight-loop sample: short, so the rounds interleave finely
WINDOWS = (1.0, 0.1)  # sliding windows checked against the bound


def redlock_deco_throttle(url: str, rate: float, per: float, burst: int) -> Decide:
    """``Throttle(name, rate=, per=, burst=, wait=0).acquire()``: admitted at once or not at
    all; one object per name, built on first use (as ``@throttled`` keeps one per name)."""
    import redlock_deco

    redlock_deco.register_provider("default", url)
    throttles: dict[str, Any] = {}

    def decide(name: str) -> bool:
        throttle = throttles.get(name)
        if throttle is None:
            throttle = throttles[name] = redlock_deco.Throttle(
                name, rate=rate, per=per, burst=burst, wait=0
            )
        return bool(throttle.acquire())

    return decide


def _limits_item(rate: float, per: float) -> Any:
    from limits import RateLimitItemPerSecond

    return RateLimitItemPerSecond(int(rate), int(per))  # "rate per `per` seconds"; no burst


def limits_moving_window(url: str, rate: float, per: float, burst: int) -> Decide:
    """``MovingWindowRateLimiter(storage_from_string(url)).hit(item, name)``: at most ``rate``
    in any ``per`` seconds, by the timestamps the *clients* send (one list entry per hit)."""
    from limits.storage import storage_from_string
    from limits.strategies import MovingWindowRateLimiter

    limiter, item = MovingWindowRateLimiter(storage_from_string(url)), _limits_item(rate, per)
    return lambda name: limiter.hit(item, name)


def limits_sliding_counter(url: str, rate: float, per: float, burst: int) -> Decide:
    """``SlidingWindowCounterRateLimiter``: this window's count plus the previous window's,
    weighted by how much of it still overlaps (the server's key TTLs): an approximation."""
    from limits.storage import storage_from_string
    from limits.strategies import SlidingWindowCounterRateLimiter

    limiter = SlidingWindowCounterRateLimiter(storage_from_string(url))
    item = _limits_item(rate, per)
    return lambda name: limiter.hit(item, name)


def _pyrate(make: Callable[[str], Any]) -> Decide:
    """``Limiter(factory).try_acquire(name, blocking=False)`` with a ``BucketFactory`` that
    keeps one bucket per name (pyrate-limiter's documented way to limit many names with one
    ``Limiter``), stamping items with the wall clock in ms as its Redis buckets do. No leak
    is scheduled (see pyrate_redis_bucket)."""
    from pyrate_limiter import BucketFactory, Limiter, RateItem

    class PerName(BucketFactory):  # type: ignore[misc]
        def __init__(self) -> None:
            self.buckets: dict[str, Any] = {}

        def wrap_item(self, name: str, weight: int = 1) -> Any:
            return RateItem(name, time.time_ns() // 1_000_000, weight=weight)

        def get(self, item: Any) -> Any:
            bucket = self.buckets.get(item.name)
            if bucket is None:
                bucket = self.buckets[item.name] = make(item.name)
            return bucket

    limiter = Limiter(PerName())
    return lambda name: bool(limiter.try_acquire(name, blocking=False))


def pyrate_redis_bucket(url: str, rate: float, per: float, burst: int) -> Decide:
    """``Limiter(...).try_acquire(name, blocking=False)`` over a ``RedisBucket`` per name: a
    sorted-set log of admissions, at most ``rate`` in any ``per`` seconds by the clients'
    millisecond clocks. Its keys never expire; a ``Limiter`` built on one bucket trims old
    entries from a background thread every 10 s (here: not scheduled)."""
    from pyrate_limiter import Rate, RedisBucket

    client = redis.Redis.from_url(url)
    rates = [Rate(int(rate), int(per * 1000))]
    sha = RedisBucket.init(rates, client, "bench:pyrate:init").script_hash
    return _pyrate(lambda name: RedisBucket(rates, client, f"pyrate:{name}", sha))


def pyrate_gcra(url: str, rate: float, per: float, burst: int) -> Decide:
    """``Limiter`` over ``StateBucket(rates, GCRA(), RedisStateStore(client, key))`` per name:
    GCRA in one hash per name, on the clients' millisecond clocks."""
    from pyrate_limiter import GCRA, Rate, RedisStateStore, StateBucket

    client = redis.Redis.from_url(url)
    rates = [Rate(int(rate), int(per * 1000), burst=burst)]
    return _pyrate(
        lambda name: StateBucket(rates, GCRA(), RedisStateStore(client, f"pyrate-gcra:{name}"))
    )


#: name -> (factory, what must be importable (module or module:name), how to install it,
#: its semantics)
LIMITERS: dict[str, tuple[Factory, str, str, str]] = {
    OURS: (redlock_deco_throttle, "redlock_deco", "", "GCRA, server clock"),
    "limits MovingWindow": (
        limits_moving_window, "limits", "pip install limits",
        "sliding log, client clocks, no burst",
    ),
    "limits SlidingWindowCounter": (
        limits_sliding_counter, "limits", "pip install limits",
        "weighted 2 windows (approximate), server TTLs",
    ),
    "pyrate-limiter RedisBucket": (
        pyrate_redis_bucket, "pyrate_limiter", "pip install pyrate-limiter",
        "sliding log, client clocks (ms), no burst",
    ),
    "pyrate-limiter GCRA (RedisStateStore)": (
        pyrate_gcra, "pyrate_limiter:RedisStateStore", "pip install 'pyrate-limiter>=4.5'",
        "GCRA, client clocks (ms)",
    ),
}  # fmt: skip


def available() -> tuple[list[str], dict[str, str]]:
    """(libraries to measure, library -> install hint for those not installed)."""
    found, missing = [], {}
    for name, (_, needed, install, _) in LIMITERS.items():
        if _importable(needed):
            found.append(name)
        else:
            missing[name] = install
    return found, missing


def _importable(needed: str) -> bool:
    module, _, attribute = needed.partition(":")
    if not importlib.util.find_spec(module):
        return False
    return not attribute or hasattr(importlib.import_module(module), attribute)


def raw(url: str, rate: float, per: float, burst: int) -> Decide:
    """Context, not an anchor: the admit script redlock-deco sends (``wait`` 0), sent with
    redis-py's ``evalsha``: the same one round trip and script, through redis-py's generic
    command path (which the anchors use) instead of redlock-deco's own."""
    client = redis.Redis.from_url(url)
    text = (resources.files("redlock_deco.lua") / "throttle_admit.lua").read_text()
    sha = client.script_load(text)
    interval = per / rate * 1e6
    calls = [0]

    def decide(name: str) -> bool:
        calls[0] += 1
        reply = client.evalsha(
            sha,
            1,
            f"throttle:{name}",
            f"raw{calls[0]}",
            repr(interval),
            repr(burst * interval),
            0,
            repr(interval),
            repr(float(burst)),
        )
        return reply[0] == 1

    return decide


def bare(url: str, rate: float, per: float, burst: int) -> Decide:
    """Context, not an anchor: the admit script's one round trip with nothing around it -- a
    command packed by hand on a bare socket, its reply split, not parsed: the least any
    library that decides by one round trip from Python can cost on this machine (what the
    ">= 1.5x the fastest anchor" goal is up against when the anchors are near it)."""
    import socket

    client = redis.Redis.from_url(url)
    text = (resources.files("redlock_deco.lua") / "throttle_admit.lua").read_text()
    sha = client.script_load(text)
    kwargs = client.connection_pool.connection_kwargs
    sock = socket.create_connection((kwargs.get("host", "localhost"), kwargs.get("port", 6379)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    interval = per / rate * 1e6
    terms = [repr(interval), repr(burst * interval), "0", repr(interval), repr(float(burst))]
    calls = [0]

    def decide(name: str) -> bool:
        calls[0] += 1
        args = ["EVALSHA", sha, "1", f"throttle:{name}", f"bare{calls[0]}", *terms]
        parts = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg.encode()
            parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
        sock.sendall(b"".join(parts))
        reply = sock.recv(256)
        while reply.count(b"\r\n") < 3:  # "*2", the code, the delay
            reply += sock.recv(256)
        return reply.split(b"\r\n")[1] == b":1"

    return decide


# -- 1. the tight loop ------------------------------------------------------------------------


@dataclass
class Loop:
    """One library's tight-loop samples at one limit (summed over the rounds)."""

    rates: list[float] = field(default_factory=list)  # decisions/s, one per round
    decisions: int = 0
    admitted: int = 0
    client_cpu: float = 0.0  # seconds
    server_cpu: float = 0.0  # seconds (INFO cpu)
    commands: dict[str, int] = field(default_factory=dict)  # commandstats calls, by command

    @property
    def rate(self) -> float:
        return statistics.median(self.rates) if self.rates else float("nan")

    def per_decision(self, total: float) -> float:
        return total / max(1, self.decisions)

    @property
    def commands_per_decision(self) -> float:
        return self.per_decision(sum(self.commands.values()))


def _loop(decide: Decide, name: str, seconds: float, client: Any, into: Loop) -> None:
    client.config_resetstat()
    cpu_before, cpu = server_cpu(client), time.process_time()
    decisions = admitted = 0
    started = time.perf_counter()
    while True:
        for _ in range(50):
            admitted += decide(name)
        decisions += 50
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            break
    into.client_cpu += time.process_time() - cpu
    into.server_cpu += server_cpu(client) - cpu_before
    stats = client.info("commandstats")
    for command, values in stats.items():
        if not command.startswith(("cmdstat_config", "cmdstat_info")):
            name_ = command.removeprefix("cmdstat_")
            into.commands[name_] = into.commands.get(name_, 0) + values["calls"]
    into.rates.append(decisions / elapsed)
    into.decisions += decisions
    into.admitted += admitted


def loops(
    url: str, libraries: list[str], rounds: int, seconds: float = LOOP
) -> dict[str, dict[str, Loop]]:
    """library -> "allowed"/"denied" -> its samples; the rounds interleave the libraries,
    so machine noise hits them alike."""
    client = redis.Redis.from_url(url)
    client.flushall()
    found: dict[str, dict[str, Loop]] = {}
    deciders: dict[tuple[str, str, str], Decide] = {}
    every: dict[str, Factory] = {FLOOR: bare, RAW: raw}
    every.update({name: LIMITERS[name][0] for name in libraries})
    for index, (library, factory) in enumerate(every.items()):
        found[library] = {}
        for limit, terms in (("allowed", OPEN), ("denied", SHUT)):
            decide = factory(url, *terms)
            name = f"bench:loop:{index}:{limit}"  # a name of its own
            decide(name)  # connect, load scripts
            deciders[(library, limit, name)] = decide
            found[library][limit] = Loop()
    for round_ in range(rounds):
        order = list(deciders.items())
        for (library, limit, name), decide in order if round_ % 2 == 0 else order[::-1]:
            _loop(decide, name, seconds, client, found[library][limit])
    return found


# -- 2. memory per name -----------------------------------------------------------------------


@dataclass
class Memory:
    bytes_per_name: float  # used_memory after minus before, per name
    keys_per_name: float
    expiring: float  # the share of those keys with a TTL
    ttl: float  # a sample key's TTL, seconds (-1: none)


def _keyspace(client: Any) -> tuple[int, int]:
    db = client.info("keyspace").get("db0", {})
    return int(db.get("keys", 0)), int(db.get("expires", 0))


def memory(url: str, library: str, names: int = NAMES) -> Memory:
    """One decision on each of ``names`` names (1 per 60 s: nothing expires meanwhile)."""
    client = redis.Redis.from_url(url)
    decide = LIMITERS[library][0](url, *MEMORY)
    decide("bench:warm")  # scripts loaded, connections made: not the names' memory
    client.flushall()
    time.sleep(0.05)
    before = int(client.info("memory")["used_memory"])
    for index in range(names):
        decide(f"n{index}")
    after = int(client.info("memory")["used_memory"])
    keys, expiring = _keyspace(client)
    sample = next(iter(client.scan_iter(count=100)), None)
    ttl = client.pttl(sample) / 1000 if sample is not None else -1.0
    client.flushall()
    return Memory(
        (after - before) / names, keys / names, expiring / max(1, keys), ttl if ttl >= 0 else -1.0
    )


# -- 3. accuracy under 8 processes ------------------------------------------------------------


@dataclass
class Accuracy:
    library: str
    rate: float
    per: float
    burst: int
    calls: int
    seconds: float  # T: the first request sent -> the last reply
    admissions: list[tuple[float, float]]  # (sent, replied) of every admitted call
    per_process: list[int]

    @property
    def admitted(self) -> int:
        return len(self.admissions)

    def bound(self, seconds: float) -> float:
        """GCRA: at most burst + rate * T / per start in any T seconds."""
        return self.burst + self.rate * seconds / self.per

    @property
    def ideal(self) -> float:
        return self.bound(self.seconds)

    @property
    def error(self) -> float:
        """Over (+) or under (-) admission of the whole run, as a fraction of the ideal."""
        return self.admitted / self.ideal - 1

    def by_reply(self, window: float) -> int:
        """The most admissions replied within any ``window`` seconds (the client's view)."""
        replies = sorted(replied for _, replied in self.admissions)
        most = first = 0
        for last, at in enumerate(replies):
            while replies[first] < at - window:
                first += 1
            most = max(most, last - first + 1)
        return most

    def definite(self, window: float) -> int:
        """The most admissions definitely decided within any ``window`` seconds: sent at or
        after its start and replied by its end (so the server decided inside it)."""
        spans = sorted(self.admissions)
        sent = [s for s, _ in spans]
        most = 0
        for start in sent:  # a window that holds the most starts where some admission was sent
            end = start + window
            inside = spans[bisect.bisect_left(sent, start) : bisect.bisect_right(sent, end)]
            most = max(most, sum(1 for _, replied in inside if replied <= end))
        return most

    def steady_rate(self) -> float:
        """Admissions/s after the first ``burst``: the least-squares slope of the admissions'
        count against the instants their calls returned (robust to a late first or last one)."""
        done = sorted(replied for _, replied in self.admissions)[self.burst :]
        if len(done) < 3:
            return float("nan")
        return statistics.linear_regression(done, range(len(done))).slope


def _decider(library: str, url: str, rate: float, per: float, burst: int) -> Decide:
    if library != WAITING:
        return LIMITERS[library][0](url, rate, per, burst)
    import redlock_deco

    redlock_deco.register_provider("default", url)

    throttles: dict[str, Any] = {}

    def decide(name: str) -> bool:  # sleeps until its reserved slot: every call admitted
        throttle = throttles.get(name)
        if throttle is None:
            throttle = throttles[name] = redlock_deco.Throttle(
                name, rate=rate, per=per, burst=burst, wait=None
            )
        return bool(throttle.acquire())

    return decide


def _worker(
    url: str, scenarios: list[str], index: int, seconds: float, barrier: Any, out: Any
) -> None:
    for library in scenarios:
        decide = _decider(library, url, *ACCURATE)
        decide(f"bench:warm:{index}")  # connections, scripts: outside the run
        admissions: list[tuple[float, float]] = []
        calls = 0
        barrier.wait(120)
        first = time.time()
        stop = first + seconds
        last = first
        while last < stop:
            sent = time.time()
            admitted = decide("bench:accuracy")
            last = time.time()
            calls += 1
            if admitted:
                admissions.append((sent, last))
        out.put((library, index, calls, first, last, admissions))


def accuracy(url: str, libraries: list[str], seconds: float = 3.0) -> dict[str, Accuracy]:
    """Each library, then redlock-deco waiting, with ``PROCESSES`` processes on one name."""
    scenarios = [*libraries, *([WAITING] if OURS in libraries else [])]
    ctx = multiprocessing.get_context("spawn")
    client = redis.Redis.from_url(url)
    barrier, out = ctx.Barrier(PROCESSES + 1), ctx.Queue()  # + this process: the start
    workers = [
        ctx.Process(target=_worker, args=(url, scenarios, i, seconds, barrier, out))
        for i in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    found: dict[str, Accuracy] = {}
    rate, per, burst = ACCURATE
    for library in scenarios:
        client.flushall()
        barrier.wait(180)
        results = [out.get(timeout=seconds + 180) for _ in workers]
        assert all(r[0] == library for r in results)
        admissions = [a for r in results for a in r[5]]
        began = min(r[3] for r in results)
        ended = max(r[4] for r in results)
        found[library] = Accuracy(
            library,
            rate,
            per,
            burst,
            sum(r[2] for r in results),
            ended - began,
            admissions,
            [len(r[5]) for r in sorted(results, key=lambda r: r[1])],
        )
    for worker in workers:
        worker.join(30)
    client.flushall()
    return found


# -- the whole run ----------------------------------------------------------------------------


@dataclass
class ThrottleRun:
    loops: dict[str, dict[str, Loop]] = field(default_factory=dict)
    memory: dict[str, Memory] = field(default_factory=dict)
    accuracy: dict[str, Accuracy] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # library -> install hint
    rounds: int = 0
    seconds: float = 0.0  # per accuracy run
    names: int = NAMES  # in the memory run


def measure(
    url: str,
    seconds: float = 3.0,
    rounds: int = 10,
    names: int = NAMES,
    step: Callable[[str], None] = lambda what: None,
) -> ThrottleRun:
    found, missing = available()
    run = ThrottleRun(missing=missing, rounds=rounds, seconds=seconds, names=names)
    for library, install in missing.items():
        step(f"throttle: {library} is not installed, skipped (`{install}`)")
    step(f"throttle: tight loops, {rounds} interleaved rounds")
    run.loops = loops(url, found, rounds)
    for library in found:
        step(f"throttle: memory per name, {names:,} names: {library}")
        run.memory[library] = memory(url, library, names)
    step(f"throttle: accuracy, {PROCESSES} processes x {seconds:g} s per library")
    run.accuracy = accuracy(url, found, seconds)
    return run


def commands_per_call(run: ThrottleRun, library: str) -> tuple[float, float]:
    """(server commands per admitted call, per refused call) of ``library``: the all-allowed
    loop's average, and the mostly-denied loop's with its few admitted calls taken out at
    that average."""
    allowed, denied = run.loops[library]["allowed"], run.loops[library]["denied"]
    admitted = allowed.commands_per_decision
    refused = max(1, denied.decisions - denied.admitted)
    total = sum(denied.commands.values())
    return admitted, (total - denied.admitted * admitted) / refused


def best_anchor(run: ThrottleRun, limit: str = "allowed") -> tuple[str, float] | None:
    anchors = {n: v[limit].rate for n, v in run.loops.items() if n not in (OURS, RAW, FLOOR)}
    if not anchors:
        return None
    best = max(anchors, key=anchors.__getitem__)
    return best, anchors[best]


def summary(run: ThrottleRun) -> str:
    """The tables, as plain text (the report renders its own markdown)."""
    rate, per, burst = ACCURATE
    ours = run.loops.get(OURS, {}).get("allowed", Loop()).rate
    lines = [
        f"tight loop, one process, one name ({run.rounds} rounds x {LOOP:g} s, median):",
        f"  {'library':<40} {'allowed/s':>9} {'denied/s':>9} {'vs ours':>7}  "
        "commands/call  server CPU us/call  client CPU us/call",
    ]
    for name, by_limit in run.loops.items():
        a, d = by_limit["allowed"], by_limit["denied"]
        commands = f"{a.commands_per_decision:.1f} | {d.commands_per_decision:.1f}"
        cpu = f"{a.per_decision(a.server_cpu) * 1e6:.1f} | {d.per_decision(d.server_cpu) * 1e6:.1f}"
        client = (
            f"{a.per_decision(a.client_cpu) * 1e6:.0f} | {d.per_decision(d.client_cpu) * 1e6:.0f}"
        )
        lines.append(
            f"  {name:<40} {a.rate:>9,.0f} {d.rate:>9,.0f} {a.rate / ours:>6.2f}x  "
            f"{commands:>13}  {cpu:>18}  {client:>18}"
        )
    lines.append("  (x | y: all allowed | mostly denied; commands from INFO commandstats, a")
    lines.append("  script's inner commands counted too)")
    for limit in ("allowed", "denied"):
        best = best_anchor(run, limit)
        if best and OURS in run.loops:
            lines.append(
                f"  {limit}: ours vs the fastest anchor ({best[0]}): "
                f"{run.loops[OURS][limit].rate / best[1]:.2f}x"
            )
    floor = run.loops.get(FLOOR, {}).get("allowed")
    best = best_anchor(run)
    if floor and best and OURS in run.loops:
        lines.append(
            f"  all allowed, vs one bare round trip ({FLOOR}): ours "
            f"{run.loops[OURS]['allowed'].rate / floor.rate:.2f}x, {best[0]} "
            f"{best[1] / floor.rate:.2f}x"
        )
    lines += [
        f"memory, one decision on each of {run.names:,} names ({MEMORY[0]} per {MEMORY[1]:g} s):",
        f"  {'library':<40} {'bytes/name':>10} {'keys/name':>9} {'expiring':>8} {'ttl s':>7}",
    ]
    for name, m in run.memory.items():
        lines.append(
            f"  {name:<40} {m.bytes_per_name:>10,.0f} {m.keys_per_name:>9.2f} "
            f"{m.expiring:>8.0%} {m.ttl:>7.1f}"
        )
    lines += [
        f"accuracy, {PROCESSES} processes on one name, {rate:g} per {per:g} s, burst {burst} "
        f"(GCRA bound: {burst} + {rate:g} * T):",
        f"  {'library':<40} {'calls':>7} {'admitted':>8} {'ideal':>6} {'error':>7} "
        f"{'1 s: reply|sure':>15} {'100 ms: reply|sure':>18} {'per process':>11}",
    ]
    for name, acc in run.accuracy.items():
        one, tenth = (f"{acc.by_reply(w)} | {acc.definite(w)}" for w in WINDOWS)
        spread = f"{min(acc.per_process)}-{max(acc.per_process)}"
        lines.append(
            f"  {name:<40} {acc.calls:>7,} {acc.admitted:>8} {acc.ideal:>6.0f} "
            f"{acc.error:>+7.1%} {one:>15} {tenth:>18} {spread:>11}"
        )
    bounds = ", ".join(f"{burst + rate * w / per:g} in any {w:g} s" for w in WINDOWS)
    lines.append(f"  bounds: {bounds}; reply: counted by reply instant, sure: definitely inside")
    if WAITING in run.accuracy:
        steady = run.accuracy[WAITING].steady_rate()
        lines.append(
            f"  {WAITING}: {steady:.2f} admitted/s after the burst "
            f"({steady / (rate / per) - 1:+.2%} vs {rate / per:g}/s)"
        )
    for name, install in run.missing.items():
        lines.append(f"{name} is not installed, skipped: `{install}`")
    return "\n".join(lines)


def main() -> int:
    import argparse
    import sys

    from redlock_deco.testing import RedisServer

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.throttle_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="per accuracy run (3)")
    parser.add_argument("--rounds", type=int, default=10, help="tight-loop rounds (10)")
    parser.add_argument("--names", type=int, default=NAMES, help=f"memory run ({NAMES:,})")
    args = parser.parse_args()
    started = time.monotonic()
    with RedisServer() as server:
        run = measure(
            server.url,
            args.seconds,
            args.rounds,
            args.names,
            step=lambda what: print(f"... {what}", file=sys.stderr, flush=True),
        )
    print(f"python -m benchmarks.throttle_bench {' '.join(sys.argv[1:])}".rstrip())
    print(summary(run))
    print(f"({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

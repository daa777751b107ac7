"""The throttle's scripts (``lua/throttle_*.lua``) under seeded schedules on the simulated
store: virtual callers on a virtual server clock, with the faults a throttle meets -- a reply
lost and the command re-sent (at once, or after other callers' commands), a command that never
ran, a waiter cancelled before its slot (its give-back re-sent too), the server's clock
jumping forward -- and, after every command, the checks:

- ``bound``: the calls that run (admitted, not cancelled) start in slots that keep the GCRA
  bound: in any window ``[a, b]`` of slot times, their costs add up to at most
  ``burst + (b - a) / interval`` (to the microsecond the server's clock counts);
- ``model``: each admit's reply is exactly what GCRA says from the state it found (the stored
  arrival time, or none) and the server's time: admitted or refused, and the delay;
- ``once``: a re-sent admit (no other reservation since) answers the same slot and moves
  nothing; a refusal changes nothing;
- ``expiry``: the key always expires, never before its arrival time has passed (an early
  expiry would forget reservations and admit a new burst);
- ``wait``: an admitted call's slot is within its wait; a refused one's is beyond it.

Arguments come from the production step builders (``_throttle.admit_step``/``return_step``),
so the checks follow every change of the protocol. ``run(seed, transform)`` raises
AssertionError on the first broken check; ``test_simulation`` runs the seeds on the scripts
as they are, and ``mutants.py`` uses :func:`scenario` to kill the throttle's mutants.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from redlock_deco import _throttle as throttle
from redlock_deco._protocol import Eval

from .store import Store

Transform = Callable[[str], str] | None
T0 = 1_700_000_000_000_000  # the server's clock at the start, in microseconds
KEY = "throttle:sim"
SEEDS = 300  # per run of the fast test (about 2 s)


@dataclass
class Call:
    token: str
    cost: float
    wait: float | None
    step: Eval
    slot: int | None = None  # server us, once admitted
    cancelled: bool = False
    resends: int = 0  # how many times the admit will be sent again (its reply was lost)


@dataclass
class World:
    rng: random.Random
    transform: Transform
    options: throttle.ThrottleOptions = field(init=False)
    now: int = T0
    store: Store = field(init=False)
    calls: list[Call] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        rng = self.rng
        rate = rng.choice((1.0, 3.0, 10.0, 0.5, 250.0))
        burst = rng.choice((1.0, 2.0, 5.0, max(1.0, rate), 1.5))
        self.options = throttle.ThrottleOptions(rate, rng.choice((1.0, 0.1, 7.0)), burst, None,
                                                "default", "throttle:")  # fmt: skip
        self.store = Store(lambda: self.now, transform=self.transform)

    @property
    def interval(self) -> float:
        return self.options.interval_us

    def send(self, step: Eval) -> Any:
        return self.store.execute(("EVAL", step.script.source, len(step.keys), *step.keys,
                                   *step.args))  # fmt: skip

    def stored(self) -> tuple[float | None, str | None]:
        """The arrival time (absolute us) and the last reservation's token, as stored."""
        offset, base, token = self.raw()
        tat = None if offset is None or base is None else offset + base
        return tat, token

    def raw(self) -> tuple[float | None, int | None, str | None]:
        """tat (us after base), base, tok as stored (``gcra <tat> <base> <tok> <iv> <b>``)."""
        value = self.store.execute(("GET", KEY))
        if value is None:
            return None, None, None
        mark, tat, base, token = value.decode().split()[:4]
        assert mark == "gcra", value
        return float(tat), int(float(base)), token

    # -- checks ------------------------------------------------------------------------------

    def fail(self, check: str, message: str) -> None:
        tail = "\n".join(self.log[-25:])
        raise AssertionError(f"{check}: {message}\n{self.options}\n{tail}")

    def check_state(self) -> None:
        tat, _ = self.stored()
        pttl = self.store.pttl(KEY)
        if tat is None:
            return
        if pttl < 0:
            self.fail("expiry", f"the key has no expiry (pttl {pttl})")
        if self.now + pttl * 1000 < tat - 1000:  # ms granularity
            self.fail("expiry", f"expires at {self.now + pttl * 1000}, before its tat {tat}")

    def check_bound(self) -> None:
        running = sorted((c.slot, c.cost) for c in self.calls if c.slot is not None
                         and not c.cancelled)  # fmt: skip
        capacity = self.options.burst
        for i in range(len(running)):
            total = 0.0
            for j in range(i, len(running)):
                total += running[j][1]
                # Slots are whole microseconds, each rounded up: a gap may shrink by < 1 us.
                allowed = capacity + (running[j][0] - running[i][0] + 1) / self.interval
                if total > allowed + 1e-6:
                    self.fail("bound", f"{total:g} units start in [{running[i][0]}, "
                                       f"{running[j][0]}]: more than {allowed:.4f}")  # fmt: skip

    def expected(self, call: Call, offset: float | None, base: int | None) -> tuple[bool, int]:
        """What GCRA answers ``call`` from the stored state at the server's time now, in the
        script's own arithmetic (microseconds after ``base``)."""
        now = self.now - (self.now if base is None else base)
        start = now if offset is None or offset < now else offset
        due = start + float(repr(call.cost * self.interval))
        delay = max(0, math.ceil(due - float(repr(self.options.burst * self.interval)) - now))
        longest = -1 if call.wait is None else math.floor(call.wait * 1e6)
        return (longest < 0 or delay <= longest), delay

    # -- events ------------------------------------------------------------------------------

    def admit(self, call: Call, resent: bool) -> None:
        tat, token = self.stored()
        offset, base, _ = self.raw()
        reply = self.send(call.step)
        answer = throttle.admission(reply)
        delay = round(answer.delay * 1e6)
        self.log.append(f"t={self.now - T0} admit {call.token} cost={call.cost:g} "
                        f"wait={call.wait} resent={resent} -> {reply}")  # fmt: skip
        after, _ = self.stored()
        if resent and token == call.token:
            if not answer.admitted or after != tat or call.slot is None:
                self.fail("once", f"a re-sent admit of the last reservation moved tat "
                                  f"{tat} -> {after} ({reply})")  # fmt: skip
            if abs(self.now + delay - max(call.slot, self.now)) > 1:  # a slot gone by: at once
                self.fail("once", f"a re-sent admit answered slot {self.now + delay}, "
                                  f"first {call.slot}")  # fmt: skip
            return
        admitted, expected = self.expected(call, offset, base)
        if (answer.admitted, delay) != (admitted, expected):
            self.fail("model", f"answered {(answer.admitted, delay)}, GCRA says "
                               f"{(admitted, expected)} from tat {tat}")  # fmt: skip
        if not answer.admitted and after != tat:
            self.fail("once", f"a refusal moved tat {tat} -> {after}")
        longest = None if call.wait is None else call.wait * 1e6
        if answer.admitted and longest is not None and delay > longest:
            self.fail("wait", f"admitted {delay} us ahead, wait {longest} us")
        if answer.admitted:
            call.slot = self.now + delay  # a re-send after others reserved counts again

    def give_back(self, call: Call) -> None:
        reply = self.send(throttle.return_step(KEY, call.token, call.cost, self.options))
        self.log.append(f"t={self.now - T0} return {call.token} -> {reply}")

    def tick(self) -> None:
        rng = self.rng
        draw = rng.random()
        if draw < 0.03:
            self.now += int(rng.uniform(1, 6) * self.interval)  # the clock jumps forward
            self.log.append(f"t={self.now - T0} clock jump")
        else:
            self.now += int(rng.expovariate(1.0) * self.interval * rng.choice((0.1, 0.5, 1.5)))
        pending = [c for c in self.calls if c.resends > 0]
        if pending and rng.random() < 0.5:
            call = rng.choice(pending)
            call.resends -= 1
            self.admit(call, resent=True)
        elif rng.random() < 0.15:
            waiting = [c for c in self.calls if c.slot is not None and c.slot > self.now
                       and not c.cancelled]  # fmt: skip
            if waiting:
                call = rng.choice(waiting)
                call.cancelled = True
                for _ in range(1 + (rng.random() < 0.3)):  # re-sent, maybe
                    self.give_back(call)
        else:
            burst = self.options.burst
            cost = rng.choice((1.0, 1.0, 1.0, min(2.0, burst), burst, 0.5))
            wait = rng.choice((None, 0.0, self.interval * 2 / 1e6, self.interval * 10 / 1e6))
            token = f"t{len(self.calls)}"
            step = throttle.admit_step(KEY, token, cost, self.options, wait)
            call = Call(token, cost, wait, step)
            self.calls.append(call)
            fault = rng.random()
            if fault < 0.05:
                call.resends = 1  # the command never ran: only the re-send does
                self.log.append(f"t={self.now - T0} admit {token} lost before it ran")
            else:
                self.admit(call, resent=False)
                if fault < 0.2:
                    call.resends = rng.choice((1, 1, 2))  # its reply lost: sent again
        self.check_state()
        self.check_bound()


def run(seed: int, transform: Transform = None, events: int = 60) -> None:
    world = World(random.Random(f"throttle:{seed}"), transform)
    for _ in range(events):
        world.tick()


def no_drift(transform: Transform = None, calls: int = 3000) -> None:
    """A name saturated for ``calls`` reservations (rate 30/s, an interval of 33333.3 us):
    the arrival time stays exactly ``calls`` intervals on, to a thousandth of a microsecond
    (kept in absolute microseconds, a double's step of 0.25 us lost 0.08 us a call: 250 us
    over this run, a rate creeping up without bound)."""
    world = World(random.Random("throttle:drift"), transform)
    world.options = throttle.ThrottleOptions(30.0, 1.0, 1.0, None, "default", "throttle:")
    for index in range(calls):
        world.send(throttle.admit_step(KEY, f"d{index}", 1.0, world.options, None))
    tat, _ = world.stored()
    exact = T0 + calls * (Fraction(1, 30) * 1_000_000)
    if tat is None or abs(Fraction(tat) - exact) > Fraction(1, 1000):
        world.fail("bound", f"after {calls} calls the arrival time is {tat}, not {float(exact)}")


def foreign(transform: Transform = None) -> None:
    """A string at the key that is no throttle's state (a lock's token) is left as it is, and
    the call refused with code 2: overwritten, a lock's key let a second holder in."""
    world = World(random.Random("throttle:foreign"), transform)
    world.store.execute(("SET", KEY, "host:1:ab:cd", "PX", 30000))
    reply = world.send(throttle.admit_step(KEY, "f", 1.0, world.options, None))
    value = world.store.execute(("GET", KEY))
    if reply != [2, 0] or value != b"host:1:ab:cd":
        world.fail("foreign", f"answered {reply}, and the key holds {value!r}")


def scenario(transform: Transform = None, seeds: int = SEEDS) -> None:
    """Every seed, then :func:`no_drift` and :func:`foreign` (the mutants' scenario):
    AssertionError at the first broken check."""
    for seed in range(seeds):
        run(seed, transform)
    no_drift(transform)
    foreign(transform)

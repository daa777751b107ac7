"""``Throttle`` and its asyncio twin: how many calls may *start* per period, per name.

GCRA (the generic cell rate algorithm) on the Redis server's clock, in one script
(``lua/throttle_admit.lua``): a name's key holds its *theoretical arrival time*, and in any
``T`` seconds at most ``burst + rate * T / per`` calls start (a call of ``cost`` counts as
``cost`` calls). One round trip decides a call, waiting included: a call that may wait
*reserves* the next slot -- the script moves the arrival time past it, so the next caller
queues behind -- and learns how far away it is; it then sleeps that long and runs, with no
second request, no polling and no herd of waiters woken at once. Callers are served in the
order their requests reach the server. A slot further away than the caller's ``wait`` is
refused at once and nothing is taken (``Throttled``).

What holds, and where:

- The bound is on the server's schedule. A call starts after its slot, late by the reply's
  delivery and the sleep's overshoot, never early (the sleep starts when the reply arrives,
  not when the request left), so two calls' starts can be closer than their slots were when
  the first one's reply was slow.
- A re-sent request (the client's retry after a lost reply) finds its own token as the last
  reservation and gets the same answer, counted once. If another caller reserved in between,
  the re-sent request counts again: a slot wasted, never one too many admitted.
- A call interrupted or cancelled while its request is out or while it sleeps for its slot
  gives the slot back (a second round trip) when no later caller has reserved since;
  otherwise the slot stays used -- giving it back would move the next slot before those
  already promised -- and costs the name one call's worth of rate, once. A process killed
  while it sleeps costs the same.
- The server's clock jumping forward admits at once what the jump made due (up to ``burst``);
  jumping back makes callers wait (or be refused) until it has caught up. Never more than the
  bound on the server's own clock.
- Callers that disagree on ``rate``/``per``/``burst`` for one name share its arrival time,
  each judged by its own terms at its admission (as redis-cell's does; ``limits`` puts the
  rate in the key, so callers with different rates count separately).
- A failover loses what the replica had not received: on a primary with replicas (Sentinel,
  a cluster shard), reservations made just before the primary died are forgotten, and the
  promoted replica admits a new burst. A throttle has no ``replicas=`` (WAIT) option: where
  that matters, keep throttles on a primary without failover, or accept one extra burst.
- A call cancelled by a timeout around it keeps its slot used whenever someone reserved after
  it, and those behind still wait their turn after it: keep ``wait`` below any timeout around
  the call, so a call that would not reach its slot in time is refused at once instead.
- A quorum provider is refused (ProviderError): the quorum's majority vote has no sound
  meaning for a shared arrival time -- masters that missed a reservation would admit calls
  in its slot.

Why one module: the pure decision (steps and replies), the sync class and its asyncio twin,
side by side as ``_primitive.py`` keeps them (tests/core/test_twins.py compares them).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from . import _events as events
from . import _eviction as eviction
from . import _providers as providers
from . import _scripts as scripts
from . import _tokens as tokens
from ._errors import ProviderError, RedlockDecoError, Throttled
from ._events import Source
from ._fanout import QuorumAsyncTarget, QuorumSyncTarget
from ._naming import stable_name
from ._options import MAX_SECONDS, check_options, check_wait
from ._protocol import Eval
from ._scripts import Outcome
from ._signatures import explains_bad_arguments
from ._worker import quiet, start

DEFAULT: Any = object()


@dataclass(frozen=True, slots=True)
class ThrottleOptions:
    """How one throttle admits calls (checked by ``_options``)."""

    rate: float
    per: float
    burst: float
    wait: float | None
    provider: str
    prefix: str
    label: str | None = None
    # The labels of its events, set once (see LeaseOptions.source).
    source: Source | None = None

    @property
    def interval_us(self) -> float:
        """Microseconds between two admissions at the steady rate."""
        return self.per / self.rate * 1e6


def build_throttle_options(api: str, /, **given: object) -> ThrottleOptions:
    """Check ``api``'s options (defaults for those not given) and return them frozen."""
    return throttle_options(check_options(api, given))


def throttle_options(values: dict[str, Any]) -> ThrottleOptions:
    """The checked values (``_options.check_options``) a throttle admits calls by."""
    label = values["label"]
    source = None if label is None else Source.direct(label, values["provider"])
    return ThrottleOptions(values["rate"], values["per"], values["burst"], values["wait"],
                           values["provider"], values["prefix"], label, source)  # fmt: skip


# -- the decision, free of I/O ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admission:
    """A throttle's answer: admitted (its slot ``delay`` seconds after the server decided:
    0 is at once), or refused with nothing taken (the earliest slot was ``delay`` away)."""

    admitted: bool
    delay: float


def check_cost(cost: object, options: ThrottleOptions) -> float:
    """``cost`` as a number above 0 and at most ``burst`` (a larger one could never start)."""
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        raise TypeError(f"cost must be a number above 0, got {cost!r:.40}")
    if not cost > 0:  # NaN fails the comparison too
        raise ValueError(f"cost must be above 0 and at most burst={options.burst:g}, got "
                         f"{cost!r:.40}")  # fmt: skip
    if cost > options.burst:
        raise ValueError(
            f"cost must be above 0 and at most burst={options.burst:g} (no more may ever start "
            f"at once, so a call of cost {cost!r:.20} would never be admitted), got {cost!r:.40}"
        )
    return float(cost)


def admit_step(key: str, token: str, cost: float, options: ThrottleOptions,
               wait: float | None) -> Eval:  # fmt: skip
    """The one request that decides a call (and reserves its slot if it may wait)."""
    interval = options.interval_us
    # "However far" is at most MAX_SECONDS too: sums stay far below what a double and
    # Redis's integers hold (a slot 2**63 us away came back negative, and ran at once).
    longest = math.floor((MAX_SECONDS if wait is None else wait) * 1e6)
    return Eval(scripts.THROTTLE_ADMIT, (key,),
                (token, repr(cost * interval), repr(options.burst * interval), longest,
                 repr(interval), repr(options.burst)))  # fmt: skip


def admission(reply: Any, key: str = "") -> Admission:
    """The admit script's reply, read (an unknown code is an error, never a refusal)."""
    decided = scripts.outcome("admit", reply[0])
    if decided is Outcome.WRONG_TYPE:
        raise RedlockDecoError(
            f"{key!r} holds a value that is no throttle's state (a lock's token, or data of "
            "the application's), so it was left as it was and the call not admitted; give "
            "the throttle another name or prefix",
            key=key,
        )
    return Admission(decided is Outcome.ADMITTED, int(reply[1]) / 1e6)


def return_step(key: str, token: str, cost: float, options: ThrottleOptions) -> Eval:
    """Give back the slot ``token`` reserved (see ``lua/throttle_return.lua``)."""
    return Eval(scripts.THROTTLE_RETURN, (key,), (token, repr(cost * options.interval_us)))


def call_token() -> str:
    """A token for one call: 64 random bits are plenty to tell a re-sent request from
    another caller's, and the key keeps only the last one."""
    return tokens.new_token()[-16:]


def _check_target(target: Any, options: ThrottleOptions) -> None:
    if isinstance(target, (QuorumSyncTarget, QuorumAsyncTarget)):
        raise ProviderError(
            f"a throttle needs one Redis (a server, a cluster or a Sentinel primary): provider "
            f"{options.provider!r} is a quorum of masters, where a master that missed a "
            "reservation would admit another call in its slot; use a single-node provider",
            provider=options.provider,
        )


def _decided(options: ThrottleOptions, name: str, key: str, answer: Admission) -> None:
    if events.listeners:
        source = options.source or Source.direct(name, options.provider)
        kind: events.EventKind = "admitted" if answer.admitted else "throttled"
        events.emit(kind, name, key, answer.delay, source)


def refused(name: str, key: str, answer: Admission, wait: float | None) -> Throttled:
    return Throttled(name=name, key=key, retry_after=answer.delay, wait=wait or 0.0)


# -- the shells -------------------------------------------------------------------------------


def admit(options: ThrottleOptions, name: str, key: str, cost: float,
          wait: float | None) -> Admission:  # fmt: skip
    """Decide a call; if it was given a slot ahead, sleep until it came. A call interrupted
    while its request is out or while it sleeps gives the slot back where that is safe (see
    the module docstring), as :func:`admit_async` does when cancelled."""
    target = providers.sync_target(options.provider)
    _check_target(target, options)
    token = call_token()
    answer: Admission | None = None
    try:
        answer = admission(target.execute(admit_step(key, token, cost, options, wait)), key)
        if not target.checked:  # an evicted arrival time admits a new burst (review 8, t02)
            eviction.start_check(target)
        if answer.admitted and answer.delay > 0:
            time.sleep(answer.delay)
    except BaseException as exc:
        # An interrupt: the request may have run, its answer lost with it (review 32: a
        # Ctrl-C in the round trip kept the slot, where a cancelled task gave it back). An
        # error is the server's or the connection's: the caller sees it, and a slot the
        # request may have taken stays used (rate only).
        if not isinstance(exc, Exception) and (answer is None or answer.admitted):
            _give_back(target, key, token, cost, options)
        raise
    _decided(options, name, key, answer)
    return answer


async def admit_async(options: ThrottleOptions, name: str, key: str, cost: float,
                      wait: float | None) -> Admission:  # fmt: skip
    """:func:`admit` on an asyncio client. A task cancelled while it sleeps, or while its
    request was out (redis-py 8 can complete a cancelled task's command and swallow the
    cancellation: review 8, t03), gives the slot back and is cancelled."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+; 3.10 relies on redis-py
    before = cancelling() if cancelling is not None else 0
    target = providers.async_target(options.provider)
    _check_target(target, options)
    if not target.checked:  # an evicted arrival time admits a new burst (review 8, t02)
        await eviction.check_async_once(target)
    token = call_token()
    try:
        reply = await target.execute(admit_step(key, token, cost, options, wait))
    except asyncio.CancelledError:
        # The request may have run: its slot back, if it is still the last one reserved.
        await _give_back_async(target, key, token, cost, options)
        raise
    answer = admission(reply, key)
    try:
        if cancelling is not None and cancelling() > before:
            raise asyncio.CancelledError
        if answer.admitted and answer.delay > 0:
            await asyncio.sleep(answer.delay)
    except BaseException:
        if answer.admitted:
            await _give_back_async(target, key, token, cost, options)
        raise
    _decided(options, name, key, answer)
    return answer


#: How long an interrupted or cancelled call waits for its give-back at most: it only saves
#: rate, and an unreachable server must not hold a Ctrl-C or a cancellation for the client's
#: whole timeout-and-retry budget (review 8, t04: 40 s and more with redis-py 8's defaults).
GIVE_BACK_WAIT = 0.25


def _give_back(target: Any, key: str, token: str, cost: float, options: ThrottleOptions) -> None:
    def send() -> None:
        with contextlib.suppress(Exception):  # unreachable: the slot stays used (rate only)
            target.execute(return_step(key, token, cost, options))

    # On a thread of its own: the interrupt goes on after GIVE_BACK_WAIT whatever happens.
    sender = threading.Thread(target=send, name="redlock-deco-give-back", daemon=True)
    if start(sender):
        sender.join(GIVE_BACK_WAIT)


async def _give_back_async(
    target: Any, key: str, token: str, cost: float, options: ThrottleOptions
) -> None:
    request = asyncio.ensure_future(target.execute(return_step(key, token, cost, options)))
    request.add_done_callback(quiet)  # a failed give-back is never "never retrieved" noise
    # Shielded and bounded: a second cancellation, or a slow server, lets the caller go on
    # while the request finishes by itself (or fails, costing rate only).
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(request), GIVE_BACK_WAIT)


# -- the classes ------------------------------------------------------------------------------


class _ThrottleOptions:
    """Name, options, and what both classes say of themselves."""

    api_name: str

    @explains_bad_arguments
    def __init__(
        self,
        name: str,
        *,
        rate: float,
        per: float = 1.0,
        burst: float | None = None,
        wait: float | None = 10.0,
        provider: str = "default",
        prefix: str = "throttle:",
        label: str | None = None,
    ) -> None:
        options = build_throttle_options(
            "Throttle", rate=rate, per=per, burst=burst, wait=wait, provider=provider,
            prefix=prefix, label=label,
        )  # fmt: skip
        if not isinstance(name, str):
            raise TypeError(f"a throttle's name must be a str, got {name!r:.80}")
        self.name: str = stable_name(name, "throttle name", "calls would share no rate")
        self.key: str = options.prefix + self.name
        self.options: ThrottleOptions = options

    @property
    def rate(self) -> float:
        return self.options.rate

    @property
    def per(self) -> float:
        return self.options.per

    @property
    def burst(self) -> float:
        return self.options.burst

    def __repr__(self) -> str:
        o = self.options
        return (f"<{self.api_name} name={self.name!r} rate={o.rate:g} per={o.per:g} "
                f"burst={o.burst:g} key={self.key!r}>")  # fmt: skip

    def _wait(self, wait: object) -> float | None:
        return self.options.wait if wait is DEFAULT else check_wait(wait)


class Throttle(_ThrottleOptions):
    """A distributed rate limit: at most ``rate`` calls per ``per`` seconds start, per name,
    ``burst`` (``rate`` by default, at least 1) at once after a quiet spell: in any ``T``
    seconds at most ``burst + rate * T / per`` start, on the Redis server's clock (GCRA, one
    round trip per call; the key is ``prefix + name``, one string that expires when idle).

    A call re-sent by the client's retry is counted once, unless another caller reserved in
    between (then a slot is wasted, never one too many admitted); a call interrupted or
    cancelled while it sleeps for its slot gives the slot back when nobody reserved after it.
    A quorum provider is refused (ProviderError). Callers that disagree on the rate of a name
    share its arrival time, each judged by its own terms.

    ``acquire(cost=1, wait=...)`` returns True once the call may start -- at once, or after
    sleeping until the slot it reserved -- and False, taking nothing, when no slot comes
    within ``wait`` (the object's ``wait`` when not given; ``None``: any slot, however far;
    ``0``: only at once; a negative one is a ValueError). ``with throttle:`` acquires a cost
    of 1 and raises ``Throttled`` instead of returning False; leaving the block gives nothing
    back (a call that started has started).
    """

    api_name = "redlock_deco.Throttle"

    def acquire(self, cost: float = 1, wait: float | None = DEFAULT) -> bool:
        """Let one call of ``cost`` (above 0, at most ``burst``) start: True at once or after
        sleeping until its reserved slot; False, taking nothing, if no slot comes within
        ``wait`` (not given: the object's; None: however far; 0: only at once)."""
        answer = admit(self.options, self.name, self.key, check_cost(cost, self.options),
                       self._wait(wait))  # fmt: skip
        return answer.admitted

    def __enter__(self) -> Throttle:
        wait = self.options.wait
        answer = admit(self.options, self.name, self.key, 1.0, wait)
        if not answer.admitted:
            raise refused(self.name, self.key, answer, wait)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class AsyncThrottle(_ThrottleOptions):
    """``Throttle`` for asyncio (``redlock_deco.asyncio.Throttle``): ``await acquire()``,
    ``async with``."""

    api_name = "redlock_deco.asyncio.Throttle"

    async def acquire(self, cost: float = 1, wait: float | None = DEFAULT) -> bool:
        """``Throttle.acquire`` for asyncio: the task sleeps until its slot (a cancelled one
        gives the slot back when nobody reserved after it)."""
        answer = await admit_async(self.options, self.name, self.key,
                                   check_cost(cost, self.options), self._wait(wait))  # fmt: skip
        return answer.admitted

    async def __aenter__(self) -> AsyncThrottle:
        wait = self.options.wait
        answer = await admit_async(self.options, self.name, self.key, 1.0, wait)
        if not answer.admitted:
            raise refused(self.name, self.key, answer, wait)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

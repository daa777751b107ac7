"""What every primitive shares: ownership bookkeeping, errors, and the explicit
acquire/release/extend/owned/holders/locked API with the context-manager protocol -- as a sync
class and its asyncio twin, side by side; tests/core/test_twins.py compares every method of the
two, normalised, and fails on any difference tests/support/twins.txt does not record and explain.

Why one module: the sync class and its asyncio twin must stay side by side to be read (and
compared) together, and both stand on one base that keeps an object's bookkeeping; every
method is a thin shell over ``_guard``, where the decisions are.
"""

from __future__ import annotations

import os
import time
import warnings
import weakref
from collections.abc import Callable
from types import FunctionType, TracebackType
from typing import Any, NoReturn, TypeVar

from . import _drivers as drivers
from . import _guard as guard
from . import _ownership as ownership
from . import _providers as providers
from . import _renewal as renewal
from ._errors import LockNotAcquired, LockNotOwned
from ._lifecycle import Lease, found_lost
from ._naming import stable_name
from ._options import LeaseOptions, acquire_wait, check_wait, extension, to_ms
from ._protocol import Kind

DEFAULT: Any = object()
P = TypeVar("P", bound="Primitive")
AP = TypeVar("AP", bound="AsyncPrimitive")


def _collected_holding(held: list[Lease], what: str) -> None:
    """An object was collected while ``acquire()`` still held ``held``: like an unclosed
    file, say so, and stop renewing at once (the leases expire within their ttl). Releasing
    here would mean I/O from the garbage collector, which may run inside any code."""
    # (This process's: a forked child's copy of the object holds nothing -- its parent does,
    # and goes on renewing; review 103a, F3.)
    pid = os.getpid()
    live = [lease for lease in held if lease.pid == pid and lease.held and lease.remaining()]
    for lease in live:
        lease._orphan()
    if live:
        warnings.warn(
            f"{what} was garbage-collected while holding what acquire() took (never "
            "released): it is no longer renewed and expires within its ttl; call release(), "
            "or use a `with` block",
            ResourceWarning,
            stacklevel=2,
        )


def _base_hook(hook: Any) -> bool:
    """Whether ``hook`` is one of this module's own ``__enter__``/``__exit__``... (the base's)."""
    # (by type: a proxy -- wrapt's FunctionWrapper -- answers for what it wraps)
    return type(hook) is ownership.ExitHook or (
        type(hook) is FunctionType and hook.__module__ == __name__
    )


_HOOK_NAMES = frozenset({"__enter__", "__aenter__", "__exit__", "__aexit__"})


class _Hooks(type):
    """The primitives' metaclass: a hook put on a class after it was made (instrumentation
    patching it, ``wrapt.wrap_function_wrapper(MyLock, "__exit__", ...)``, an assignment) is
    wrapped as a subclass's own are (see Base.__init_subclass__): review 83a, F3 -- left as
    it was, a generator's block left by another thread's step raised LockError and stayed
    held, and an older block's exit ended the generator's while its body ran."""

    def __setattr__(cls, name: str, value: Any) -> None:
        if name in _HOOK_NAMES and _unwrapped(value):
            value = ownership.overriding(value, name)
            type.__setattr__(cls, "_hooked", True)
        super().__setattr__(name, value)


def _unwrapped(hook: Any) -> bool:
    """Whether ``hook`` is a hook of the user's not yet wrapped (see ownership.overriding)."""
    return not (hook is None or ownership.is_hook(hook) or _base_hook(hook))


class Base(metaclass=_Hooks):
    """Name, options, what this object holds, and the ``with`` blocks open through it.

    Two kinds of holding (docs/concepts.md's ownership table):

    - ``with``/``async with`` blocks are *sections*, owned by the task running them (else the
      thread): they re-enter the lease of an open section of the same owner, are left by
      their own exit, and ``lease``/``extend``/``owned`` through this object act on the
      calling owner's newest block first.
    - A bare ``acquire()`` belongs to *this object*, like a ``threading.Lock``: it re-enters
      nothing (another object of the name, even in the same thread or task, waits or gets
      False; so does this object: a second ``acquire()`` waits for a ``release()``, which
      may come from any thread or task), and any thread or task may ``release()``,
      ``extend()`` or check it through the object. It is renewed while the object exists:
      an object collected while still holding stops renewing (ResourceWarning), and the
      lease expires within its ttl.
    """

    kind: Kind
    api_name: str  # how its user writes it: "Lock", "redlock_deco.asyncio.Lock"
    noun = "lock"
    is_async = False
    # Whether a hook of the class is one of the user's, wrapped (see _Hooks); inherited, so
    # that hooks put on a base later are its subclasses' too.
    _hooked = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _HOOK_NAMES:
            # The hook the class resolves to, if a subclass's own or a mixin's -- a function,
            # or a decorator's object (wrapt's: review 83a, F3) -- not the base's nor one
            # already wrapped (review 77a, F2: a mixin's exit was left as it was): set on
            # the class, where the metaclass wraps it.
            own = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
            if _unwrapped(own):
                setattr(cls, name, own)

    def __copy__(self) -> NoReturn:
        # (A copy shared the original's leases and blocks, and renewed its own only while
        # the original lived: what a deep copy's acquire() took was lost a ttl after the
        # original was collected -- review 84a, F3. threading.Lock refuses to be copied too.)
        raise TypeError(
            f"a {self.api_name} cannot be copied: what it holds belongs to this object; "
            f"make a new {self.api_name}({self.name!r}, ...) instead"
        )

    def __deepcopy__(self, memo: object) -> NoReturn:
        self.__copy__()

    def __init__(self, name: str, options: LeaseOptions) -> None:
        if options.on_lost == "cancel" and not self.is_async:
            raise ValueError(
                "on_lost='cancel' needs the asyncio primitive: only a task can be "
                "cancelled; pass a callback instead"
            )
        self.name: str = stable_name(name, f"{self.noun} name", "it would exclude nobody")
        self.key: str = options.prefix + self.name
        self.options: LeaseOptions = options
        self.limit: int = options.limit
        self._held: list[Lease] = []  # taken by acquire(), oldest first
        self._blocks = ownership.Blocks(type(self))  # `with` blocks open through it
        self._watcher: weakref.finalize[Any, Any] | None = None  # see _watch
        ref = weakref.ref(self)
        # Held by its leases' renewal: a strong reference would keep the object alive.
        self._alive: Callable[[], bool] = lambda: ref() is not None

    def __repr__(self) -> str:
        """Name, kind, key, and whether this object holds it for the caller (no I/O: what
        this process knows; a lease known to have ended is not held)."""
        lease = self.lease
        held = lease is not None and not lease.lost and lease.remaining() > 0
        return f"<{self._describe()} held={held}>"

    def _describe(self) -> str:
        public = self.api_name if "." in self.api_name else f"redlock_deco.{self.api_name}"
        limit = f" limit={self.limit}" if self.kind.redis_type == "zset" else ""
        return f"{public} name={self.name!r} kind={self.kind.name!r}{limit} key={self.key!r}"

    def _watch(self) -> None:
        """Say so if this object is collected while holding what ``acquire()`` took. Only
        while it holds: an object holding nothing runs no code of ours when it goes.
        (Renewal stops on its own: it is kept only while the object exists.)"""
        if self._watcher is None or not self._watcher.alive:
            self._watcher = weakref.finalize(
                self, _collected_holding, self._held, f"<{self._describe()}>"
            )
            self._watcher.atexit = False  # at exit, as for files: nothing to say

    def _unwatch(self) -> None:
        if not self._held and self._watcher is not None:
            self._watcher.detach()

    @property
    def lease(self) -> Lease | None:
        """The Lease of the calling owner's newest ``with`` block through this object, else
        the newest one this object holds through ``acquire()``, else None
        (``.fencing_token``, ``.remaining()``, ``.lost``...)."""
        pid = os.getpid()
        owner = ownership.current_owner()
        for section in reversed(self._blocks):
            if section.owner() is owner and section.lease.pid == pid:
                return section.lease
        for lease in reversed(self._held):
            if lease.pid == pid:  # never the lease of the parent of a forked child
                return lease
        return None

    def _owned_lease(self, action: str) -> Lease:
        lease = self.lease
        if lease is None:
            raise LockNotOwned(
                f"cannot {action} {self.key!r}: this object holds nothing taken by acquire(), "
                "and the calling thread or task has no `with` block open through it",
                name=self.name,
                key=self.key,
            )
        return lease

    def _not_held(self, action: str = "release") -> LockNotOwned:
        in_block = self.lease is not None
        return LockNotOwned(
            f"cannot {action} {self.key!r}: this object holds nothing taken by acquire()"
            + (" (a `with` block holds it, and gives it back at its exit)" if in_block else ""),
            name=self.name,
            key=self.key,
        )

    def _cannot_hand_over(self) -> LockNotOwned:
        return self._not_held("hand over")

    def _ended(self, action: str) -> LockNotOwned:
        return LockNotOwned(
            f"cannot {action} {self.key!r}: its lease had already ended (expired or taken "
            "over); nothing of another holder's was touched",
            name=self.name,
            key=self.key,
        )

    def _wait(self, blocking: bool, timeout: float | None, wait: float | None) -> float | None:
        """How long ``acquire`` waits: ``wait=`` as given, else ``blocking``/``timeout`` in
        threading.Lock's meaning (see options.acquire_wait), else this object's ``wait``."""
        if wait is DEFAULT:
            return acquire_wait(blocking, timeout, self.options.wait)
        if blocking is not True or timeout is not None:
            raise TypeError(
                f"acquire() takes wait= or blocking=/timeout=, not both (got wait={wait!r}, "
                f"blocking={blocking!r}, timeout={timeout!r}): they say the same thing"
            )
        return check_wait(wait)

    def _not_acquired(self, started: float) -> LockNotAcquired:
        return LockNotAcquired(name=self.name, key=self.key, waited=time.monotonic() - started)


class Primitive(Base):
    """The sync API: ``with`` blocks owned by the running task or thread, ``acquire()``
    owned by the object (see :class:`Base`)."""

    def acquire(
        self, blocking: bool = True, timeout: float | None = None, *, wait: float | None = DEFAULT
    ) -> bool:
        """Take it for this object; True if taken, False if the wait ran out.

        As :meth:`threading.Lock.acquire`: ``blocking=False`` tries once; ``timeout=S`` waits
        at most S seconds, ``timeout=-1`` forever; ``blocking=False`` with a timeout is a
        ValueError. Without either, it waits this object's ``wait`` (not forever, unlike
        threading). ``wait=S`` is the same as ``timeout=S`` (0 tries once, None waits forever).

        The lease belongs to the object: any thread may release or extend it through the
        object. It re-enters nothing: while this object (or another object of the name)
        holds it, another ``acquire()`` waits or returns False, as a ``threading.Lock``'s
        does. Inside an open ``with`` block or decorated call of this thread (or task) on
        the name it raises LockError rather than wait for itself (``blocking=False``
        returns False).
        """
        wait = self._wait(blocking, timeout, wait)
        taken: list[Lease] = []
        try:
            return guard.acquire_held(self._held, self.kind, self.options, self.name, self.key,
                                      wait, self._alive, self._watch, taken)  # fmt: skip
        except BaseException as exc:  # (cut as it returned: see guard.give_back_taken)
            guard.give_back_taken(self._held, taken, exc)
            raise

    def hand_over(self) -> str:
        """Let go of what ``acquire()`` took (the newest, for a semaphore) without releasing
        it, and return its token for :meth:`adopt` elsewhere (another process, a job): this
        object stops renewing it, no longer holds it, and says nothing when it is collected.
        The lease then lasts the ttl it has left unless an adopter takes it over. LockNotOwned
        if this object holds nothing so taken."""
        popped: list[Lease] = []
        try:
            return guard.hand_over_held(self._held, self._unwatch, self._cannot_hand_over,
                                        popped)  # fmt: skip
        except BaseException as exc:  # (cut as it returned: see guard.give_back_popped)
            guard.give_back_popped(self._held, popped, exc)
            raise

    def adopt(self, token: str | bytes) -> bool:
        """Take over the lease ``token`` holds on this name now -- taken by another object,
        most often in another process (a web request acquires and hands it over, the worker
        that finishes the job adopts and releases it): pass what ``hand_over()`` returned
        (or the holder's ``lease.token``). True when the token holds it: in one step the
        lease becomes this object's, under a new token of its own and this object's ttl, as
        if its ``acquire()`` had taken it (``release()``, ``extend()``, ``owned()`` work
        here; renewed while this object lives, if ``auto_renew``). The old token is retired:
        whatever its holder still sends (a renewal in flight, a late release) touches
        nothing, and a second ``adopt()`` of it returns False. False, and nothing changed,
        when the token holds nothing here (ended, released, adopted already, or another
        kind's). An adopt cut short (a timeout, an interrupt) gives back what it may have
        taken, as an acquire does. Refused for ``fencing=True``: the fencing token is not
        part of the lease token."""
        taken: list[Lease] = []
        try:
            return guard.adopt_held(self._held, self.kind, self.options, self.name, self.key,
                                    token, self._alive, self._watch, taken)  # fmt: skip
        except BaseException as exc:  # (cut as it returned: see guard.give_back_taken)
            guard.give_back_taken(self._held, taken, exc)
            raise

    def release(self) -> None:
        """Give back what ``acquire()`` took (the newest, for a semaphore), from any thread;
        LockNotOwned if this object holds nothing so taken (or its lease had ended)."""
        kept = guard.release_held(self._held, self._unwatch)
        if kept is None:
            raise self._not_held()
        if not kept:
            raise self._ended("release")

    def extend(
        self, ttl: float | None = None, *, to: float | None = None, by: float | None = None
    ) -> None:
        """Lengthen the lease: ``to=S`` sets it to S seconds from now, and S becomes the
        length of later automatic renewals; ``by=S`` adds S seconds to what the server keeps
        (as this holder can tell, which errs short), for this lease only. With neither, it is
        set to this object's ttl. (``extend(S)`` and ``extend(ttl=S)`` still mean ``to=S``,
        with a DeprecationWarning: redis-py's ``extend(S)`` adds.) LockNotOwned if this
        object holds nothing, or its lease had ended."""
        asked = extension(ttl, to, by, self.options.ttl_ms)
        lease = self._owned_lease("extend")
        with lease.io:  # ordered with this lease's renewals: see lifecycle.Lease.renewed
            if lease.lost:
                # Reported lost already (on_lost ran: by its own clock, say, as the renewal
                # round this waited behind was out): not revived on the server, nor said to be
                # extended -- it returned, and the block's exit raised LockLost.
                raise self._ended("extend")
            started = time.monotonic()
            ttl_ms = asked.ms + (to_ms(lease._server_left(started)) if asked.additive else 0)
            extend = lease.target.algorithms.extend(lease.claim, ttl_ms)
            try:
                extended = drivers.run(extend, lease.target)
            except BaseException:
                lease._uncertain(started, ttl_ms)  # it may have landed: assume the worse
                renewal.renewer().reschedule(lease)
                raise
            if not extended:
                found_lost(lease)
                raise self._ended("extend")
            lease._renewed(started, ttl_ms, keep_length=asked.additive)
            if lease.lost:  # reported lost as this was out (see above)
                raise self._ended("extend")
        renewal.renewer().reschedule(lease)  # a shorter ttl is due sooner

    def owned(self) -> bool:
        """True if this object (or the calling thread's ``with`` block through it) holds
        it, as confirmed by the server."""
        lease = self.lease
        return lease is not None and drivers.run(
            lease.target.algorithms.owned(lease.claim), lease.target
        )

    def holders(self) -> int:
        """How many hold it now (live leases, by the server's clock)."""
        target = providers.sync_target(self.options.provider)
        return drivers.run(target.algorithms.holders(self.kind, self.key, self.limit), target)

    def locked(self) -> bool:
        """True if it is fully taken now (an acquire would have to wait): a semaphore's every
        slot, a lock by anyone -- readers included, so for a ``shared=True`` lock it means
        "held", and a shared acquire may still get in beside those readers."""
        return self.holders() >= self.limit

    def __enter__(self: P) -> P:
        started = time.monotonic()
        section: ownership.Section | None = None
        since = ownership.mark()
        try:
            where = ownership.place(self._blocks)
            if self._blocks:
                guard.close_unexited(self._blocks, where)
            section = guard.open_section(self.kind, self.options, self.name, self.key,
                                         self.options.wait, place=where,
                                         keep=self._blocks)  # fmt: skip
            if section is None:
                raise self._not_acquired(started)
            return self
        except BaseException as exc:  # interrupted before the block began: no __exit__
            if section is None:
                # Cut as open_section returned, before the section was stored (Python 3.10
                # looks for signals there): it is in the object's blocks all the same, and
                # stayed open, held and renewed, until this thread entered again (review 68,
                # F4) -- for good, entered through an ExitStack or by hand (review 69, F2).
                section = ownership.entered_since(self._blocks, since)
            if section is not None:
                guard.abort(section, exc)
            raise

    def _abort_block(self, section: ownership.Section, exc: BaseException) -> None:
        """Give up ``section``: a subclass's own entry hook raised after entering it, or its
        exit hook before closing it (see ownership.overriding); no exit will come for it."""
        guard.abort(section, exc)

    @ownership.exit_hook  # (each entry through an ExitStack gets an exit of its own)
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        *,
        _by: Any = None,  # (a StackExit: see ownership.exit_hook)
    ) -> None:
        handled: list[bool] = []
        try:
            guard.close_block(self._blocks, exc, handled, _by)
        except BaseException as error:
            if not handled:  # (cut short as it began: see guard.close_block_cut)
                guard.close_block_cut(self._blocks, error, _by)
            raise


class AsyncPrimitive(Base):
    """The asyncio API: ``async with`` blocks owned by the task, ``acquire()`` by the object
    (see :class:`Base`)."""

    is_async = True

    async def acquire(
        self, blocking: bool = True, timeout: float | None = None, *, wait: float | None = DEFAULT
    ) -> bool:
        """Take it for this object; True if taken, False if the wait ran out. ``blocking``,
        ``timeout`` and ``wait`` as for the sync :meth:`Primitive.acquire`, and so is what
        the lease belongs to: the object, whichever task (``asyncio.gather``, ``shield``,
        ``wait_for``...) ran the acquire."""
        wait = self._wait(blocking, timeout, wait)
        return await guard.acquire_held_async(self._held, self.kind, self.options, self.name,
                                              self.key, wait, self._alive, self._watch)  # fmt: skip

    async def hand_over(self) -> str:
        """:meth:`Primitive.hand_over` for asyncio."""
        return await guard.hand_over_held_async(self._held, self._unwatch, self._cannot_hand_over)

    async def adopt(self, token: str | bytes) -> bool:
        """:meth:`Primitive.adopt` for asyncio."""
        return await guard.adopt_held_async(self._held, self.kind, self.options, self.name,
                                            self.key, token, self._alive, self._watch)  # fmt: skip

    async def release(self) -> None:
        """Give back what ``acquire()`` took (the newest, for a semaphore), from any task;
        LockNotOwned if this object holds nothing so taken (or its lease had ended)."""
        kept = await guard.release_held_async(self._held, self._unwatch)
        if kept is None:
            raise self._not_held()
        if not kept:
            raise self._ended("release")

    async def extend(
        self, ttl: float | None = None, *, to: float | None = None, by: float | None = None
    ) -> None:
        """:meth:`Primitive.extend` for asyncio."""
        asked = extension(ttl, to, by, self.options.ttl_ms)
        lease = self._owned_lease("extend")
        guard.check_home_loop(lease, "extend")
        async with lease.io:  # ordered with this lease's renewals
            if lease.lost:
                # Reported lost already (on_lost ran: by its own clock, say, as the renewal
                # round this waited behind was out): not revived on the server, nor said to be
                # extended -- it returned, and the block's exit raised LockLost.
                raise self._ended("extend")
            started = time.monotonic()
            ttl_ms = asked.ms + (to_ms(lease._server_left(started)) if asked.additive else 0)
            extend = lease.target.algorithms.extend(lease.claim, ttl_ms)
            try:
                extended = await drivers.run_async(extend, lease.target)
            except BaseException:  # cancelled or timed out: it may have landed
                lease._uncertain(started, ttl_ms)
                renewal.async_renewer().reschedule(lease)
                raise
            if not extended:
                found_lost(lease)
                raise self._ended("extend")
            lease._renewed(started, ttl_ms, keep_length=asked.additive)
            if lease.lost:  # reported lost as this was out (see above)
                raise self._ended("extend")
        renewal.async_renewer().reschedule(lease)  # a shorter ttl is due sooner

    async def owned(self) -> bool:
        """True if this object (or the calling task's ``async with`` block through it)
        holds it, as confirmed by the server."""
        lease = self.lease
        if lease is None:
            return False
        guard.check_home_loop(lease, "check")
        return await drivers.run_async(lease.target.algorithms.owned(lease.claim), lease.target)

    async def holders(self) -> int:
        """How many hold it now (live leases, by the server's clock)."""
        target = providers.async_target(self.options.provider)
        holders = target.algorithms.holders(self.kind, self.key, self.limit)
        return await drivers.run_async(holders, target)

    async def locked(self) -> bool:
        """True if it is fully taken now (an acquire would have to wait): a semaphore's every
        slot, a lock by anyone -- readers included, so for a ``shared=True`` lock it means
        "held", and a shared acquire may still get in beside those readers."""
        return await self.holders() >= self.limit

    async def __aenter__(self: AP) -> AP:
        started = time.monotonic()
        section: ownership.Section | None = None
        since = ownership.mark()
        try:
            where = ownership.place(self._blocks)
            if self._blocks:
                await guard.close_unexited_async(self._blocks, where)
            section = await guard.open_section_async(self.kind, self.options, self.name,
                                                     self.key, self.options.wait,
                                                     place=where, keep=self._blocks)  # fmt: skip
            if section is None:
                raise self._not_acquired(started)
            return self
        except BaseException as exc:  # interrupted before the block began: no __aexit__
            if section is None:  # (see Primitive.__enter__)
                section = ownership.entered_since(self._blocks, since)
            if section is not None:
                await guard.abort_async(section, exc)
            raise

    async def _abort_block(self, section: ownership.Section, exc: BaseException) -> None:
        """:meth:`Primitive._abort_block` for asyncio."""
        await guard.abort_async(section, exc)

    @ownership.exit_hook  # (see Primitive.__exit__)
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        *,
        _by: Any = None,  # (a StackExit: see ownership.exit_hook)
    ) -> None:
        handled: list[bool] = []
        try:
            await guard.close_block_async(self._blocks, exc, handled, _by)
        except BaseException as error:
            if not handled:  # (see Primitive.__exit__)
                await guard.close_block_cut_async(self._blocks, error, _by)
            raise

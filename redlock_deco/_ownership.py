"""Who owns what: sections belong to a task or a thread, bare acquisitions to their object.

A *section* is a decorated call or a ``with``/``async with`` block. It belongs to the asyncio
task running it when a task is running in that thread, else to the thread -- so a sync
``with Lock(...)`` around an ``await`` in several tasks of one loop lets one task in at a
time (owned by the thread, every task walked into the first one's lease). A section
re-enters a lock name only when an *open section of the same owner* holds it: the owner's
table (``held``) lists exactly the leases of its open sections, and nothing else, so a lease
taken by a bare ``acquire()``, or one whose sections have all ended, is never re-entered and
never makes a later acquisition of its name fail. (Semaphores are not re-entrant: every
section takes a slot.) Each owner also has a stack of the sections it is inside, for
``current_lease()``.

A bare ``acquire()`` belongs to its object (see ``_primitive.py``), not to any owner here.

Async ownership is keyed by the task object itself, not by a context variable: a context is
copied into child tasks, which would let a task spawned inside a locked section believe it
holds its parent's lock. A thread is represented by a :class:`~redlock_deco._process.
ThreadOwner` kept in a thread-local, which dies with its thread, whatever started it: leases
hold it weakly, so renewal notices the end of any thread, and a thread that reuses an ended
one's ident starts with nothing. The tables live in :mod:`redlock_deco._process`, which
resets them in a forked child.

Why one module: the owner tables, the record of generators' blocks and the rules that match
an exit to its block are read and written together on every section's entry and exit; split,
each half would have to know the other's invariants (a block's frame, owner and generator
flag decide both re-entry and which block an exit ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import dis
import functools
import gc
import inspect
import itertools
import os
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, ExitStack
from contextvars import ContextVar
from types import FunctionType, MethodType
from typing import Any, NamedTuple, TypeVar, overload

from . import _process as process
from ._errors import LockError
from ._lifecycle import Lease, Left
from ._process import Tables, ThreadOwner

Owner = asyncio.Task[Any] | ThreadOwner
_sequence = itertools.count()


def current_owner() -> Owner:
    """The owner of a section opened here: the running task, else the thread."""
    loop = asyncio._get_running_loop()
    if loop is not None:
        task = asyncio.current_task(loop)
        if task is not None:
            return task
    return process.thread_owner()


def tables(owner: Owner) -> Tables:
    """The owner's re-entry table and section stack."""
    if type(owner) is ThreadOwner:
        return owner.tables
    return process.task_tables(owner)  # type: ignore[arg-type]  # a task, by elimination


def liveness(owner: Owner) -> Callable[[], bool]:
    """A check that is true while ``owner`` runs, holding it only weakly (a strong reference
    from a lease would keep an ended thread's owner, and so its lease, alive forever)."""
    ref = weakref.ref(owner)
    if type(owner) is ThreadOwner:
        return lambda: ref() is not None

    def task_alive() -> bool:
        task = ref()
        return task is not None and not task.done()  # type: ignore[union-attr]  # a task

    return task_alive


class Blocks(list["Section"]):
    """An object's open ``with`` blocks. Its sections refer to it weakly: a strong reference
    would make a cycle, and a block dropped open would then wait for the cyclic collector
    (seconds, or never with ``gc.disable()``) instead of being finalized with its object."""

    __slots__ = ("__weakref__", "kind")

    def __init__(self, kind: type | None = None) -> None:
        super().__init__()
        self.kind = kind  # its object's class

    @property
    def hooked(self) -> bool:
        """Whether its object's class has hooks of its own (see overriding), even put on it
        later: its entries and exits may reach the base's through frames of the user's (see
        place())."""
        return bool(getattr(self.kind, "_hooked", False))


class Section:
    """One open section: its lease, its owner, and where it is recorded.

    Everything it records is undone by :func:`close`, which may run more than once (the
    clean-up of an interrupted exit repeats it). Only the frame running the section (and,
    for a ``with`` block, its object) holds it: if it is dropped while still open -- a
    KeyboardInterrupt arrived at the very line that starts its exit, where no handler can
    run yet -- its finalizer closes it and hands its lease to ``dropped`` (stop renewing,
    release in the background), so nothing stays held for an exit that never came.
    """

    __slots__ = (
        "at",
        "body",
        "dropped",
        "entry",
        "exit",
        "first",
        "frame",
        "generator",
        "held",
        "here",
        "inside",
        "keep",
        "lease",
        "on",
        "open",
        "owner",
        "stack",
        "statement",
    )

    def __init__(
        self, lease: Lease, owner: Owner, frame: int, dropped: Callable[[Lease], None]
    ) -> None:
        self.dropped = dropped  # what becomes of its lease if the section is dropped open
        self.lease = lease
        self.owner = weakref.ref(owner)
        self.held, self.stack = tables(owner)
        self.here = process.thread_owner().here
        self.frame = frame  # the frame running a `with` block (0 for a decorated call)
        self.body: Any = None  # that frame's code
        self.at = -1  # the offset of its `with` statement in that code (-1: not one)
        self.generator = False  # that frame is a generator's (see in_generators)
        # That frame itself, if it may be suspended (a generator's or a coroutine's) and it
        # entered the block by hand (not by a statement, not through a stack): its exit may
        # come from another thread or task running that frame (a step, a close, the garbage
        # collector), and only the frame itself tells it from a new frame that got its id
        # after it ended (held while the block is open, so that no frame can get it). Not
        # for a statement's block, which ends before its frame: held, a 3.10 frame keeps
        # what it awaits, and a task dropped while pending inside was never collected (for
        # a block entered by hand it is, on 3.10: see docs/concepts.md, review 80a, F2).
        self.inside: Any = None
        # The exit an (Async)ExitStack took for it as it entered the block, which alone
        # leaves it (see StackExit), held weakly: gone, it can never run.
        self.exit: weakref.ref[StackExit] | None = None
        self.first: weakref.ref[StackExit] | None = None  # contextlib's (see _take_exits)
        self.on: weakref.ref[Any] | None = None  # the callbacks its exits went on
        self.entry = (next(_sequence), lease)
        self.keep: weakref.ref[Blocks] | None = None  # its object's open blocks
        # For a block a subclass's own entry hook entered: that hook's mark (see overriding),
        # the same for every block one entry left open (a weighted super().__enter__() twice).
        self.statement: int | None = None
        self.open = True

    def __repr__(self) -> str:
        return f"<Section {self.lease.key!r} {'open' if self.open else 'closed'}>"


class _Open(Section):
    """A section while it is open: the only kind with a finalizer, so a section that ended
    runs no code of ours when it goes (:func:`close` turns it back into a plain Section)."""

    __slots__ = ()

    def __del__(self) -> None:
        # Dropped open: its exit never began (an interrupt came at its first line). The
        # frame that ran it is gone, and so is whatever it protected.
        if getattr(self, "open", False) and close(self):  # (False: __init__ interrupted)
            self.dropped(self.lease)


def reentered(owner: Owner, key: tuple[str, str]) -> Lease | None:
    """The lease of an open section of ``owner`` on ``key`` (provider, Redis key), if any."""
    return tables(owner)[0].get(key)


def open_section(
    lease: Lease,
    owner: Owner,
    *,
    fresh: bool,
    dropped: Callable[[Lease], None],
    place: Place | None = None,
    keep: Blocks | None = None,
) -> Section:
    """Record a section of ``owner`` on ``lease``: a fresh lease, or one it re-enters
    (:meth:`Lease.reenter` refuses one that has ended); a ``with`` block gives the ``place``
    it is entered from. Undone if interrupted."""
    where = place if place is not None else _NOWHERE
    frame, code = where.frame, where.code
    section: Section = _Open(lease, owner, frame, dropped)
    try:
        # The lease counts the section before any table shows it: a signal handler entering
        # the same name in between re-entered the lease through the table, and its exit --
        # the lease's last known one -- gave back the lease this section was taking (review
        # 71, F2: the body ran unprotected; LockLost only at its exit).
        if fresh:
            lease._enter(section.entry[0])
        else:
            lease._reenter(section.entry[0])
        section.body, section.at = where.body, where.at
        hk = (lease.provider, lease.key)
        if (where.exit is not None and keep is not None
                and getattr(where.obj, "_blocks", None) is keep):  # fmt: skip
            # (the exit the stack read for this very object: a subclass's own __enter__
            # entering another primitive took the stack's exit for that one, review 77a, F2)
            taken = where.exit.section
            if taken is None:
                _take_exits(section, where)
            elif taken.open and taken.keep is not None and taken.keep() is keep:
                _share_exits(section, taken)
        if section.exit is None and where.at < 0:
            section.inside = where.here
        if code is not None:
            section.generator = True
            if lease.claim.kind.reentrant:  # (what a step elsewhere could wait for itself on)
                blocks = in_generators.setdefault(hk, {}).setdefault(frame, (code, set()))[1]
                blocks.add(section.entry[0])
        if lease.claim.kind.reentrant:
            section.held[hk] = lease
            section.here[lease] = None
        section.stack.append(section.entry)
        if keep is not None:
            section.keep = weakref.ref(keep)
            keep.append(section)
        # (The lease knows its sections by number: a reference to the section itself would
        # keep a section whose exit never ran alive, and its finalizer would never run.)
        return section
    except Left:
        close(section)  # (the lease's last exit, in another thread, gives it back)
        raise
    except BaseException:
        # A re-entry cut short whose lease's other sections ended meanwhile (another thread
        # closed the outer block) is its last: given up as one dropped open is. Ignored,
        # the lease stayed held and renewed by nobody while the thread lived (review 90a,
        # F1). (A fresh lease's is the caller's to give up: it abandons what it took.)
        if close(section) and not fresh:
            dropped(lease)
        raise


def _take_exits(section: Section, where: Place) -> None:
    """A block entered through an ExitStack takes the exit the stack read for it (see
    StackExit), and puts a second one of its own on the stack, below where contextlib pushes
    that one as the entry returns.

    Why a second: an interrupt in contextlib's own window -- after ``__enter__`` returned,
    before its push; or after the stack's pop of the exit, before its call -- leaves that
    exit in a dead frame, kept as long as the exception's traceback is, and a stack reused
    entry after entry (a module's, an attribute) outlives every exit: the block stayed held
    and renewed for good, a limit-1 semaphore object refusing every later entry (reviews
    69, F1, and 70, F2). The second is on the stack before ``__enter__`` returns, in our own
    code: whatever cut contextlib's exit off, the stack's close -- the ``with ExitStack()``
    the interrupt unwinds through, or the next ``close()`` of a reused one -- runs this one,
    and it ends the block (only then: see second_exit_ends), or its stack is collected
    unclosed and the block is given up as a section dropped open is (see _Open)."""
    first = where.exit
    assert first is not None and where.keeper is not None  # (by the caller's test)
    second = StackExit(first.func, first)
    first.section = second.section = section
    section.first = weakref.ref(first)
    section.exit = weakref.ref(second, _exit_gone(section))
    # (one append to the deque: one C call, whichever thread or handler uses the stack)
    callbacks = where.keeper._exit_callbacks
    callbacks.append((where.sync, MethodType(second, where.obj)))
    section.on = weakref.ref(callbacks)


def _share_exits(section: Section, taken: Section) -> None:
    """A block the same entry through an ExitStack enters after ``taken`` -- a subclass's own
    entry hook entering the object again: a weighted ``super().__enter__()`` twice, a
    ``with self:`` inside it -- has the exits ``taken`` took (see _take_exits): none of its
    own, it was the one block on the object a by-hand exit could mean, and the stack's
    exits ended ``taken`` alone -- it stayed held and renewed while its thread lived (review
    85a, F2). A block the hook's own statement leaves ends inside the entry (see exiting)."""
    second = taken.exit() if taken.exit is not None else None
    if second is None:
        return
    section.first = taken.first
    section.exit = weakref.ref(second, _exit_gone(section))
    section.on = taken.on


def _stale(section: Section) -> bool:
    """Whether ``section``, a block entered through an ExitStack, was cut off from contextlib's
    exit for it: an interrupt in contextlib's window (after ``__enter__`` returned, before
    the push; or between the stack's pop and the call) -- the entry, or the close, raised.
    Exactly: that exit is on no stack, and no running frame is about to push or call it.
    (Its second exit, still on the stack, would end it at the stack's next close; a stack
    kept and reused may not be closed for long.)"""
    first = section.first() if section.first is not None else None
    if first is None:
        return True
    on = section.on() if section.on is not None else None
    if on is not None and any(_bound_to(entry, first) for entry in list(on)):
        return False  # (where it is pushed: found cheaply; list() of a deque is one C call)
    return not _can_run(first)


def _bound_to(entry: Any, exit: StackExit) -> bool:
    """Whether a stack's callback entry (``(is_sync, callback)``) is ``exit``, bound."""
    return getattr(entry[1], "__func__", None) is exit


def ends(section: Section, by: StackExit | None) -> bool:
    """Whether an exit (``by``: the one an ExitStack runs, if it is one) that ``exiting``
    matched to ``section`` ends it: if it is open, and unless ``by`` is the block's second
    exit (see _take_exits) while its first can still run -- another thread closed the stack
    as the entry was about to push it (the close ran the second, pushed before it), or
    pop_all() came between the two pushes and the stacks went separate ways: ending the
    block there gave it back as its body began (review 73a, F2). The first ends it then;
    if it never can (cut off in a dead frame), the block goes as that is collected."""
    if not section.open:
        return False  # (its other exit ended it)
    first = by.first() if by is not None and by.first is not None else None
    if first is None or not _can_run(first):
        return True
    section.exit = weakref.ref(first, _exit_gone(section))  # (see _exit_gone)
    return False


def _can_run(exit: StackExit) -> bool:
    """Whether ``exit`` (contextlib's exit of a block) may still be run: it is on a stack, or
    a frame of contextlib that is running or suspended -- not one that is over, kept by a
    traceback -- holds it, about to push or call it."""
    # No local of this frame is ever one of the referrers it looks at: under a Python trace
    # function (a debugger, a test's tracer) Python 3.10 copies a frame's locals into a dict
    # it keeps, which refers to ``exit`` -- a loop variable over its referrers became that
    # very dict, a dict holding itself and, through ``tops``, the callers' frames: a stack
    # dropped unclosed there, and its block, were kept until the cyclic collector ran (CI's
    # 3.10 leg, test_hook_shapes). The generators' own frames end with the call.
    if any(_pushed(holder, exit) for holder in gc.get_referrers(exit)):
        return True
    # A running frame's locals are no object's referents: look at the frames that run --
    # for this thread, from the caller's: this frame, holding itself in a local, and every
    # frame above it in another, outlived the call in a cycle, until the cyclic collector
    # ran: a stack dropped unclosed in a caller was kept, and its block held and renewed
    # (found by test_hook_shapes).
    tops = sys._current_frames()
    tops[threading.get_ident()] = sys._getframe(1)
    return any(_about_to_run(frame, exit) for frame in _running(tops))


def _pushed(holder: Any, exit: StackExit) -> bool:
    """Whether ``holder``, a referrer of ``exit``, is it bound and on a stack's callbacks
    (an entry ``(is_sync, the bound exit)``), or an AsyncExitStack's suspended coroutine
    (one that is over has no frame)."""
    if type(holder) is MethodType and holder.__func__ is exit:
        return any(_on_a_stack(entry) for entry in gc.get_referrers(holder))
    return inspect.iscoroutine(holder) and holder.cr_frame is not None


def _on_a_stack(entry: Any) -> bool:
    return type(entry) is tuple and any(type(d) is deque for d in gc.get_referrers(entry))


def _running(tops: dict[int, Any]) -> Iterator[Any]:
    """The frames of ``tops`` and every frame above each."""
    for top in tops.values():
        frame = top
        while frame is not None:
            yield frame
            frame = frame.f_back


def _about_to_run(frame: Any, exit: StackExit) -> bool:
    """Whether ``frame`` is one of contextlib's stack methods holding ``exit``."""
    if (frame.f_globals.get("__name__") != "contextlib"
            or frame.f_code.co_name not in _STACK_METHODS):  # fmt: skip
        return False
    found = (frame.f_locals.get("_exit"), frame.f_locals.get("cb"))
    return any(value is exit or getattr(value, "__func__", None) is exit for value in found)


def _exit_gone(section: Section) -> Callable[[Any], None]:
    """What a block entered through an ExitStack does as the exit it watches (its second one,
    see _take_exits; else its first) is collected with the block still open: if its first
    exit is still there (on a stack another thread handed on, or kept by a frame), it
    watches that one instead; else no exit of it can run any more -- its stack was dropped
    unclosed, or the exit was cut off as it was popped -- and it is given up as a section
    dropped open is (see _Open)."""

    def gone(ref: Any) -> None:
        if not section.open or ref is not section.exit:
            return
        first = section.first() if section.first is not None else None
        if first is not None:
            section.exit = weakref.ref(first, gone)
            return
        blocks = section.keep() if section.keep is not None else None
        # (and the blocks its entry hook left with it: no exit of theirs). Each once: closed
        # twice, it was "the last" twice, and given back twice -- the second release found
        # the key gone and reported the lease lost (review 89a, F2).
        ending = statement_blocks(blocks, section) if blocks else []
        for block in ending if section in ending else [section, *ending]:
            if close(block):
                block.dropped(block.lease)

    return gone


def close(section: Section) -> bool:
    """Forget ``section`` wherever it was recorded; True if no section is left on its lease
    (which is then to be given back). Safe to repeat.

    By its own entry, not by popping the top: sections can end out of order (a generator
    suspended inside a ``with Lock`` outlives the call that started it), and popping would
    drop the wrong entry and leave a stale one behind. Each removal is one call, done or
    not: code run between two lines of this one on the same thread (a signal handler, a
    finalizer) that closes sections of its own changed the lists under a loop, and the exit
    failed with an IndexError (review 71a's sweep).
    """
    section.open = False
    section.__class__ = Section  # no finalizer any more (the layouts are the same)
    section.inside = None  # (the frame goes with its block, as it would have)
    if section.generator:
        _forget_generators_block(section)
    with contextlib.suppress(ValueError):  # (its number is its own: no other entry is equal)
        section.stack.remove(section.entry)
    blocks = section.keep() if section.keep is not None else None
    if blocks is not None:
        with contextlib.suppress(ValueError):
            blocks.remove(section)
    lease = section.lease
    last = lease._exit(section.entry[0])
    if last:
        # The thread's record first, the owner's table after: an owner re-entering in
        # between (another thread closing its last section) finds the lease in its table,
        # and that it has left (Lease.left), and takes the name anew; in the other order it
        # found no lease of its own but this thread's, and refused to wait for itself
        # (LockError, found by test_handed_out_blocks).
        section.here.pop(lease, None)
        hk = (lease.provider, lease.key)
        # Checked and popped under the gate, as the owner's re-entry is checked (and, if
        # this lease has left, its table entry popped) under it: in two steps, the owner's
        # new lease -- a reader lease, taken anew at once beside this one -- was recorded
        # between them and popped here, and its next nested block took a second lease or
        # refused to wait for itself (review 92a, F3).
        with lease._gated():
            if section.held.get(hk) is lease:
                section.held.pop(hk, None)
    return last


# The open blocks entered by a generator's own frame (sync or async), by (provider, key):
# frame id -> (the frame's code, the numbers of its open sections on that key: a block
# nested in the same frame must not erase the outer one's record, review 18, 01). Such a
# frame may be resumed by another thread or task than the one that entered the block, whose
# wait for that key could then only wait for itself (review 17, 01: a nested block in a step
# run elsewhere waited its whole `wait`, forever with wait=None). The code is compared too:
# a generator can end with its block still open (an ExitStack handed on with pop_all()), and
# its frame's id may then be another frame's (review 18, 04: a waiter refused at once).
in_generators: dict[tuple[str, str], dict[int, tuple[Any, set[int]]]] = {}

# A generator's or an async generator's code: its frame is suspended between steps.
_SUSPENDS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


def _forget_generators_block(section: Section) -> None:
    hk = (section.lease.provider, section.lease.key)
    frames = in_generators.get(hk)
    if frames is None or section.frame not in frames:
        return
    sections = frames[section.frame][1]
    sections.discard(section.entry[0])
    if not sections:
        del frames[section.frame]
        if not frames:
            del in_generators[hk]


def _generator_on_this_stack(key: tuple[str, str]) -> bool:
    """Whether a generator running on the calling stack holds ``key`` in an open block."""
    frames = in_generators.get(key)
    if not frames:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        recorded = frames.get(id(frame))
        if recorded is not None and recorded[0] is frame.f_code:
            return True
        frame = frame.f_back  # type: ignore[assignment]  # None ends the loop
    return False


class StackExit:
    """The exit of one block entered through an (Async)ExitStack: made afresh for each entry.

    ``enter_context`` and ``enter_async_context`` read the exit off the class
    (``type(cm).__exit__``) before they call ``__enter__``, keep it in a local, and push it
    bound to the object once the entry returns; :class:`ExitHook` hands each such read a new
    one of these, and the entry it precedes takes it for its block (see place()). The stack
    then runs exactly that block's exit -- wherever the stack was handed (``pop_all()``),
    whoever closes it, whatever else was pushed, entered or closed meanwhile by another
    thread or a signal handler. Matching exits to blocks by their places on the stack
    guessed, and gave up live blocks (reviews 71-73: a second holder got in).

    Held only by contextlib (the entry's local, then the stack's callbacks, then the closing
    frame's local). One read without an entry (``stack.push(obj)`` after a by-hand
    ``__enter__()``) ends no block of its own (see exiting).
    """

    __slots__ = ("__weakref__", "first", "func", "section")

    def __init__(self, func: Callable[..., Any], first: StackExit | None = None) -> None:
        self.func = func
        self.section: Section | None = None  # the block it ends, once an entry took it
        # For a block's second exit (see _take_exits), its first: contextlib's.
        self.first = weakref.ref(first) if first is not None else None

    def __call__(self, obj: Any, *exc: Any) -> Any:
        return self.func(obj, *exc, _by=self)


class ExitHook:
    """An ``__exit__``/``__aexit__`` that gives each read off the class a :class:`StackExit`
    of its own (as an ExitStack reads it), and each read off an object (a ``with``
    statement, ``obj.__exit__``) the plain bound method."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return StackExit(self.func)
        return MethodType(self.func, obj)

    def __call__(self, obj: Any, *exc: Any) -> Any:
        """Called as read off the class's ``__dict__`` (a wrapper put on it by hand)."""
        return self.func(obj, *exc)


F = TypeVar("F", bound=Callable[..., Any])


def exit_hook(func: F) -> F:
    """Make ``func`` (an ``__exit__`` or ``__aexit__`` taking ``_by=``) an :class:`ExitHook`."""
    return ExitHook(func)  # type: ignore[return-value]  # it reads as func does


# The exit a subclass's own __exit__/__aexit__ was run as, for the base's (see overriding),
# and a number below every section opened from then on.
_RUN_AS: ContextVar[tuple[StackExit, int] | None] = ContextVar("redlock_deco_exit", default=None)


def overriding(func: Callable[..., Any], name: str) -> Any:
    """A subclass's own ``__enter__``/``__aenter__`` or ``__exit__``/``__aexit__`` (``func``,
    the class's ``name``),
    wrapped in a frame of this package that place() knows as the object's hook: the frames of
    the user's between it and the base's (a decorator's wrapper, a helper the hook calls) are
    then passed through like the hook's own, and the block is the ``with`` statement's that
    called the hook (review 81a, F1: matched from such a wrapper's frame, a generator's block
    left by another thread's step raised LockError and stayed held; an older block's exit
    ended the generator's, its own staying held).

    An exit is also an :class:`ExitHook` whose exit the base's -- reached through ``super()``,
    which reads it off the object and so without ``_by`` -- finds (see run_as). Without it,
    the subclass's blocks entered through an ExitStack had no exit of their own, and one
    stack's exit could end another block of the object."""
    if name in ("__enter__", "__aenter__"):
        # (The mark and its undoing inside the try: a signal raised as a C call returns --
        # the ContextVar's set, the hook's own call -- left the mark set for good, or the
        # block entered with no exit to come: held and renewed; review 84a, F2 and F4.)
        if name == "__aenter__":

            async def enter_async(obj: Any, *args: Any, **kwargs: Any) -> Any:
                since, before = mark(), _ENTERING.get()
                try:
                    _ENTERING.set(_marked(before, obj, since))
                    entered = await _bound(func, obj)(*args, **kwargs)
                    _one_statement(obj, since)
                    _ENTERING.set(before)
                    return entered
                except BaseException as exc:
                    try:  # (see enter_sync)
                        _ENTERING.set(before)
                        await _given_up_async(obj, lambda: _hook_entered(obj, since), exc)
                    except BaseException:
                        _ENTERING.set(before)
                        await _given_up_async(obj, lambda: _hook_entered(obj, since), exc)
                        raise
                    raise

            return _hook(_named(enter_async, func))

        def enter_sync(obj: Any, *args: Any, **kwargs: Any) -> Any:
            since, before = mark(), _ENTERING.get()
            try:
                _ENTERING.set(_marked(before, obj, since))
                entered = _bound(func, obj)(*args, **kwargs)
                _one_statement(obj, since)
                _ENTERING.set(before)
                return entered
            except BaseException as exc:
                # No exit will come for what the hook entered. Twice if a signal cuts the
                # first: a signal as the hook's own exception was handled -- the mark's reset
                # returning, the give-up beginning -- left it held and renewed (85a, F3).
                try:
                    _ENTERING.set(before)
                    _given_up(obj, lambda: _hook_entered(obj, since), exc)
                except BaseException:
                    _ENTERING.set(before)
                    _given_up(obj, lambda: _hook_entered(obj, since), exc)
                    raise
                raise

        return _hook(_named(enter_sync, func))
    if name == "__aexit__":

        async def exit_async(obj: Any, *exc: Any, _by: StackExit | None = None) -> Any:
            ending = _by.section if _by is not None else None
            try:  # (see exit_sync)
                if _by is None:
                    ending = leaving(obj._blocks, None)
                elif not hook_runs(_by):
                    return await _settled(_base_exit(obj)(obj, *exc, _by=_by))
                before = _RUN_AS.get()
                try:
                    run = _by or _leaving_as(ending)
                    if run is not None:
                        _RUN_AS.set((run, mark()))
                    return await _bound(func, obj)(*exc)
                finally:
                    _RUN_AS.set(before)
            except BaseException as error:  # (see exit_sync)
                try:
                    await _given_up_async(obj, lambda: _left_open(obj, _by, ending), error)
                except BaseException:
                    await _given_up_async(obj, lambda: _left_open(obj, _by, ending), error)
                    raise
                raise

        return ExitHook(_hook(_named(exit_async, func)))

    def exit_sync(obj: Any, *exc: Any, _by: StackExit | None = None) -> Any:
        ending = _by.section if _by is not None else None
        try:
            if _by is None:
                ending = leaving(obj._blocks, None)
            elif not hook_runs(_by):
                # A block's second exit (see _take_exits) whose first ran, or still can: the
                # user's hook once per block, not twice -- a hook pairing the block with a
                # local lock of its own released it twice, the second time another thread's;
                # and not at all for a block its entry hook gave up (review 86a, F3).
                return _base_exit(obj)(obj, *exc, _by=_by)
            before = _RUN_AS.get()
            try:
                run = _by or _leaving_as(ending)
                if run is not None:  # (else an outer subclass's, as it is: review 75a, F3)
                    _RUN_AS.set((run, mark()))
                return _bound(func, obj)(*exc)
            finally:
                _RUN_AS.set(before)
        except BaseException as error:
            # The hook raised with the blocks it ends still open -- cut before its
            # super().__exit__() (a signal as a log call returned), refused there (its own
            # `with self:` through a stack another thread closes), or between the two exits
            # of a weighted entry: the statement is over, and no other exit comes for them.
            # They stayed held and renewed (review 85a, F1; through an ExitStack, 86a, F1;
            # the second of two blocks, found by test_hook_shapes).
            try:  # (twice if a signal cuts the first: see enter_sync)
                _given_up(obj, lambda: _left_open(obj, _by, ending), error)
            except BaseException:
                _given_up(obj, lambda: _left_open(obj, _by, ending), error)
                raise
            raise

    return ExitHook(_hook(_named(exit_sync, func)))


def _bound(hook: Any, obj: Any) -> Any:
    """``hook`` (what the class holds) bound to ``obj`` as the interpreter binds it: through
    its ``__get__`` -- a function's, a decorator object's (wrapt's) -- else as it is."""
    get = getattr(type(hook), "__get__", None)
    return get(hook, obj, type(obj)) if get is not None else hook


def _leaving_as(section: Section | None) -> StackExit | None:
    """What the base's exit reached inside a subclass's own exit (see run_as) ends: the
    ``with`` statement's block ``section`` that exit is leaving -- also where no frame of the
    statement is on the stack: the base's exit run in a task of its own (``asyncio.shield``,
    a TaskGroup, ``wait_for`` on 3.10 and 3.11) ended another task's handed-out block, or
    nothing (LockError, the cancel it replaced lost, the block held while the task lived:
    review 87a, F2). The context a task starts with carries it there."""
    if section is None:
        return None
    stand_in = StackExit(_no_exit)
    stand_in.section = section
    return stand_in


def _no_exit(obj: Any, *exc: Any, _by: StackExit | None = None) -> None:
    """A stand-in's exit (see _leaving_as): never run -- nothing holds a stand-in to run."""


def _hook_entered(obj: Any, since: int) -> list[Section]:
    """The blocks of ``obj`` a subclass's own entry hook (its mark: ``since``) left open."""
    return entered_all_since(obj._blocks, since)


def _left_open(obj: Any, by: StackExit | None, ending: Section | None) -> list[Section]:
    """The blocks an exit of ``obj`` (``by``: what it was called as) whose hook raised
    leaves open: the block it ends (``ending``, if found as it began), and the others its
    statement's entry left with it."""
    if by is None and ending is None:
        ending = leaving(obj._blocks, None)
    return statement_blocks(obj._blocks, ending)


def _given_up(obj: Any, find: Callable[[], list[Section]], error: BaseException) -> None:
    """Give up the open blocks ``find()`` names: a subclass's own hook raised, and no exit
    will come for them (see overriding). Its caller runs it again if a signal cuts it, and
    it gives a block up again if a signal cuts that: cut after the block's close, before its
    lease was given back, the lease stayed held and renewed with no block to find (85a, F3;
    found again by test_hook_shapes). Giving one up twice changes nothing more."""
    for section in find():
        try:
            obj._abort_block(section, error)
        except BaseException:
            obj._abort_block(section, error)
            raise


async def _given_up_async(
    obj: Any, find: Callable[[], list[Section]], error: BaseException
) -> None:
    """:func:`_given_up` for an ``async with`` hook (awaiting what needs it: see _settled)."""
    for section in find():
        try:
            await _settled(obj._abort_block(section, error))
        except BaseException:
            await _settled(obj._abort_block(section, error))
            raise


def _one_statement(obj: Any, since: int) -> None:
    """Mark the blocks a subclass's own entry hook (its mark: ``since``) left open as one
    statement's: an exit hook that raises gives them all up (see statement_blocks)."""
    blocks = getattr(obj, "_blocks", None)
    if isinstance(blocks, Blocks):
        frame = place(blocks).frame
        for section in entered_all_since(blocks, since):
            # (the statement's own, entered from its frame: not a generator's block started
            # inside the hook, which its own statement leaves -- given up with this one when
            # the exit hook raised, while the generator ran on inside it: review 88a, F2)
            if section.frame == frame:
                section.statement = since


def statement_blocks(blocks: Blocks, section: Section | None) -> list[Section]:
    """The open blocks of ``blocks`` that are ``section`` or that its statement's entry hook
    left open with it (see _one_statement), newest first."""
    if section is None:
        return []
    statement = section.statement
    return [
        other
        for other in reversed(list(blocks))
        if other.open
        and (other is section or (statement is not None and other.statement == statement))
    ]


def hook_runs(by: StackExit) -> bool:
    """Whether a subclass's own exit hook runs as ``by``, an exit an ExitStack runs: as
    contextlib's, yes; as a block's second (see _take_exits), only if that one ends what is
    left of the block -- some of it open, and its first cannot run any more (see ends)."""
    if by.first is None:
        return True
    section = by.section
    blocks = section.keep() if section is not None and section.keep is not None else None
    if section is None or blocks is None or not statement_blocks(blocks, section):
        return False
    first = by.first()
    return first is None or not _can_run(first)


def _base_exit(obj: Any) -> Any:
    """The primitive's own exit (an ExitHook's function, taking ``_by``) under the
    subclass's hooks of ``obj``."""
    for cls in type(obj).__mro__:
        hook = cls.__dict__.get("__aexit__" if obj.is_async else "__exit__")
        if type(hook) is ExitHook and not is_hook(hook):
            return hook.func
    raise TypeError(f"{type(obj).__name__} has no exit of the package's")  # (cannot be)


async def _settled(result: Any) -> Any:
    """``result``, awaited if it is awaitable: an ``async with`` adapter on a sync primitive's
    subclass gets the sync clean-up's None, or its exit's answer (review 86a, F2: ``await
    None`` raised TypeError in place of the refusal)."""
    return await result if inspect.isawaitable(result) else result


def _named(wrapper: F, hook: Any) -> F:
    with contextlib.suppress(AttributeError, TypeError):  # (a callable object may have none)
        functools.update_wrapper(wrapper, hook)
    return wrapper


# For each object whose own entry hook (see overriding) this thread or task is inside, its
# blocks and a number below every block entered since the outermost running one began: those
# are the hook's own entries -- super().__enter__() twice, a `with self:` inside it -- never a
# leftover of the `with` statement entering (see unexited; review 83a, F1 and F2: the second
# entry gave the first up, and the body ran holding nothing). One per object: another object's
# hook running inside (a partner's, entering this one again) keeps this one's (review 84a, F1).
_ENTERING: ContextVar[tuple[tuple[Blocks, int], ...]] = ContextVar(
    "redlock_deco_entering", default=()
)


def _marked(
    running: tuple[tuple[Blocks, int], ...], obj: Any, since: int
) -> tuple[tuple[Blocks, int], ...]:
    blocks = getattr(obj, "_blocks", None)
    if not isinstance(blocks, Blocks) or any(known is blocks for known, _ in running):
        return running
    return (*running, (blocks, since))


# The code of the frames overriding() runs a subclass's hooks in (each wrapper's: the same
# code object for every subclass).
_HOOK_CODES: set[Any] = set()


def _hook(wrapper: F) -> F:
    _HOOK_CODES.add(wrapper.__code__)
    return wrapper


def is_hook(hook: Any) -> bool:
    """Whether ``hook`` (a class's ``__enter__``, ``__exit__``...) is one overriding() made."""
    # (by type: a proxy -- wrapt's FunctionWrapper around one of these -- answers for what
    # it wraps, and was taken for a wrapped hook: review 83a, F3)
    func = hook.func if type(hook) is ExitHook else hook
    return type(func) is FunctionType and func.__code__ in _HOOK_CODES


def run_as(blocks: Blocks, by: StackExit | None, where: Place) -> StackExit | None:
    """Which block's own exit an exit of the object whose blocks are ``blocks``, leaving from
    ``where``, is, if any: ``by`` (what it was called as) if an entry through a stack took
    it; else the one a subclass's own exit was run as, if this is the base's reached inside
    it -- of that object, and not the exit of a block entered since it began (a ``with
    self:`` in the subclass's exit, review 76a, F1; or in a task started there, which copies
    the context, F2: each took the other's exit, and a block stayed held for good). Else
    None: an exit read off the class by hand -- ``Lock.__exit__(self, ...)`` in a subclass,
    ``type(cm).__exit__(cm, ...)``, ``stack.push(obj)`` -- is a plain exit, known by where it
    runs (review 74a, F1: taken for a by-hand push, a nested block's exit raised LockError
    and left it held)."""
    if by is not None and by.section is not None:
        return by
    passed = _RUN_AS.get()
    if passed is None:
        return None
    exit, since = passed
    section = exit.section
    if section is None or section.keep is None or section.keep() is not blocks:
        return None
    inner = exiting(blocks, where)  # (what it would end as a plain exit)
    if inner is not None and inner.entry[0] > since:
        return None
    if (exit.func is _no_exit and inner is not None and inner.frame == where.frame
            and inner not in statement_blocks(blocks, section)):  # fmt: skip
        # A stand-in (see _leaving_as) is for the base's exit of the very statement, where
        # no frame of it may be on the stack: not for another block's exit that its own
        # frame finds -- a generator suspended in an older block, closed (or collected)
        # inside the exit hook, ended the statement's block, or nothing: its own stayed
        # held for good (review 88a, F1). (A block found otherwise -- the only one handed
        # out -- is no match for an exit in a task of its own: 87a, F2.)
        return None
    return exit


class Place(NamedTuple):
    """Where a ``with`` block is entered or left from."""

    frame: int  # the id of the frame running the `with` statement (see place())
    code: Any  # that frame's code if it is a generator's, else None
    # The callbacks (a deque) of the ExitStack or AsyncExitStack the block is entered or left
    # through, else None.
    stack: Any
    body: Any = None  # that frame's code, whatever its kind
    at: int = -1  # the offset of the `with` statement there, if a `with` statement enters
    # For an entry through an (Async)ExitStack: the exit it took for the block, the stack
    # itself, the object entered, and whether the exit is pushed as a sync one.
    exit: StackExit | None = None
    keeper: Any = None
    obj: Any = None
    sync: bool = True
    here: Any = None  # the frame itself, if it may be suspended (see Section.inside)


_NOWHERE = Place(0, None, None)

# The opcodes that call a ``with`` statement's ``__enter__`` (3.10; 3.11-3.13; later
# versions have neither, and then no entry is known to be a statement's: see unexited()).
_WITH_NAMES = frozenset({"SETUP_WITH", "BEFORE_WITH"})
_WITH_OPS = frozenset(dis.opmap[name] for name in _WITH_NAMES if name in dis.opmap)
# What comes before the await of an `async with` statement's `__aenter__`, and that await.
_ASYNC_ENTRY = ("BEFORE_ASYNC_WITH", "GET_AWAITABLE", "LOAD_CONST")
_AWAITS = frozenset({"SEND", "YIELD_FROM"})
# Frames that can be suspended with a block open (off every stack, yet not over).
_MAY_SUSPEND = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)  # fmt: skip

# The methods of an (Async)ExitStack that enter the blocks on it, and those that leave them.
_STACK_ENTRIES = frozenset({"enter_context", "enter_async_context"})
_STACK_METHODS = _STACK_ENTRIES | {"__exit__", "__aexit__", "close", "aclose"}


def place(blocks: Blocks | None = None) -> Place:
    """Where the ``with`` block entered or left here is: the first caller outside this
    package and contextlib runs its ``with`` statement (that frame is alive, and so its id
    unique, while the block is open), and the first ExitStack on the way, if any, holds it
    -- with, for an entry, the exit it took for the block (its ``_exit``: see StackExit).

    contextlib is passed through because an ``ExitStack.enter_context`` frame ends as soon
    as the block is entered (its id could be another frame's by the exit), and the block is
    the frame's that runs the stack (review 17, 03: a generator entering its lock through an
    ``(Async)ExitStack`` was not seen as a generator's, and its exit found no block).
    """
    frame: Any = sys._getframe(1)
    stack = entry = None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "contextlib":
            name = frame.f_code.co_name
            if stack is None and name in _STACK_METHODS:
                names = frame.f_locals
                owner = names.get("self")
                if isinstance(owner, (ExitStack, AsyncExitStack)):
                    stack = getattr(owner, "_exit_callbacks", None)
                    taken = names.get("_exit") if name in _STACK_ENTRIES else None
                    if type(taken) is StackExit and stack is not None:
                        entry = (taken, owner, names.get("cm"), name == "enter_context")
        elif not module.startswith("redlock_deco") and not _own_hook(frame, blocks):
            # (A generator's frame is its own statement's, never a hook's helper: one advanced
            # inside an entry hook, entering the object, was taken for the hook's statement,
            # and its block ended by that statement's exit: review 88a, F2.)
            hook = None
            if blocks is not None and blocks.hooked and not _in_generator(frame):
                hook = _hook_above(frame, blocks)
            if hook is None:
                break
            frame = hook  # (what runs between is the hook's: a wrapper, a helper)
            continue
        frame = frame.f_back
    exit, keeper, obj, sync = entry if entry is not None else (None, None, None, True)
    if frame is None:
        return Place(0, None, stack, None, -1, exit, keeper, obj, sync)
    code = frame.f_code
    at = frame.f_lasti if stack is None and frame.f_lasti in _with_offsets(code) else -1
    generator = code if code.co_flags & _SUSPENDS else None
    here = frame if code.co_flags & _MAY_SUSPEND else None
    return Place(id(frame), generator, stack, code, at, exit, keeper, obj, sync, here)


def _in_generator(frame: Any) -> bool:
    return bool(frame.f_code.co_flags & _SUSPENDS)


def _hook_above(frame: Any, blocks: Blocks) -> Any:
    """The nearest frame above ``frame`` that runs a subclass's own hook (see overriding) of
    the object whose blocks are ``blocks``, if any: ``frame`` then runs inside that hook."""
    frame = frame.f_back
    while frame is not None:
        if (
            frame.f_code in _HOOK_CODES
            and getattr(frame.f_locals.get("obj"), "_blocks", None) is blocks
        ):
            return frame
        frame = frame.f_back
    return None


_HOOKS = frozenset({"__enter__", "__exit__", "__aenter__", "__aexit__"})


def _own_hook(frame: Any, blocks: Blocks | None) -> bool:
    """Whether ``frame`` runs a subclass's own ``__enter__``/``__exit__`` (or the async ones)
    of the primitive whose blocks are ``blocks``, on its way to the base's through
    ``super()``: passed through like the package's own frames. (Not one of another primitive
    entering or leaving this one by hand -- a composite's -- which is where that is done:
    passed through, the composite's second block of this one, entered inside a ``with`` on
    it, could not be told from the first, review 77a.) Taken for the frame running the
    ``with`` statement, it ended at once (its id another frame's by the exit) and hid an
    ExitStack's entry: a generator's block was matched to another thread's exit, whose slot
    went while its body ran (review 75a, F1), and a stack's entry took no exit of its own
    (F2)."""
    code = frame.f_code
    if code.co_name not in _HOOKS or not code.co_argcount:
        return False
    obj = frame.f_locals.get(code.co_varnames[0])
    return blocks is not None and getattr(obj, "_blocks", None) is blocks


@functools.lru_cache(maxsize=4096)
def _with_offsets(code: Any) -> frozenset[int]:
    """Where in ``code`` a frame is while a ``with`` statement enters its object, once per
    code object: at the statement's ``BEFORE_WITH`` (``SETUP_WITH``), which calls
    ``__enter__``; for an ``async with``, at the ``SEND`` (``YIELD_FROM``) awaiting
    ``__aenter__``, right after ``BEFORE_ASYNC_WITH``, ``GET_AWAITABLE``, ``LOAD_CONST`` --
    a by-hand ``await obj.__aenter__()`` has a call there instead (3.10 to 3.13). Without
    the async ones, a by-hand entry in an async generator was taken for a statement's, and
    matched to another task's exit from a new generator that got its frame's id after it
    ended. (``co_code`` builds a new bytes object on every read, 3.11+, which every block's
    entry paid twice.)"""
    if not code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raw = code.co_code
        return frozenset(o for o in range(0, len(raw), 2) if raw[o] in _WITH_OPS)
    offsets: list[int] = []
    last: tuple[str, ...] = ()
    for instruction, after in _spans(code):
        name = instruction.opname
        if name in _WITH_NAMES or (name in _AWAITS and last == _ASYNC_ENTRY):
            offsets.extend(range(instruction.offset, after, 2))
        if name != "EXTENDED_ARG":
            last = (*last[-2:], name)
    return frozenset(offsets)


def _spans(code: Any) -> list[tuple[dis.Instruction, int]]:
    """Each instruction of ``code`` with the offset of the next: a frame waiting at an
    instruction with inline caches may report one of them (Python 3.12 reports a ``SEND``'s
    cache entry, not the ``SEND``: an ``async with`` was taken for a by-hand entry, and a
    coroutine awaited by its task for one being closed)."""
    instructions = list(dis.get_instructions(code))
    ends = [i.offset for i in instructions[1:]] + [len(code.co_code)]
    return list(zip(instructions, ends, strict=True))


def unexited(blocks: Blocks, where: Place) -> list[Section]:
    """The open ``with`` blocks of an object (``blocks``) whose statement is over though their
    exit never ran, found as a ``with`` statement enters the object again from ``where``.

    A KeyboardInterrupt can come at the very first instruction of ``__exit__``, before any
    handler of ours: the statement ends, and the block stays open on the object. A block
    dropped with its object is closed by its finalizer, but an object that outlives its
    blocks (``LOCK = Lock(...)``, then ``with LOCK:`` in a loop) kept it: its lease renewed for
    as long as the thread lived, its later blocks re-entering it, every other thread and
    process kept out -- or, once that lease ended, LockLost from every later block on the
    name (review 40, 1). Only blocks of the calling owner entered by a ``with`` statement (a
    by-hand ``__enter__()`` may be left by a later ``__exit__()`` anywhere) count, and only
    when the statement is certainly over:

    - the very statement entering now (same frame, code and offset): one ``with`` statement
      cannot be open twice, so the earlier entry's ended (a loop, or a frame recycled);
    - for a thread's blocks, a frame not on this thread's stack: a frame that cannot be
      suspended runs on its thread's stack until it returns. (Not with greenlet imported:
      greenlets of one thread, unpatched, share an owner and switch stacks.)

    Blocks entered through an ExitStack count, whatever enters now, once cut off from
    contextlib's exit for them (see _stale): the caller's own, or an ended owner's.
    """
    if not blocks:
        return []
    owner = current_owner()
    over: list[Section] = []
    live: set[tuple[int, Any]] | None = None
    since = next((at for known, at in _ENTERING.get() if known is blocks), sys.maxsize)
    for section in list(blocks):
        if section.exit is not None:
            # Entered through a stack: the caller's own, or an ended owner's, once cut off
            # from contextlib's exit (left open, it was kept in the object for good, review
            # 71, L1; another owner's may be on its way).
            if (section.open and (section.owner() is owner or _owner_ended(section))
                    and _stale(section)):  # fmt: skip
                over.append(section)
            continue
        if section.owner() is not owner:
            continue
        if not section.open:  # its close was itself interrupted: finish it (close repeats)
            over.append(section)
            continue
        if section.at < 0 or where.at < 0:
            continue
        if section.frame == where.frame and section.body is where.body and section.at == where.at:
            if section.entry[0] < since:  # (else one of the running entry hook's own)
                over.append(section)
            continue
        if (type(owner) is not ThreadOwner or section.body is None
                or section.body.co_flags & _MAY_SUSPEND or "greenlet" in sys.modules):  # fmt: skip
            continue
        if live is None:
            live = set()
            frame: Any = sys._getframe(1)
            while frame is not None:
                live.add((id(frame), frame.f_code))
                frame = frame.f_back
        if (section.frame, section.body) not in live:
            over.append(section)
    return over


def mark() -> int:
    """A number below the entry of every section opened from now on (see entered_since)."""
    return next(_sequence)


def entered_all_since(blocks: Blocks, since: int) -> list[Section]:
    """Every open block of ``blocks`` the current owner entered after :func:`mark` gave
    ``since``, newest first."""
    owner = current_owner()
    return [
        section
        for section in reversed(list(blocks))
        if section.open and section.owner() is owner and section.entry[0] > since
    ]


def entered_since(blocks: Blocks, since: int) -> Section | None:
    """The open block of ``blocks`` the current owner entered after :func:`mark` gave
    ``since``, if any."""
    owner = current_owner()
    for section in list(blocks):
        if section.open and section.owner() is owner and section.entry[0] > since:
            return section
    return None


def exiting(blocks: Blocks, where: Place, by: StackExit | None = None) -> Section | None:
    """Which of an object's open ``with`` blocks (``blocks``) the block leaving from
    ``where`` is; ``by``, the exit an ExitStack runs, if it is one.

    The exit an ExitStack took as it entered a block (see StackExit): that very block,
    whoever closes the stack, wherever it was handed. Any other exit run by a stack (one
    pushed by hand: ``stack.push(obj)``, ``stack.callback(obj.__exit__, ...)``): the object's
    one block not entered through a stack (an ended owner's ``with`` statement's not
    counted), if its owner is the caller or has ended (nothing
    else says which it is: the frame rules took the closer's own `with` block on the object,
    whose body ran on without its slot, review 23, 02). Not through a stack, among the blocks
    not entered through one: the newest its frame entered for the current owner; else the
    newest the very frame entered (a generator suspended in a block may be resumed by
    another thread; a coroutine closed by the collector in another task: review 79a, F1);
    else the current owner's newest (a subclass's exit may reach the base's through a helper
    of its own: review 80a, F1); else the only block that can only have been handed out.
    (The newest of all would be wrong when blocks on one object end out of order -- a
    generator suspended inside one outlives a later block -- and the ending block would give
    back the generator's slot while keeping its own; and it took another owner's live
    semaphore block, whose body ran on without its slot: review 20, 04.)"""
    if by is not None:  # (one an entry took: see run_as; the caller checks ends())
        section = by.section
        kept = section.keep() if section is not None and section.keep is not None else None
        if section is not None and not section.open and kept is not None:
            # Ended: the next block its statement's entry hook left open -- the exit of a
            # weighted entry (super().__enter__() twice) through an ExitStack runs the
            # base's twice as this one; the second block, with no exit of its own, stayed
            # held and renewed while its thread lived (review 85a, F2).
            rest = statement_blocks(kept, section)
            return rest[0] if rest else section
        return section
    owner = current_owner()
    if where.exit is not None:
        # Inside an entry through an ExitStack: a `with self:` of the subclass's own entry
        # hook leaves the newest block that entry made (see _share_exits).
        for section in reversed(blocks):
            first = section.first() if section.first is not None else None
            if first is where.exit and section.owner() is owner:
                return section
    if where.stack is not None:
        # (a `with` statement's block of an ended owner is none a pushed exit can mean: its
        # own statement leaves it -- a generator's, once resumed -- or nothing does: a
        # dropped task's async generator, never closed, left one on the object for good,
        # and every later pushed exit raised, its own block kept: review 80a)
        rest = [
            section
            for section in blocks
            if section.exit is None and not (section.at >= 0 and _owner_ended(section))
        ]
        if (len(rest) == 1 and rest[0].at < 0  # (a `with` statement's: its own frame leaves it)
                and (rest[0].owner() is owner or _handed_out(rest[0]))):  # fmt: skip
            return rest[0]
        return None
    same_frame = newest_of_owner = None
    handed_out = []
    for section in reversed(blocks):
        if section.exit is not None:
            continue  # its own exit leaves it
        mine = section.owner() is owner
        if section.frame == where.frame:
            if mine:
                return section
            if section.body is where.body and (
                section.lease.pid != os.getpid()  # (a parent's, its frame copied at the fork)
                or (
                    (section.inside is not None and section.inside is where.here)
                    if section.at < 0
                    else section.body.co_flags & _MAY_SUSPEND
                )
            ):
                # (the very frame that entered it, run by another thread or task: a step of
                # a generator, a coroutine closed by the collector -- review 79a, F1. Only a
                # `with` statement's block ends before its frame: for one entered by hand,
                # the frame's id alone, once it had ended, was a new one's, reviews 77a and
                # 78a: that frame is held, see Section.inside.)
                same_frame = same_frame or section
        elif mine:
            newest_of_owner = newest_of_owner or section
        elif _handed_out(section):
            handed_out.append(section)
    if same_frame or newest_of_owner:
        return same_frame or newest_of_owner
    return handed_out[0] if len(handed_out) == 1 else None


# Frames that await (a `with` block's exit there is awaited): a coroutine's, and an async
# generator's -- closed with the coroutine that iterates it (Python 3.13 throws the
# GeneratorExit in: its exit awaited, "coroutine ignored GeneratorExit", and the release was
# left to a coroutine finalized with no loop running).
_ASYNC_GENERATOR = inspect.CO_ASYNC_GENERATOR
_AWAITING = inspect.CO_COROUTINE | _ASYNC_GENERATOR


def closing_coroutine(where: Place) -> bool:
    """Whether the exit leaving from ``where`` (its error a GeneratorExit) runs in a
    coroutine being closed, where nothing may be awaited: closed by a call --
    ``coroutine.close()``, the collector finalizing a dropped task's -- not awaited by the
    running task, whose frames each wait at an await up to the task's own coroutine. (A
    GeneratorExit passing through a coroutine the task runs, ``athrow(GeneratorExit)`` on
    an async generator, awaits its exit as any other error does: its lost lease went
    unreported, review 80a, F3. An async generator's ``aclose()`` awaits its exits too.)"""
    frame = where.here
    if frame is None or not frame.f_code.co_flags & _AWAITING:
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # (no running loop)
        task = None
    root = getattr(task.get_coro(), "cr_frame", None) if task is not None else None
    while frame is not root:
        parent = frame.f_back
        if parent is None or parent.f_lasti not in _await_offsets(parent.f_code):
            # (a task whose own awaitable is an async generator's aclose() -- asyncio's
            # finalizer of a collected generator, shutdown_asyncgens() -- has no coroutine
            # frame: that generator's frame is its root, and awaits its exit)
            return not (
                root is None and task is not None and frame.f_code.co_flags & _ASYNC_GENERATOR
            )
        frame = parent
    return False


@functools.lru_cache(maxsize=1024)
def _await_offsets(code: Any) -> frozenset[int]:
    """Where in ``code`` a frame is while the coroutine it awaits runs."""
    return frozenset(
        at for i, after in _spans(code) if i.opname in _AWAITS for at in range(i.offset, after, 2)
    )


def leaving(blocks: Blocks, by: StackExit | None) -> Section | None:
    """The block of ``blocks`` an exit (``by``: what it was called as) running on the calling
    stack leaves: :func:`exiting` from its :func:`place`, for what it was run as."""
    where = place(blocks)
    return exiting(blocks, where, run_as(blocks, by, where))


def _handed_out(section: Section) -> bool:
    """Whether ``section`` can only be a block handed out of the frame that entered it: not a
    generator's (a generator resumes, and leaves its block itself: review 21, 01 -- an exit
    from elsewhere took a suspended generator's slot), and its owner has ended (a live one
    may still be inside: review 20, 04)."""
    return not section.generator and _owner_ended(section)


def _owner_ended(section: Section) -> bool:
    """Whether the thread or task that entered ``section`` has ended."""
    owner = section.owner()
    return owner is None or (type(owner) is not ThreadOwner and owner.done())  # type: ignore[union-attr]


def waits_for_itself(owner: Owner, key: tuple[str, str], *, blocks_thread: bool) -> str | None:
    """Why waiting here for the lock ``key`` (provider, Redis key) could only run out, or
    None: an open section of this owner holds it (a bare ``acquire()`` does not re-enter
    it), or, for a sync wait (``blocks_thread``), one of another owner on this thread (a
    task of the loop this thread runs, or the thread around that loop), which cannot end
    while the thread waits."""
    if key in tables(owner)[0]:
        return (
            "this thread or task holds it in an open section (a `with` block or a decorated "
            "call), and a bare acquire() belongs to its object, which does not re-enter that "
            "section: it could only wait for itself. Nest a `with` block or a decorated call "
            "instead (those re-enter), or call acquire(blocking=False)"
        )
    if _generator_on_this_stack(key):
        return (
            "a generator running here holds it in a block that another thread or task "
            "entered (a block belongs to the thread or task that entered it, and re-enters "
            "only there), so this could only wait for itself. Hold the lock by its object "
            "across the generator's steps (lock.acquire() ... finally: lock.release()), or "
            "run its steps in one thread or task"
        )
    if not blocks_thread:
        if type(owner) is not ThreadOwner and key in process.thread_owner().tables[0]:
            # The mirror of the sync case below (review 16, 05: a sync @locked call running
            # asyncio.run of an @locked coroutine on the same name waited its whole `wait`,
            # forever with wait=None, then blamed "someone else").
            return (
                "this thread holds it in an open section around the event loop that runs "
                "this task (asyncio.run or run_until_complete inside a `with` block or a "
                "decorated call), and that section cannot end while the loop runs: this task "
                "could only wait for itself. Take the lock in one of the two, not both"
            )
        return None
    for lease in process.thread_owner().here:
        if (lease.provider, lease.key) == key:
            return (
                "a section of another task of the event loop running in this thread (or of "
                "this thread, around that loop) holds it, and a sync acquire blocks the "
                "thread, so that section could never end while this one waits; in async code "
                "use redlock_deco.asyncio.Lock (`async with`)"
            )
    return None


_NO_DEFAULT: Any = object()
D = TypeVar("D")


@overload
def current_lease() -> Lease: ...
@overload
def current_lease(default: D) -> Lease | D: ...
def current_lease(default: Any = _NO_DEFAULT) -> Any:
    """The innermost lease held by the calling thread or task, inside a protected call.

    Inside a ``@locked``/``@limited`` call or a ``with Lock(...)``/``Semaphore(...)`` block
    there always is one: ``.name``, ``.key``, ``.token``, ``.fencing_token``, ``.remaining()``,
    ``.lost``. Outside one, it raises :class:`LockError` -- a lease read there is a bug (say, in
    a thread or task started inside the call, which does not inherit it), better reported
    than answered with None -- unless ``default`` is given, which is returned instead (as
    :meth:`contextvars.ContextVar.get` does): ``current_lease(None)``.

    A task's loop running inside a locked sync call happens: the most recently entered of
    the thread's and the task's stack tops is the innermost.
    """
    candidates = [process.thread_tables()[1]]
    owner = current_owner()
    if type(owner) is not ThreadOwner:
        candidates.append(tables(owner)[1])
    tops = [calls[-1] for calls in candidates if calls]
    if tops:
        return max(tops, key=lambda entry: entry[0])[1]
    if default is not _NO_DEFAULT:
        return default
    raise LockError(
        "current_lease() was called outside any protected call of this thread or task: call "
        "it inside a @locked/@limited function or a `with Lock(...)` block (a thread or task "
        "started inside one does not inherit its lease), or pass a default, as in "
        "current_lease(None), to get that instead",
        name="",  # no lock is concerned: there is none
        key="",
    )

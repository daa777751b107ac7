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
import inspect
import itertools
import sys
import weakref
from collections.abc import Callable
from contextlib import AsyncExitStack, ExitStack
from typing import Any, NamedTuple, TypeVar, overload

from . import _process as process
from ._errors import LockError
from ._lifecycle import Lease
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

    __slots__ = ("__weakref__",)


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
        "frame",
        "generator",
        "held",
        "here",
        "keep",
        "keeper",
        "lease",
        "open",
        "owner",
        "slot",
        "stack",
        "through",
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
        # The callbacks of the ExitStack it was entered through, which only that stack's
        # exit leaves (see Place.stack), and the index there of the exit the stack pushes
        # as the entry returns (see _exit_missing).
        self.through: weakref.ref[Any] | None = None
        self.slot = -1
        self.keeper: weakref.ref[Any] | None = None  # that ExitStack itself
        self.entry = (next(_sequence), lease)
        self.keep: weakref.ref[Blocks] | None = None  # its object's open blocks
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
    frame, code, through = where.frame, where.code, where.stack
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
        if through is not None:
            if where.keeper is not None:
                # The stack's callbacks now, after the wait: a pop_all() meanwhile (another
                # task's, while this one waited for the lock) gave the stack new ones, where
                # contextlib pushes this block's exit; recorded before, the block counted as
                # missing its exit, and was given up while its body ran (review 73a, F1).
                through = getattr(where.keeper, "_exit_callbacks", through)
                section.keeper = weakref.ref(where.keeper)
            # (its length now: the stack pushes this block's exit as the entry returns, with
            # no await or line of another caller between -- callbacks are last in, first out)
            section.slot = len(through)
            section.through = weakref.ref(through, _stack_gone(section))
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
    except BaseException:
        close(section)
        raise


def _stack_gone(section: Section) -> Callable[[Any], None]:
    """What a block entered through an ExitStack does as that stack is collected with the
    block still open: its exit will never run -- an interrupt in contextlib's own window
    (after __enter__ returned, before the exit was pushed; or as the stack's exit began)
    left it held and renewed for good, a limit-1 semaphore object refusing every later entry
    (review 69, F1). As a section dropped open does (see _Open)."""

    def gone(_: Any) -> None:
        if section.open and close(section):
            section.dropped(section.lease)

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
        hk = (lease.provider, lease.key)
        if section.held.get(hk) is lease:
            section.held.pop(hk, None)
        section.here.pop(lease, None)
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


class Place(NamedTuple):
    """Where a ``with`` block is entered or left from."""

    frame: int  # the id of the frame running the `with` statement (see place())
    code: Any  # that frame's code if it is a generator's, else None
    # The callbacks (a deque) of the ExitStack or AsyncExitStack the block is entered or left
    # through, else None. ExitStack.pop_all() moves that very deque to the stack it returns,
    # so it names the block exactly wherever the stack is handed and whoever closes it; a
    # frame or an owner only guesses, and a guess ended the closer's own block on the same
    # semaphore object (review 22, 06 and 07: a third holder got in while its body ran).
    stack: Any
    body: Any = None  # that frame's code, whatever its kind
    at: int = -1  # the offset of the `with` statement there, if a `with` statement enters
    keeper: Any = None  # the (Async)ExitStack itself, whose callbacks may be replaced


_NOWHERE = Place(0, None, None)

# The opcodes that call a ``with`` statement's ``__enter__`` (3.10; 3.11-3.13; later
# versions have neither, and then no entry is known to be a statement's: see unexited()).
_WITH_OPS = frozenset(
    dis.opmap[name] for name in ("SETUP_WITH", "BEFORE_WITH") if name in dis.opmap
)
# Frames that can be suspended with a block open (off every stack, yet not over).
_MAY_SUSPEND = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)  # fmt: skip

# The methods of an (Async)ExitStack that enter or leave the blocks on it.
_STACK_METHODS = frozenset(
    {"enter_context", "enter_async_context", "__exit__", "__aexit__", "close", "aclose"}
)


def place() -> Place:
    """Where the ``with`` block entered or left here is: the first caller outside this
    package and contextlib runs its ``with`` statement (that frame is alive, and so its id
    unique, while the block is open), and the first ExitStack on the way, if any, holds it.

    contextlib is passed through because an ``ExitStack.enter_context`` frame ends as soon
    as the block is entered (its id could be another frame's by the exit), and the block is
    the frame's that runs the stack (review 17, 03: a generator entering its lock through an
    ``(Async)ExitStack`` was not seen as a generator's, and its exit found no block).
    """
    frame: Any = sys._getframe(1)
    stack = keeper = None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "contextlib":
            if stack is None and frame.f_code.co_name in _STACK_METHODS:
                owner = frame.f_locals.get("self")
                if isinstance(owner, (ExitStack, AsyncExitStack)):
                    stack, keeper = getattr(owner, "_exit_callbacks", None), owner
        elif not module.startswith("redlock_deco"):
            break
        frame = frame.f_back
    if frame is None:
        return Place(0, None, stack, keeper=keeper)
    code = frame.f_code
    at = frame.f_lasti if stack is None and frame.f_lasti in _with_offsets(code) else -1
    return Place(id(frame), code if code.co_flags & _SUSPENDS else None, stack, code, at, keeper)


@functools.lru_cache(maxsize=4096)
def _with_offsets(code: Any) -> frozenset[int]:
    """The offsets of ``code``'s ``with`` entries, once per code object: ``co_code`` builds a
    new bytes object on every read (3.11+), which every block's entry paid twice."""
    raw = code.co_code
    return frozenset(offset for offset in range(0, len(raw), 2) if raw[offset] in _WITH_OPS)


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

    Blocks entered through an ExitStack count whatever enters now (a statement, the stack,
    by hand): one whose stack holds no exit for it any more (see _exits_missing).
    """
    if not blocks:
        return []
    owner = current_owner()
    over: list[Section] = []
    live: set[tuple[int, Any]] | None = None
    missing = _exits_missing(blocks)
    for section in list(blocks):
        if section.through is not None and section in missing:
            # The caller's own, or one whose owner has ended (no window of its can still
            # be under way: left open, it was kept in the object for good, review 71, L1).
            if section.owner() is owner or _owner_ended(section):
                over.append(section)
            continue
        if section.owner() is not owner:
            continue
        if not section.open:  # its close was itself interrupted: finish it (close repeats)
            over.append(section)
            continue
        if section.through is not None:
            continue
        if section.at < 0 or where.at < 0:
            continue
        if section.frame == where.frame and section.body is where.body and section.at == where.at:
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


def _exits_missing(blocks: Blocks) -> list[Section]:
    """The open blocks of an object entered through an ExitStack whose exit can never come:
    its stack is gone, or holds no exit of the object at all -- neither the callbacks the
    block was entered on nor the stack's current ones (a pop_all() or a close by another
    thread or a signal handler while the exit was on its way put it on those). An interrupt
    in contextlib's own window -- after __enter__ returned, before the exit was pushed; or
    between the stack's pop of the exit and its call -- left the block open, held and
    renewed, a limit-1 semaphore object refusing every later entry: for good with a stack
    reused entry after entry, whose deque outlives every exit (review 70, F2).

    Only when certain. While the stack holds an exit of the object, which blocks it is for
    cannot be told for sure: an index recorded at the entry moves with every push, close or
    pop_all() another thread or a handler makes before contextlib's push, and reading
    blocks off the exits' positions gave up live blocks (reviews 71 and 72, F1; 73a, F2).
    A block so left goes once the stack holds no exit of the object, or with the stack.
    Never one still on its way: not another owner's (see unexited), and not one whose
    stack's entry or exit is under way on the calling stack (a signal handler, a finalizer
    or a callback run in contextlib's window: review 71a, F1)."""
    missing: list[Section] = []
    busy: set[int] | None = None
    for section in list(blocks):
        if not section.open or section.through is None:
            continue
        keeper = section.keeper() if section.keeper is not None else None
        stacks = [
            stack
            for stack in (section.through(), getattr(keeper, "_exit_callbacks", None))
            if stack is not None
        ]
        if stacks:
            if busy is None:
                busy = _stacks_at_work()
            if any(id(stack) in busy or _exits_on(stack, blocks) for stack in stacks):
                continue
        missing.append(section)
    return missing


def _exits_on(stack: Any, blocks: Blocks) -> list[int]:
    """The indexes on ``stack`` (an ExitStack's callbacks) of the exits of the object whose
    open blocks are ``blocks``. (list() of a deque is one C call: a stack handed to another
    thread may change meanwhile.)"""
    return [index for index, entry in enumerate(list(stack)) if _exit_of(entry, blocks)]


def _matched(sections: list[Section], exits: list[int]) -> dict[int, Section]:
    """Which of ``sections`` (blocks entered through one stack, in entry order) each exit
    index on it is. A block's exit goes on top as its entry returns, at or above the index
    it recorded (Section.slot: above it if something else was pushed between -- another
    thread's, a signal handler's -- review 72, F1), and later blocks' exits above earlier
    ones': the newest block takes the highest free index at or above its slot. One cut
    before its push takes none, and its index goes to whichever block came after."""
    free = sorted(exits)
    matched: dict[int, Section] = {}
    for section in reversed(sections):
        index = next((at for at in reversed(free) if at >= section.slot), None)
        if index is not None:
            free.remove(index)
            matched[index] = section
    return matched


def _stacks_at_work() -> set[int]:
    """The ids of the callbacks of every (Async)ExitStack whose entry or exit runs on the
    calling stack (a frame of its enter_context, __exit__, close...) -- but the entry now
    calling the library, if a stack makes it: that one is only beginning."""
    at_work: set[int] = set()
    frame: Any = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("redlock_deco"):
        frame = frame.f_back
    if (frame is not None and frame.f_globals.get("__name__") == "contextlib"
            and frame.f_code.co_name in ("enter_context", "enter_async_context")):  # fmt: skip
        frame = frame.f_back
    while frame is not None:
        if (frame.f_globals.get("__name__") == "contextlib"
                and frame.f_code.co_name in _STACK_METHODS):  # fmt: skip
            owner = frame.f_locals.get("self")
            if isinstance(owner, (ExitStack, AsyncExitStack)):
                at_work.add(id(getattr(owner, "_exit_callbacks", None)))
        frame = frame.f_back
    return at_work


def _exit_of(entry: Any, blocks: Blocks) -> bool:
    """Whether an ExitStack's callback entry (``(is_sync, callback)``) is the exit of the
    object whose open blocks are ``blocks``: contextlib binds it (``enter_context``, ``push``)
    or wraps the bound method (``callback(obj.__exit__, ...)``)."""
    callback = entry[1] if isinstance(entry, tuple) and len(entry) == 2 else entry
    for candidate in (callback, getattr(callback, "__wrapped__", None)):
        bound = getattr(candidate, "__self__", None)
        if bound is not None and getattr(bound, "_blocks", None) is blocks:
            return True
    return False


def mark() -> int:
    """A number below the entry of every section opened from now on (see entered_since)."""
    return next(_sequence)


def entered_since(blocks: Blocks, since: int) -> Section | None:
    """The open block of ``blocks`` the current owner entered after :func:`mark` gave
    ``since``, if any."""
    owner = current_owner()
    for section in list(blocks):
        if section.open and section.owner() is owner and section.entry[0] > since:
            return section
    return None


def exiting(blocks: Blocks, where: Place) -> Section | None:
    """Which of an object's open ``with`` blocks (``blocks``) the block leaving from
    ``where`` is.

    Through an ExitStack: the block entered through that very stack whose exit the stack
    has just popped (whoever closes it, wherever it was handed); else the object's only
    block not entered through a stack, if its owner is the caller or has ended. Not through
    a stack, among the blocks not entered through a stack that still exists: the newest its
    frame entered for the current owner; else the newest its frame entered (a generator
    suspended in a block may be resumed by another thread); else the current owner's
    newest; else the only block that can only have been handed out. (The newest of all
    would be wrong when blocks on one object end out of order -- a generator suspended
    inside one outlives a later block -- and the ending block would give back the
    generator's slot while keeping its own; and it took another owner's live semaphore
    block, whose body ran on without its slot: review 20, 04.)"""
    stack = where.stack
    owner = current_owner()
    if stack is not None:
        # The exit the stack has just popped was on top, at the index its length is now (or
        # below, if something was pushed since): the block it is, matched as _matched does.
        # Not merely the newest through the stack: a block whose exit was never pushed took
        # another's exit -- a by-hand block's, pushed with stack.push(), which then stayed
        # held and renewed for good (review 71, F2).
        at = len(stack)
        on_it = [s for s in blocks if s.open and s.through is not None and s.through() is stack]
        section = _matched(on_it, [*_exits_on(stack, blocks), at]).get(at)
        if section is not None:
            # Blocks that recorded one index (entered at once by two threads; one entering
            # as this exit began, its own exit not pushed yet): which exit is whose cannot be
            # told, and the block still being entered was given back while its body ran --
            # the newest (review 72b, F1), or the oldest (73b, F2). Only one that cannot be
            # on its way: the closer's own, or one whose owner has ended; else none (the
            # exit raises, releasing nothing).
            tied = [s for s in on_it if s.slot == section.slot]
            if len(tied) == 1:
                return section
            done = [s for s in tied if s.owner() is owner or _owner_ended(s)]
            return (section if section in done else done[-1]) if done else None
        # An exit pushed onto the stack by hand (stack.push(obj), stack.callback(obj.__exit__))
        # for a block entered by hand: nothing says which block it is, and the frame rules
        # took the closer's own `with` block on the object, whose body ran on without its
        # slot (review 23, 02). Only an unambiguous one: the object's one such block.
        rest = [section for section in blocks if not _through_live_stack(section)]
        if len(rest) == 1 and (rest[0].owner() is owner or _handed_out(rest[0])):
            return rest[0]
        # A stack closed or handed on by another thread while a block's exit was on its way
        # put the exit below the index the block recorded: the one block through the stack
        # that cannot be on its way -- the closer's own, or an ended owner's (review 73b,
        # F1: the exit raised, and the block stayed held).
        done = [s for s in on_it if s.owner() is owner or _owner_ended(s)]
        return done[0] if len(done) == 1 else None
    same_frame = newest_of_owner = None
    handed_out = []
    for section in reversed(blocks):
        if _through_live_stack(section):
            continue  # its own stack leaves it
        mine = section.owner() is owner
        if section.frame == where.frame:
            if mine:
                return section
            same_frame = same_frame or section
        elif mine:
            newest_of_owner = newest_of_owner or section
        elif _handed_out(section):
            handed_out.append(section)
    if same_frame or newest_of_owner:
        return same_frame or newest_of_owner
    return handed_out[0] if len(handed_out) == 1 else None


def _through_live_stack(section: Section) -> bool:
    """Whether ``section`` was entered through an ExitStack that still exists (which alone
    leaves it)."""
    return section.through is not None and section.through() is not None


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

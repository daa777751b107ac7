"""What an interrupt raised from a trace function may and may not stand for."""

from __future__ import annotations

import dis
import functools
import itertools
from types import CodeType


@functools.cache
def _lined(code: CodeType) -> list[tuple[int, dis.Instruction]]:
    """``code``'s instructions, each with the line it belongs to."""
    lined = []
    line = code.co_firstlineno
    for ins in dis.get_instructions(code):
        positions = getattr(ins, "positions", None)  # 3.11+; 3.10 says where lines start
        if positions is not None and positions.lineno is not None:
            line = positions.lineno
        elif type(ins.starts_line) is int:
            line = ins.starts_line
        lined.append((line, ins))
    return lined


@functools.cache
def with_exits(code: CodeType) -> dict[int, int]:
    """Line -> offset of the ``with`` statements in ``code``: a line event of that line
    after that offset is the block's exit (where ``__exit__`` is about to be called)."""
    exits: dict[int, int] = {}
    for line, ins in _lined(code):
        if ins.opname in ("BEFORE_WITH", "BEFORE_ASYNC_WITH", "SETUP_WITH", "SETUP_ASYNC_WITH"):
            exits[line] = ins.offset
    return exits


@functools.cache
def nop_lines(code: CodeType) -> frozenset[int]:
    """Lines of ``code`` whose instructions are all NOPs, such as a ``try:`` line on 3.11+.
    A trace function raising there is outside every handler of the function, so not even an
    enclosing ``finally`` runs (checked by hand on 3.11: raised at an inner ``try:`` line,
    the outer ``finally`` of the same function was skipped); a real signal is only ever
    raised at a call or a backward jump, never at a NOP."""
    kinds: dict[int, set[str]] = {}
    for line, ins in _lined(code):
        kinds.setdefault(line, set()).add(ins.opname)
    return frozenset(line for line, names in kinds.items() if names <= {"NOP"})


# Instructions after which the next one is not reached by falling through.
_NO_FALL = frozenset({
    "RETURN_VALUE", "RETURN_CONST", "RERAISE", "RAISE_VARARGS", "JUMP_FORWARD", "JUMP_BACKWARD",
    "JUMP_ABSOLUTE", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT",
})  # fmt: skip


@functools.cache
def _with_entries(code: CodeType) -> dict[int, frozenset[int]]:
    """Line -> the offsets from which that line falls through, without leaving it, into one
    of its ``with`` statements' entries. A ``with`` in a ``finally`` is compiled more than
    once (the normal and the exceptional path), so a line may have several."""
    runs = _lined(code)
    entries: dict[int, set[int]] = {}
    for index, (line, ins) in enumerate(runs):
        if ins.opname not in ("BEFORE_WITH", "BEFORE_ASYNC_WITH", "SETUP_WITH", "SETUP_ASYNC_WITH"):
            continue
        back = index
        while back >= 0 and runs[back][0] == line:
            entries.setdefault(line, set()).add(runs[back][1].offset)
            if runs[back][1].is_jump_target or (back and runs[back - 1][1].opname in _NO_FALL):
                break
            back -= 1
    return {line: frozenset(offsets) for line, offsets in entries.items()}


@functools.cache
def _fall_outs(code: CodeType) -> frozenset[int]:
    """Offsets where a line begins that is only ever reached from inside a protected range of
    the exception table that does not cover it (3.11+): the first line of a ``finally``
    body's copy on the normal path, right after the ``try`` body. A trace function raising
    there skips that ``finally`` -- redis-py's release of its single-connection lock
    (``_execute_command``), which left the lock held by a thread, and every other thread
    hung (the threaded reply search) -- but no real signal does: it is raised at a call's
    return or a backward jump, and the last one before such a line is inside the range (the
    handler runs), the next one later in the body."""
    bytecode = dis.Bytecode(code)
    entries = getattr(bytecode, "exception_entries", None)
    if entries is None:  # 3.10: a block stack, popped (POP_BLOCK) as the ``try`` body ends
        runs = list(bytecode)
        return frozenset(
            ins.offset
            for before, ins in itertools.pairwise(runs)
            if before.opname == "POP_BLOCK" and ins.starts_line is not None
        )
    if not entries:
        return frozenset()

    def covering(offset: int) -> int | None:
        """The handler of ``offset`` (entries of one handler differ by stack depth)."""
        return next((e.target for e in entries if e.start <= offset < e.end), None)

    runs = [ins for _, ins in _lined(code) if ins.opname != "CACHE"]
    sources: dict[int, list[int]] = {}  # offset -> the offsets that run on into it
    for index, ins in enumerate(runs):
        if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
            sources.setdefault(int(ins.argval), []).append(ins.offset)
        if index + 1 < len(runs) and ins.opname not in _NO_FALL:
            sources.setdefault(runs[index + 1].offset, []).append(ins.offset)
    lined = _lined(code)
    starts = {
        ins.offset for (before, _), (line, ins) in itertools.pairwise(lined) if line != before
    }
    outs = set()
    for offset in starts:
        target = covering(offset)
        froms = sources.get(offset, [])
        if froms and all(covering(f) not in (None, target) for f in froms):
            outs.add(offset)
    return frozenset(outs)


def signal_cannot_land(code: CodeType, line: int, lasti: int) -> bool:
    """Is a line event at ``line`` (instruction ``lasti``) one where no real signal can be
    raised, but a tracer's exception would skip handlers: a ``with``'s exit, a NOP line, or
    the first line of a ``finally`` body fallen into from its ``try`` body (_fall_outs).
    (An exit: a line event of a ``with`` line that does not run on into an entry.)"""
    entries = _with_entries(code).get(line)
    return (
        (entries is not None and lasti not in entries)
        or line in nop_lines(code)
        or lasti in _fall_outs(code)
    )

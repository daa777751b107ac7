"""What an interrupt raised from a trace function may and may not stand for."""

from __future__ import annotations

import dis
import functools
from types import CodeType


@functools.cache
def with_exits(code: CodeType) -> dict[int, int]:
    """Line -> offset of the ``with`` statements in ``code``: a line event of that line
    after that offset is the block's exit (where ``__exit__`` is about to be called)."""
    exits: dict[int, int] = {}
    line = code.co_firstlineno
    for ins in dis.get_instructions(code):
        positions = getattr(ins, "positions", None)  # 3.11+; 3.10 says where lines start
        if positions is not None and positions.lineno is not None:
            line = positions.lineno
        elif type(ins.starts_line) is int:
            line = ins.starts_line
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
    line = code.co_firstlineno
    for ins in dis.get_instructions(code):
        positions = getattr(ins, "positions", None)
        if positions is not None and positions.lineno is not None:
            line = positions.lineno
        elif type(ins.starts_line) is int:
            line = ins.starts_line
        kinds.setdefault(line, set()).add(ins.opname)
    return frozenset(line for line, names in kinds.items() if names <= {"NOP"})


def signal_cannot_land(code: CodeType, line: int, lasti: int) -> bool:
    """Is a line event at ``line`` (instruction ``lasti``) one where no real signal can be
    raised, but a tracer's exception would skip handlers: a ``with``'s exit, or a NOP line."""
    entered_at = with_exits(code).get(line)
    return (entered_at is not None and lasti > entered_at) or line in nop_lines(code)

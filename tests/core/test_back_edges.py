"""No interrupt at a loop's back edge skips the handler around the loop (CPython 3.11-3.13).

A signal's handler runs, and ``KeyboardInterrupt`` is raised, where the interpreter checks
for pending work -- a function's start, a call's return, and a loop's back edge
(``JUMP_BACKWARD``). The exception is then handled by the exception-table entry of the
instruction the interpreter blames, and for a back edge that is not always an instruction of
the loop:

- 3.11 and 3.12 jump first and check after, and blame the instruction *before the loop's
  top* (cpython#108214), so an earlier handler of the same function can see the interrupt
  (3.12.0-3.12.1 also check on the jump out of an ``except`` clause). Not checked here: the
  handler blamed is at least one of the function's own;
- 3.13 checks first and blames the back edge itself, which its compiler often leaves out of
  the table: the back edge of a ``while`` loop, of a loop whose body ends in an ``if``, of a
  comprehension with an ``if`` (cpython#130279). An interrupt there skipped every handler of
  the function: a ``with`` statement's ``__exit__`` never ran. Under ``with self._lock:`` in
  ``Flag.set`` or the grant board, a ``threading.Lock`` stayed held for good and every later
  wait of the process hung (review 43, real signals on 3.13.0).

So, on 3.13 and later, for every loop of the package's code that runs while something is held
(every layer but the operator's), the back edge must have the handler of the loop's top. A
loop that would not is written as a function of its own (the call is covered, and the callee
has no handler to skip) or reshaped: ``while True`` with an ``if ...: break``, an
``if not ...: continue`` instead of a body that ends in an ``if``, a generator expression
instead of a comprehension with an ``if``. Static, on the running Python: CI's 3.13 leg runs
it. 3.10 has no exception table (a block stack).
"""

from __future__ import annotations

import dis
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "redlock_deco"

# The operator layer (test_layers.LAYERS): command-line tools, the demo, the test servers,
# tracing. None of it runs inside a protected call or holds a lock of the library's.
OUTSIDE = {"_inspection", "_cli", "_demo", "__main__", "acl", "otel", "testing"}

# A handler that only tidies up and re-raises: a comprehension's (3.12+, restoring its
# variable), an except clause's (restoring the exception it handled) or a generator's (turning
# StopIteration into RuntimeError). Skipping one matters
# only if what it re-raises into is a real handler.
TIDYING = {
    "SWAP", "POP_TOP", "STORE_FAST", "LOAD_CONST", "NOP", "STORE_FAST_STORE_FAST", "COPY",
    "POP_EXCEPT", "DELETE_FAST",
}  # fmt: skip


def codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from codes(const)


def entry(table: list[dis._ExceptionTableEntry], offset: int) -> object:
    return next((e for e in table if e.start <= offset < e.end), None)


def handler(found: object) -> object:
    """What an entry does with an exception (its range aside)."""
    if found is None:
        return None
    return found.target, found.depth, found.lasti  # type: ignore[attr-defined]


def real(code_entries: tuple[list[dis.Instruction], list[dis._ExceptionTableEntry]],
         found: object, seen: frozenset[int] = frozenset()) -> bool:  # fmt: skip
    """Does the handler of exception-table entry ``found`` do anything but tidy and
    re-raise into no real handler?"""
    instructions, table = code_entries
    if found is None or found.target in seen:  # type: ignore[attr-defined]
        return False
    target: int = found.target  # type: ignore[attr-defined]
    index = next(i for i, ins in enumerate(instructions) if ins.offset == target)
    first = instructions[index]
    if first.opname == "CALL_INTRINSIC_1" and "STOPITERATION" in first.argrepr:
        return False
    while instructions[index].opname in TIDYING:
        index += 1
    if instructions[index].opname == "RERAISE":
        again = entry(table, instructions[index].offset)
        return real(code_entries, again, seen | {target})
    return True


def skipped_handlers(path: Path) -> list[str]:
    """Each back edge of ``path``'s code whose blamed instruction is handled otherwise than
    its loop's top: "function (line N)"."""
    found: list[str] = []
    for code in codes(compile(path.read_text("utf-8"), str(path), "exec")):
        instructions = list(dis.Bytecode(code))
        table = dis.Bytecode(code).exception_entries
        for ins in instructions:
            if ins.opname != "JUMP_BACKWARD":
                continue
            top = ins.argval
            here, there = entry(table, ins.offset), entry(table, top)
            if handler(here) != handler(there) and (real((instructions, table), here)
                                  or real((instructions, table), there)):  # fmt: skip
                line = ins.positions.lineno if ins.positions else None
                found.append(f"{code.co_qualname} (line {line})")
    return found


@pytest.mark.skipif(sys.version_info < (3, 13), reason="3.13's compiler (see the module)")
def test_no_back_edge_interrupt_skips_the_handler_around_its_loop() -> None:
    modules = sorted(p for p in PACKAGE.glob("*.py") if p.stem not in OUTSIDE)
    assert len(modules) > 30
    found = {p.stem: skipped_handlers(p) for p in modules}
    assert {name: sites for name, sites in found.items() if sites} == {}

"""The sync/async twins, compared mechanically (issue 23: ``unasync --check`` for our pairs).

Every ``async def`` in the package is either one half of a pair -- a function or method
whose name, once ``async``/``sync`` is taken out of it and out of its class's name
(``_take_async`` ~ ``_take``, ``AsyncTarget.execute`` ~ ``SyncTarget.execute``,
``async_renewer`` ~ ``renewer``), is also defined without ``async`` in the same module -- or
listed as asyncio-only. Both halves are normalised the same way (docstrings dropped,
``await`` removed, ``async def``/``async with``/``async for`` made plain, every identifier
neutralised as above, nested functions compared on their own), and the lines that still
differ must be exactly those recorded in ``twins.txt`` under the pair, where a
``why:`` line says why they differ on purpose. Any other difference -- a fix made in one
twin only, a drifted condition -- fails ``tests/core/test_twins.py``, which prints the pair's
current difference to review and record.

    python -m tests.support.twins            # print every pair and its difference
    python -m tests.support.twins --update   # rewrite twins.txt from the code, keeping each why:
"""

from __future__ import annotations

import ast
import difflib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "redlock_deco"
TABLE = Path(__file__).resolve().parent / "twins.txt"
UNEXPLAINED = "(not yet explained)"


def neutral(name: str) -> str:
    """``name`` with its sync/async marker taken out."""
    name = re.sub(r"_a?sync$", "", name)
    name = re.sub(r"^(_?)a?sync_", r"\1", name)
    return re.sub(r"(Async|Sync)(?=[A-Z_]|$)", "", name)


class _Neutral(ast.NodeTransformer):
    def visit_Await(self, node: ast.Await) -> ast.AST:
        return self.visit(node.value)

    def _plain(self, node: ast.AST, plain: type[ast.AST]) -> ast.AST:
        node = self.generic_visit(node)
        return ast.copy_location(plain(**{f: getattr(node, f) for f in node._fields}), node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self.visit_FunctionDef(self._plain(node, ast.FunctionDef))  # type: ignore[arg-type]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        node.name = neutral(node.name)
        return node

    def visit_AsyncWith(self, node: ast.AsyncWith) -> ast.AST:
        return self._plain(node, ast.With)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> ast.AST:
        return self._plain(node, ast.For)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = neutral(node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        node.attr = neutral(node.attr)
        return node


_EMPTY = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])


def normalised(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """``function``'s source, normalised as the module docstring says, line by line."""
    tree = ast.parse(ast.unparse(function))
    outer = tree.body[0]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                node.body = body[1:] or [ast.Pass()]
            if node is not outer and not isinstance(node, ast.ClassDef):
                node.body, node.args = [ast.Pass()], _EMPTY  # compared as a pair of its own
    lines = ast.unparse(_Neutral().visit(tree)).splitlines()
    # Python 3.10's unparse writes a tuple target in parentheses, "(a, b) = ...", where 3.11+
    # write "a, b = ...": one spelling, so the table holds on every Python CI runs.
    return [_TUPLE_TARGET.sub(r"\1\2 = ", line) for line in lines]


_TUPLE_TARGET = re.compile(r"^(\s*)\(([^()=]+)\) = ")


def _definitions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(prefix + node.name, node)
                walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")

    walk(tree.body, "")
    return found


def _is_async_side(qualname: str, node: ast.AST) -> bool:
    return isinstance(node, ast.AsyncFunctionDef) or any(
        neutral(part) != part and re.search(r"(?i)(^|_)async|Async", part)
        for part in qualname.split(".")
    )


@dataclass
class Pair:
    """A sync function and its async twin (or an async function with none: ``sync`` None)."""

    module: str
    async_name: str
    sync_name: str | None
    difference: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        if self.sync_name is None:
            return f"{self.module}: {self.async_name} (asyncio only)"
        return f"{self.module}: {self.sync_name} ~ {self.async_name}"


def pairs() -> list[Pair]:
    """Every async function of the package, with its sync twin and their difference."""
    found: list[Pair] = []
    for path in sorted(PACKAGE.glob("*.py")):
        definitions = _definitions(ast.parse(path.read_text()))
        groups: dict[str, list[str]] = {}
        for qualname in definitions:
            key = ".".join(neutral(part) for part in qualname.split("."))
            groups.setdefault(key, []).append(qualname)
        for names in groups.values():
            asyncs = [n for n in names if _is_async_side(n, definitions[n])]
            syncs = [n for n in names if n not in asyncs]
            marked = [n for n in syncs if re.search(r"(?i)sync", n)]
            if len(syncs) > 1 and len(marked) == 1:
                syncs = marked  # busy ~ busy_sync ~ busy_async: the twin says it is one
            for name in asyncs:
                if len(asyncs) != 1 or len(syncs) != 1:
                    # An async function, or a method of an async class, without a twin (a
                    # plain function named *_async without one, is_async, is no half).
                    if isinstance(definitions[name], ast.AsyncFunctionDef) or "." in name:
                        found.append(Pair(path.name, name, None))
                    continue
                twin = syncs[0]
                ours, theirs = normalised(definitions[name]), normalised(definitions[twin])
                difference = [
                    line
                    for line in difflib.unified_diff(theirs, ours, lineterm="", n=0)
                    if line[:1] in "+-" and not line.startswith(("+++", "---"))
                ]
                found.append(Pair(path.name, name, twin, difference))
    return found


def read_table(path: Path = TABLE) -> dict[str, tuple[str, list[str]]]:
    """``twins.txt``: title -> (why, recorded difference)."""
    table: dict[str, tuple[str, list[str]]] = {}
    title: str | None = None
    why, lines = "", []
    for raw in [*path.read_text().splitlines(), "[end]"]:
        if raw.startswith("[") and raw.endswith("]"):
            if title is not None:
                table[title] = (why, lines)
            title, why, lines = raw[1:-1], "", []
        elif raw.startswith("why: "):
            why = raw[len("why: ") :]
        elif raw.startswith("why+ "):
            why += " " + raw[len("why+ ") :]
        elif raw.startswith("  ") and title is not None:
            lines.append(raw[2:])
    return table


HEADER = """\
# The sync/async twins that differ, and why (see tests/support/twins.py; checked by
# tests/core/test_twins.py). Each entry: [module: sync ~ async] or [module: async (asyncio only)],
# a why: line (why+ continues it), then the normalised difference (- sync, + async),
# indented two spaces. Rewrite the differences with `python -m tests.support.twins --update`
# (whys are kept), then explain every new one.
"""


def _wrapped(prefix: str, text: str, width: int = 96) -> list[str]:
    words, lines, line = text.split(), [], prefix
    for word in words:
        if len(line) + len(word) + 1 > width and line.strip() not in ("why:", "why+"):
            lines.append(line)
            line = "why+"
        line += " " + word
    lines.append(line)
    return lines


def write_table(found: list[Pair], path: Path = TABLE) -> None:
    old = read_table(path) if path.exists() else {}
    out = [HEADER]
    for pair in found:
        if pair.sync_name is not None and not pair.difference:
            continue
        why = old.get(pair.title, (UNEXPLAINED, []))[0] or UNEXPLAINED
        out.append(f"[{pair.title}]")
        out.extend(_wrapped("why:", why))
        out.extend("  " + line for line in pair.difference)
        out.append("")
    path.write_text("\n".join(out))


def main(argv: list[str]) -> int:
    found = pairs()
    if "--update" in argv:
        write_table(found)
        print(f"wrote {TABLE}")
        return 0
    for pair in found:
        print(f"{pair.title}: {len(pair.difference)} line(s) differ")
        for line in pair.difference:
            print("    " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The package's layers point one way (ARCHITECTURE.md, "Layers"): checked on its imports.

No server: the modules' source is parsed, every ``from . import x`` / ``from ._x import y``
(local imports inside functions included) is an edge, and each edge must go from a layer to
the same layer or one below it. The table here is ARCHITECTURE.md's; a test keeps the two
the same.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "redlock_deco"

# Lowest first. A module may import from its own layer and the layers before it, never
# from one after it.
LAYERS: dict[str, tuple[str, ...]] = {
    "core": (
        "_errors", "_scripts", "_protocol", "_keys", "_quorum", "_events", "_lifecycle",
        "_options",
    ),
    "runtime": (
        "_worker", "_flag", "_pools", "_tokens", "_process", "_waiting", "_drivers", "_fanout",
        "_renewal",
        "_eviction", "_providers",
    ),
    "guard": ("_guard", "_ownership"),
    "user-facing": (
        "_callables", "_signatures", "_naming", "_decorators", "_throttled", "_protected",
        "_decorator_api", "_primitive", "_admin", "_lock", "_semaphore", "_throttle", "asyncio",
        "__init__",
    ),
    "operator": ("_inspection", "_cli", "_demo", "__main__", "acl", "otel", "testing"),
}  # fmt: skip

# Edges that break the rule today, each with why it stays for now. Empty is the goal.
KNOWN: dict[tuple[str, str], str] = {}


def _layer_of(module: str) -> int:
    for index, modules in enumerate(LAYERS.values()):
        if module in modules:
            return index
    raise AssertionError(f"redlock_deco.{module} is in no layer: add it to LAYERS")


def imports(path: Path) -> set[str]:
    """The package modules ``path`` imports (relative imports, at any depth)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] == "redlock_deco" and len(parts) > 1:
                found.add(parts[1])
    return found - {"__version__"}


def edges() -> dict[tuple[str, str], None]:
    found: dict[tuple[str, str], None] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        for target in sorted(imports(path)):
            if (PACKAGE / f"{target}.py").exists():
                found[(path.stem, target)] = None
    return found


def test_every_module_has_a_layer() -> None:
    modules = list(PACKAGE.glob("*.py"))
    assert len(modules) > 30  # it reads the package
    for path in modules:
        _layer_of(path.stem)


def test_imports_point_down_the_layers() -> None:
    layer_names = list(LAYERS)
    upward = []
    for source, target in edges():
        if _layer_of(target) > _layer_of(source) and (source, target) not in KNOWN:
            upward.append(
                f"{source} ({layer_names[_layer_of(source)]}) imports {target} "
                f"({layer_names[_layer_of(target)]})"
            )
    assert not upward, "imports pointing up the layers:\n" + "\n".join(upward)
    stale = [edge for edge in KNOWN if edge not in edges()]
    assert not stale, f"KNOWN lists edges that are gone: {stale}"


def test_no_import_cycle() -> None:
    """Not even one broken by a local import (``_drivers -> _waiting -> _process -> _drivers``
    was): a module's imports, followed, never lead back to it."""
    graph: dict[str, set[str]] = {}
    for source, target in edges():
        graph.setdefault(source, set()).add(target)

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    return [*path, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = [" -> ".join(found) for m in sorted(graph) if (found := cycle_from(m))]
    assert not cycles, cycles


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from . import _guard as guard\n")
    assert imports(module) == {"_guard"}
    assert _layer_of("_guard") > _layer_of("_protocol")


def test_architecture_md_names_the_same_layers() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    documented = {}
    for row in rows[1:]:  # the header first
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        documented[cells[0]] = tuple(
            name.removesuffix(".py") for name in re.findall(r"`([\w.]+)`", cells[1])
        )
    assert documented == LAYERS


def test_a_long_module_says_why_it_is_one() -> None:
    """A module past ~400 lines says, in its docstring, why it is not split (issue 23)."""
    unexplained = []
    for path in sorted(PACKAGE.glob("*.py")):
        source = path.read_text()
        if source.count("\n") > 400 and "Why one module:" not in (ast.get_docstring(
            ast.parse(source)) or ""):  # fmt: skip
            unexplained.append(path.name)
    assert not unexplained, unexplained

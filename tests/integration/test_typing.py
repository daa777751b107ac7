"""The types users see tell the truth.

Every ```python block of README.md, every file in examples/ (recipes/ too) and
tests/support/typing_assertions.py (``assert_type`` checks, and ignores on calls that must stay
errors) pass both ``mypy --strict`` and pyright in strict mode -- one run of each over all of them.
``pyright --verifytypes`` scores the public API as (nearly) completely typed.

pyright (with its own Node.js) is the ``typecheck`` extra, not the ``test`` extra: without it
the pyright checks are skipped, saying so; CI's first leg installs it.

A README block that is deliberately a fragment is skipped only when the line right above its
fence is ``<!-- typecheck: skip (why) -->``, visible in the README's source.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from support.markdown_blocks import Block, python_blocks

import redlock_deco

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXAMPLES = ROOT / "examples"
ASSERTIONS = Path(__file__).resolve().parents[1] / "support" / "typing_assertions.py"
SKIP_MARKER = "<!-- typecheck: skip"
# Checked as the oldest Python the package supports: a README line that needs a newer one
# would fail its readers there.
PYTHON_VERSION = "3.10"
TIMEOUT = 240  # seconds for one type checker's run; a cold run takes a few
# Before 8, redis-py types every command's reply as `Awaitable | Any`: the examples' own
# `int(client.get(key) or 0)` fails to check there, through nothing of ours. (CI's legs with
# the newest dependencies run these checks; the lowest-dependencies leg skips them.)
typed_redis_py = pytest.mark.skipif(
    int(version("redis").split(".")[0]) < 8,
    reason="redis-py < 8 types command replies as Awaitable | Any",
)

needs_pyright = pytest.mark.skipif(
    importlib.util.find_spec("pyright") is None,
    reason="pyright is not installed: it is in the typecheck extra (pip install '.[typecheck]')",
)


def readme_blocks(text: str) -> list[Block]:
    return python_blocks(text, SKIP_MARKER)


PACKAGE_PARENT = Path(redlock_deco.__file__).resolve().parent.parent


def package_root() -> list[str]:
    """What mypy must add to find ``redlock_deco``: nothing for an installed package (mypy
    refuses site-packages on its path); the source tree for an editable install, whose
    import hook static tools cannot follow."""
    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    return [] if PACKAGE_PARENT in installed else [str(PACKAGE_PARENT)]


@pytest.fixture(scope="module")
def checked_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """README blocks written out as modules named by their line, then examples and assertions."""
    folder = tmp_path_factory.mktemp("readme")
    files = []
    for block in readme_blocks(README.read_text()):
        if not block.skipped:
            path = folder / f"readme_line_{block.line}.py"
            path.write_text(block.code)
            files.append(path)
    return [*files, *sorted(EXAMPLES.rglob("*.py")), ASSERTIONS]


def test_readme_blocks_are_found_and_rarely_skipped() -> None:
    text = README.read_text()
    blocks = readme_blocks(text)
    assert len(blocks) == text.count("```python") >= 7, "a ```python block was not extracted"
    assert any("@locked(" in block.code for block in blocks)
    skipped = [block.line for block in blocks if block.skipped]
    assert len(skipped) <= 2, f"README blocks skipped at lines {skipped}: make them whole"


def test_readme_blocks_keep_a_list_items_indent_out() -> None:
    text = "- item:\n\n  ```python\n  x = 1\n  if x:\n      y = 2\n  ```\n"
    [block] = readme_blocks(text)
    assert block.code == "x = 1\nif x:\n    y = 2\n" and block.line == 3


@typed_redis_py
def test_readme_examples_and_assertions_pass_mypy_strict(
    checked_files: list[Path], tmp_path: Path
) -> None:
    # Our package is followed silently, as an installed one is: errors in it are mypy
    # --strict redlock_deco's to report (and its wrapt may be an untyped old one). redis-py
    # leaves Sentinel unannotated: calling it is not an error of ours to report.
    config = tmp_path / "mypy.ini"
    config.write_text(
        "[mypy]\nuntyped_calls_exclude = redis\n\n[mypy-redlock_deco.*]\nfollow_imports = silent\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--strict",
         "--python-version", PYTHON_VERSION, "--cache-dir", str(tmp_path / "cache"),
         "--no-error-summary", "--hide-error-context", *map(str, checked_files)],
        env={**os.environ, "MYPYPATH": os.pathsep.join(package_root())},
        cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def pyright(*args: str, cwd: Path) -> dict[str, Any]:
    # pyright asks a Python for its import path: --pythonpath names ours for checking, and
    # --verifytypes asks the first `python` on PATH. PYTHONPATH adds where redlock_deco is
    # (an editable install's import hook is invisible to static tools).
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "--outputjson", *args],
        env={**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1", "PATH": path,
             "PYTHONPATH": str(PACKAGE_PARENT)},
        cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright gave no report (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return report


@needs_pyright
@typed_redis_py
def test_readme_examples_and_assertions_pass_pyright_strict(
    checked_files: list[Path], tmp_path: Path
) -> None:
    config = {
        "typeCheckingMode": "strict",
        "pythonVersion": PYTHON_VERSION,
        # Only "# pyright: ignore[...]" counts, so each tool's ignores are checked by that tool.
        "enableTypeIgnoreComments": False,
        "reportUnnecessaryTypeIgnoreComment": "error",
        # redis-py leaves **kwargs of Redis.from_url and of its commands unannotated, which
        # this rule reports at every use; our own API is held complete by verifytypes below.
        "reportUnknownMemberType": "none",
    }
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    report = pyright("--project", str(tmp_path), *map(str, checked_files), cwd=tmp_path)
    problems = [
        f"{d['file']}:{d['range']['start']['line'] + 1}: {d['severity']}: {d['message']}"
        for d in report["generalDiagnostics"]
        if d["severity"] in ("error", "warning")
    ]
    assert report["summary"]["filesAnalyzed"] >= len(checked_files)
    assert not problems, "\n".join(problems)


@needs_pyright
def test_public_api_is_typed_for_verifytypes(tmp_path: Path) -> None:
    """``pyright --verifytypes redlock_deco --ignoreexternal``: what users' type checkers
    know of every public name (and of every type they reach) without guessing."""
    report = pyright("--verifytypes", "redlock_deco", "--ignoreexternal", cwd=tmp_path)
    completeness = report["typeCompleteness"]
    incomplete = [
        f"{symbol['name']}: {'; '.join(d['message'] for d in symbol['diagnostics'])}"
        for symbol in completeness["symbols"]
        if not symbol["isTypeKnown"] or symbol.get("isTypeAmbiguous")
    ]
    assert completeness["exportedSymbolCounts"]["withKnownType"] > 50  # it found the package
    assert completeness["completenessScore"] >= 0.95, "\n".join(incomplete)
    # Every public name, and every type it reaches, is complete now (100%): keep it so.
    assert not incomplete, "\n".join(incomplete)

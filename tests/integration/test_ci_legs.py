"""CI legs of their own (pyproject.toml's ``ci_legs``) stay out of the README's command.

The README's ``pytest -n auto`` must stay within 5 minutes and green on a busy 2-core machine;
it once took 13, half of it the fresh-clone test re-running the suite inside the suite.
Tests marked with a CI leg's marker (the slow multi-process tests too: they were 412 of its 714
test-seconds) are left out unless ``-m`` names it (.ci/run runs each leg), or their file is
named on the command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent

LEGS = """
import pytest

@pytest.mark.soak
def test_soaking(): ...

@pytest.mark.nested
def test_nesting(): ...

@pytest.mark.simulation
def test_simulating(): ...

@pytest.mark.slow
def test_slow(): ...

@pytest.mark.slow
@pytest.mark.soak
def test_slow_soak(): ...

def test_plain(): ...
"""


def collected(where: Path, *args: str) -> set[str]:
    """The names of the tests pytest selects, with this project's configuration (and only
    the plugin it needs for it: importing hypothesis alone took seconds on a busy machine)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
         str(where), "--co", "-q", "--no-header", "-p", "no:cacheprovider", "-p",
         "pytest_timeout", *args],
        cwd=where, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path]),
             "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": ""},
    )  # fmt: skip
    assert done.returncode in (0, 5), done.stdout + done.stderr
    return {line.rsplit("::", 1)[1] for line in done.stdout.splitlines() if "::" in line}


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A suite with one test per CI leg, under the project's own conftest."""
    shutil.copy(TESTS / "conftest.py", tmp_path)
    (tmp_path / "test_legs.py").write_text(textwrap.dedent(LEGS))
    return tmp_path


def test_ci_legs_are_left_out_unless_asked_for(suite: Path) -> None:
    assert collected(suite, ".") == {"test_plain"}
    assert collected(suite, ".", "-m", "not slow") == {"test_plain"}  # still no other leg
    assert collected(suite, ".", "-m", "slow or not slow") == {
        "test_slow", "test_slow_soak", "test_plain"
    }  # fmt: skip
    assert collected(suite, ".", "-m", "soak or nested") == {
        "test_soaking", "test_nesting", "test_slow_soak"
    }  # fmt: skip
    assert collected(suite, ".", "-m", "soak") == {"test_soaking", "test_slow_soak"}
    everything = {"test_soaking", "test_nesting", "test_simulating", "test_slow",
                  "test_slow_soak", "test_plain"}  # fmt: skip
    assert collected(suite, "test_legs.py") == everything  # a file named runs whole


def test_every_ci_leg_is_a_declared_marker(request: pytest.FixtureRequest) -> None:
    legs = request.config.getini("ci_legs")
    declared = {line.split(":", 1)[0] for line in request.config.getini("markers")}
    assert {"slow", "nested", "soak", "simulation"} <= set(legs) <= declared


def test_the_fresh_clone_and_the_soak_are_ci_legs() -> None:
    """Selected by their legs' markers from the whole folder, as .ci/run selects them (named
    on the command line, a file runs whole, which once hid that these legs ran nothing)."""
    assert collected(TESTS, "integration", "-m", "nested or soak") == {
        "test_readme_commands_work_in_a_fresh_clone",
        "test_soak_with_random_kills",
    }

"""The package's metadata tells the truth: the Python versions it claims are the ones CI
tests, its dependency floors are the versions CI's lowest leg pins, and its version is the
one ``__version__`` and ``redlock-deco --version`` report.

Read from the installed distribution's metadata (what pip and PyPI see), so these run the
same from a checkout and from an unpacked sdist."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import redlock_deco

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / ".ci"


def needs_checkout() -> None:
    if not (CI / "run").exists():
        pytest.skip("CI files are not part of the sdist")


def floors() -> dict[str, str]:
    """Runtime requirements as name -> lowest version (``>=``), from the metadata."""
    found = {}
    for requirement in metadata.requires("redlock-deco") or []:
        if "extra ==" in requirement:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9.]+)", requirement.strip())
        assert match, f"runtime requirement without a plain >= floor: {requirement!r}"
        found[match[1].lower()] = match[2]
    return found


def test_runtime_dependencies_are_redis_and_wrapt_with_floors() -> None:
    assert set(floors()) == {"redis", "wrapt"}


def test_lowest_dependencies_ci_pins_are_the_declared_floors() -> None:
    needs_checkout()
    pins = dict(
        line.split("==")
        for line in (CI / "lowest.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    declared = floors()
    # A floor "1.14" is pinned as "1.14.0": the same version.
    assert {n: v.removesuffix(".0") for n, v in pins.items()} == {
        n: v.removesuffix(".0") for n, v in declared.items()
    }


def test_python_classifiers_are_exactly_the_versions_ci_tests() -> None:
    needs_checkout()
    classifiers = metadata.metadata("redlock-deco").get_all("Classifier") or []
    claimed = {
        c.rsplit(" :: ", 1)[1]
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    tested = re.search(r'^PYTHONS="([^"]+)"', (CI / "run").read_text(), re.M)
    assert tested, "PYTHONS=... not found in .ci/run"
    assert claimed == set(tested[1].split())
    requires_python = metadata.metadata("redlock-deco")["Requires-Python"]
    assert requires_python == f">={min(claimed, key=lambda v: tuple(map(int, v.split('.'))))}"


def test_version_comes_from_the_installed_metadata() -> None:
    assert redlock_deco.__version__ == metadata.version("redlock-deco")


def test_the_command_line_prints_the_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redlock_deco", "--version"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == f"redlock-deco {redlock_deco.__version__}"


def test_the_changelog_has_a_section_for_this_version() -> None:
    changelog = ROOT / "CHANGELOG.md"
    if not changelog.exists():
        pytest.skip("no CHANGELOG.md beside the tests")
    version = redlock_deco.__version__
    release = re.sub(r"\.dev\d+$", "", version)
    text = changelog.read_text()
    if release != version:
        # A development version is described by the Unreleased section, which names it.
        unreleased = text.split("## [Unreleased]", 1)[1].split("\n## [", 1)[0]
        assert f"as {release}." in unreleased
    else:
        assert f"## [{release}] - " in text


def test_the_license_file_is_the_declared_license() -> None:
    assert metadata.metadata("redlock-deco")["License-Expression"] == "MIT"
    license_file = ROOT / "LICENSE"
    assert license_file.read_text().startswith("MIT License")

"""The documentation site tells the truth and builds cleanly.

Every ```python block of docs/**/*.md runs: a page's blocks in order, in one namespace and one
fresh interpreter per page (a page reads as one session), with REDIS_URL pointing at the test
session's throwaway redis-server. A block that is deliberately a fragment is skipped only when
the line right above its fence is ``<!-- run: skip (why) -->``, visible in the page's source
(the convention of tests/test_typing.py's README check). A traceback from a block names the
page and the page's own line numbers.

``mkdocs build --strict`` runs into a temporary directory with every proxy pointed at a dead
port, so a build that reaches for the network, a broken link, an unknown anchor or an
unresolved API cross-reference fails here. It is skipped, saying so, when the ``docs`` extra is
not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.markdown_blocks import python_blocks

import redlock_deco
import redlock_deco.asyncio
from redlock_deco.testing import RedisServer

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
if not (ROOT / "mkdocs.yml").exists():
    pytest.skip("docs/ and mkdocs.yml are not in this tree (an sdist)", allow_module_level=True)
PAGES = sorted(path for path in DOCS.rglob("*.md") if "_tools" not in path.parts)
SKIP_MARKER = "<!-- run: skip"
PAGE_TIMEOUT = 60  # seconds for one page's blocks; the slowest page takes a few
BUILD_TIMEOUT = 120

# Runs a page's blocks in order in one namespace. Each block is compiled as if it stood at its
# own line of the page, so a traceback points into the page.
RUNNER = """\
import json, sys
namespace = {"__name__": "__main__"}
for block in json.load(open(sys.argv[1], encoding="utf-8")):
    exec(compile("\\n" * block["line"] + block["code"], block["page"], "exec"), namespace)
"""


def page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


RUNNABLE = [
    page
    for page in PAGES
    if any(not b.skipped for b in python_blocks(page.read_text(), SKIP_MARKER))
]


def test_pages_have_code_to_run() -> None:
    assert len(RUNNABLE) >= 10, [page_id(page) for page in RUNNABLE]


@pytest.mark.parametrize("page", RUNNABLE, ids=page_id)
def test_page_code_runs(page: Path, server: RedisServer, tmp_path: Path) -> None:
    blocks = [
        {"line": block.line, "code": block.code, "page": str(page.relative_to(ROOT))}
        for block in python_blocks(page.read_text(), SKIP_MARKER)
        if not block.skipped
    ]
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "run_blocks.py").write_text(RUNNER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["REDIS_URL"] = server.url
    done = subprocess.run(
        [sys.executable, "run_blocks.py", "blocks.json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=PAGE_TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{page_id(page)}:\n{done.stdout}\n{done.stderr}"


def test_skipped_blocks_say_why() -> None:
    for page in PAGES:
        for block in python_blocks(page.read_text(), SKIP_MARKER):
            if block.skipped:
                assert re.fullmatch(r"<!-- run: skip \(.+\) -->", block.marker), (
                    f"{page_id(page)}:{block.line}: a skipped block needs a reason: "
                    "<!-- run: skip (why) -->"
                )


def test_every_public_name_is_in_the_reference() -> None:
    """The API reference lists its entries by hand (in sections): none may be missing."""
    pages = {
        "redlock_deco": (DOCS / "reference" / "redlock_deco.md", redlock_deco.__all__),
        "redlock_deco.asyncio": (DOCS / "reference" / "asyncio.md", redlock_deco.asyncio.__all__),
    }
    for module, (page, names) in pages.items():
        text = page.read_text()
        missing = [
            name
            for name in names
            if not name.startswith("__") and f"::: {module}.{name}\n" not in text
        ]
        assert not missing, f"{page_id(page)} has no entry for {missing}"
    # The other public modules are documented whole, member by member: one page each.
    public = sorted(
        path.stem
        for path in Path(redlock_deco.__file__).parent.glob("*.py")
        if not path.stem.startswith("_") and path.stem != "asyncio"
    )
    for module in public:
        page = DOCS / "reference" / f"{module}.md"
        assert page.exists(), f"the public module redlock_deco.{module} has no reference page"
        assert f"::: redlock_deco.{module}\n" in page.read_text()


DOCS_TOOLS = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")


@pytest.mark.skipif(
    any(importlib.util.find_spec(name.split(".")[0]) is None for name in DOCS_TOOLS),
    reason="the docs extra is not installed (pip install -e '.[docs]')",
)
def test_site_builds_strictly_and_offline(tmp_path: Path) -> None:
    dead = "http://127.0.0.1:9"  # the discard port: any attempt to fetch fails at once
    env = {
        **os.environ,
        "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead,
        "NO_PROXY": "", "no_proxy": "",
        "NO_MKDOCS_2_WARNING": "1",  # Material's banner about MkDocs 2 (stderr, not a warning)
    }  # fmt: skip
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert not re.search(r"^\s*WARNING\b", output, re.MULTILINE), output
    # Nothing on the pages is loaded from elsewhere (fonts, scripts, styles): the site works
    # offline and asks no third party.
    for html in site.rglob("*.html"):
        text = html.read_text()
        remote = re.findall(r'<(?:script|img)[^>]+src="(?:https?:)?//[^"]+"', text)
        remote += re.findall(r'<link[^>]+href="(?:https?:)?//[^"]+"[^>]*>', text)
        remote = [tag for tag in remote if 'rel="canonical"' not in tag]
        assert not remote, f"{html.relative_to(site)} loads {remote}"
    assert (site / "benchmarks" / "handoff.png").exists()
    assert (site / "benchmarks" / "scale.png").exists()

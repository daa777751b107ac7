"""MkDocs hooks: files from outside ``docs/`` that the site shows.

``docs/benchmarks.md`` includes BENCHMARKS.md, whose plots are ``benchmarks/handoff.png`` and
``benchmarks/scale.png`` at the repository root (``python -m benchmarks`` writes all three);
the plots are added to the site here, at the same relative path, instead of being copied
into ``docs/`` where they would go stale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
FROM_ROOT = ("benchmarks/handoff.png", "benchmarks/scale.png")


def on_files(files: Files, config: Any) -> Files:
    for path in FROM_ROOT:
        files.append(
            File(
                path,
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files

"""The ```python blocks of a Markdown text, for the tests that run or type-check them
(test_docs.py, test_typing.py). A block is skipped only when the line right above its fence
starts with the caller's marker, so every skip is visible in the page's source."""

from __future__ import annotations

import re
from dataclasses import dataclass

OPENING = re.compile(r"^(?P<indent> *)```python *$")


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    code: str
    skipped: bool
    marker: str  # the line above the fence


def python_blocks(text: str, skip_marker: str) -> list[Block]:
    """The ```python blocks of ``text``, dedented by their fence's indent (list items)."""
    lines = text.splitlines()
    blocks = []
    for start, line in enumerate(lines):
        opening = OPENING.match(line)
        if not opening:
            continue
        indent = opening["indent"]
        end = start + 1
        while lines[end].strip() != "```":  # IndexError: a block that is never closed
            end += 1
        body = [row.removeprefix(indent) for row in lines[start + 1 : end]]
        above = lines[start - 1].strip() if start else ""
        blocks.append(
            Block(start + 1, "\n".join(body) + "\n", above.startswith(skip_marker), above)
        )
    return blocks

"""Griffe extension: Sphinx roles in docstrings (``:class:`x```) render as inline code.

The package's docstrings are read in editors and by ``help()`` too, where reST roles are the
habit; Markdown has no roles, so without this they would show up as ``:class:`` followed by
the name. ``~a.b.c`` keeps its last part, as Sphinx shows it.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const):`~?([^`]+)`")


def _shown(match: re.Match[str]) -> str:
    target = match[1]
    if match[0].split("`", 1)[1].startswith("~"):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite every docstring's Sphinx roles as Markdown inline code."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_shown, obj.docstring.value)

"""What ``redlock_deco._options.OPTIONS`` declares, rendered where it is written out by hand
otherwise (issue 23: options declared once; ``unasync --check`` for signatures):

- the overloads of ``locked`` and ``limited`` in ``redlock_deco/_decorator_api.py``, between
  its ``# <generated: ...>`` markers (what type checkers see: one overload per kind of
  ``on_busy``, and for ``limited`` two shapes, since a required ``limit`` cannot follow a
  ``name`` with a default);
- the options table of docs/locked.md (README.md links to it), between
  ``<!-- options table: ... -->`` and ``<!-- /options table -->``.

tests/core/test_options.py fails when a file differs from this rendering.

    python -m tests.support.options_table            # list the files that differ
    python -m tests.support.options_table --update   # rewrite them from the table
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from redlock_deco._options import APIS, LEASE_APIS, OPTIONS, REQUIRED, Option, options_of

ROOT = Path(__file__).resolve().parents[2]
API_MODULE = ROOT / "redlock_deco" / "_decorator_api.py"
DOCS_TABLES = (ROOT / "docs" / "locked.md",)
UPDATE = "python -m tests.support.options_table --update"

# on_busy's kinds, in the order type checkers must try them: "raise" keeps the function's
# type; "skip" (or a value only known to be one of the two) adds None to its result; a
# fallback adds its own result -- an async one first: its result is awaited, and only async
# functions may then be decorated.
RAISE = ('Literal["raise"] = "raise"', "Callable[[F], F]")
SKIP = ("OnBusy", "BusyDecorator[None]")
ASYNC_FALLBACK = ("Callable[..., Awaitable[B]]", "AsyncBusyDecorator[B]")
FALLBACK = ("Callable[..., B]", "BusyDecorator[B]")
OVERLAP = "  # type: ignore[overload-overlap]  # an async fallback first: its result is awaited"
KEYED_OVERLAP = (
    "  # type: ignore[overload-overlap]  # a typed key function first: it fixes the parameters"
)
# limited's two shapes: limited(name, limit) positionally, or by keyword with name left out.
POSITIONAL = ("name: NameArg", "limit: int", "*")
KEYWORD = ("*", "name: NameArg = None", "limit: int")
# A typed key function (name=def) first: the decorated function must take its parameters.
RAISE_K = ('Literal["raise"] = "raise"', "KeyedDecorator[KP]")
SKIP_K = ("OnBusy", "KeyedBusyDecorator[KP, None]")
ASYNC_FALLBACK_K = ("Callable[..., Awaitable[B]]", "KeyedAsyncBusyDecorator[KP, B]")
FALLBACK_K = ("Callable[..., B]", "KeyedBusyDecorator[KP, B]")
KEYED = {
    "locked": ("*", "name: Callable[KP, str]"),
    "limited": ("*", "name: Callable[KP, str]", "limit: int"),
    "throttled": ("*", "name: Callable[KP, str]", "rate: float"),
}
# throttled's two shapes, as limited's: throttled(name, rate), or by keyword.
T_POSITIONAL = ("name: NameArg", "rate: float", "*")
T_KEYWORD = ("*", "name: NameArg = None", "rate: float")
#: The option each decorator takes positionally after the name (placed by the shapes above).
POSITIONAL_OPTION = {"limited": "limit", "throttled": "rate"}
SHAPES = {
    "locked": [*((KEYED["locked"], kind) for kind in (RAISE_K, SKIP_K, ASYNC_FALLBACK_K,
                                                      FALLBACK_K)),
               *((("*templates: NameArg", "name: NameArg = None"), kind)
                 for kind in (RAISE, SKIP, ASYNC_FALLBACK, FALLBACK))],
    "limited": [*((KEYED["limited"], kind) for kind in (RAISE_K, SKIP_K, ASYNC_FALLBACK_K,
                                                        FALLBACK_K)),
                (POSITIONAL, RAISE), (KEYWORD, RAISE), (POSITIONAL, SKIP), (KEYWORD, SKIP),
                (POSITIONAL, ASYNC_FALLBACK), (POSITIONAL, FALLBACK),
                (KEYWORD, ASYNC_FALLBACK), (KEYWORD, FALLBACK)],
    "throttled": [*((KEYED["throttled"], kind) for kind in (RAISE_K, SKIP_K, ASYNC_FALLBACK_K,
                                                            FALLBACK_K)),
                  (T_POSITIONAL, RAISE), (T_KEYWORD, RAISE), (T_POSITIONAL, SKIP),
                  (T_KEYWORD, SKIP), (T_POSITIONAL, ASYNC_FALLBACK), (T_POSITIONAL, FALLBACK),
                  (T_KEYWORD, ASYNC_FALLBACK), (T_KEYWORD, FALLBACK)],
}  # fmt: skip
BARE = "@overload\ndef locked(func: F, /) -> F: ...  # bare @locked: a def function in the name slot is decorated\n"  # noqa: E501


def literal(value: object) -> str:
    """A default as ruff formats it (double quotes)."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def parameter(option: Option, api: str, on_busy: str) -> str:
    if option.name == "on_busy":
        return f"on_busy: {on_busy}"
    return f"{option.name}: {option.annotation} = {literal(option.default_for(api))}"


def overload(api: str, head: tuple[str, ...], kind: tuple[str, str]) -> str:
    """One overload of ``api``: its own leading parameters, then every option it takes."""
    on_busy, returns = kind
    placed = POSITIONAL_OPTION.get(api)
    params = [*head, *(parameter(o, api, on_busy) for o in options_of(api) if o.name != placed)]
    lines = "".join(f"    {one},\n" for one in params)
    ignore = (OVERLAP if kind in (ASYNC_FALLBACK, ASYNC_FALLBACK_K)
              else KEYED_OVERLAP if kind in (RAISE_K, SKIP_K, FALLBACK_K) else "")  # fmt: skip
    return f"@overload\ndef {api}({ignore}\n{lines}) -> {returns}: ...\n"


def overloads(api: str) -> str:
    rendered = [overload(api, head, kind) for head, kind in SHAPES[api]]
    return "\n\n".join([BARE] * (api == "locked") + rendered)


def taken_by(option: Option) -> str:
    if set(option.takes) == set(APIS):
        return "all"
    if set(option.takes) == set(LEASE_APIS):
        return "all but `@throttled`, `Throttle`"
    return ", ".join(api_name(api) for api in option.takes)


def api_name(api: str) -> str:
    return f"`@{api}`" if api[0].islower() else f"`{api}`"


def default(option: Option) -> str:
    if option.default is REQUIRED:
        return "required"
    shown = f"`{literal(option.default)}`"
    # The callables whose own default differs, grouped by that default ("sem:" for the
    # semaphores, "throttle:" for the throttles): each value named with its own callables.
    by_value: dict[str, list[str]] = {}
    for name, value in option.defaults:
        by_value.setdefault(literal(value), []).append(api_name(name))
    others = "; ".join(f"`{value}` for {', '.join(names)}" for value, names in by_value.items())
    return f"{shown} ({others})" if others else shown


def docs_table() -> str:
    rows = [
        "| option | default | bounds | taken by | meaning |",
        "| --- | --- | --- | --- | --- |",
        *(f"| `{o.name}` | {default(o)} | {cell(o.bounds)} | {taken_by(o)} | {cell(o.meaning)} |"
          for o in OPTIONS),
    ]  # fmt: skip
    return "\n".join(rows) + "\n"


def cell(text: str) -> str:
    return text.replace("|", "\\|")  # a | inside a cell would end it


def replace_region(text: str, start: str, end: str, body: str) -> str:
    """``text`` with what lies between the line holding ``start`` and the one holding
    ``end`` replaced by ``body``, indented as the start marker is."""
    pattern = re.compile(
        rf"^(?P<indent>[ \t]*)(?P<start>[^\n]*{re.escape(start)}[^\n]*\n)(?P<body>.*?)"
        rf"^(?P<end>[^\n]*{re.escape(end)})",
        re.MULTILINE | re.DOTALL,
    )
    found = pattern.search(text)
    if found is None:
        raise LookupError(f"no region {start!r} ... {end!r}")
    indent = found["indent"]
    lines = "".join(f"{indent}{line}".rstrip() + "\n" for line in body.splitlines())
    return text[: found.start("body")] + lines + text[found.start("end") :]


def rendered() -> dict[Path, str]:
    """Every file as the table would have it."""
    files = {}
    text = API_MODULE.read_text()
    for api in ("locked", "limited", "throttled"):
        text = replace_region(text, f"# <generated: {api}", f"# </generated: {api}",
                              overloads(api) + "\n\n")  # fmt: skip
    files[API_MODULE] = text
    for path in DOCS_TABLES:
        files[path] = replace_region(path.read_text(), "<!-- options table:",
                                     "<!-- /options table -->", docs_table())  # fmt: skip
    return files


def stale() -> list[Path]:
    return [path for path, text in rendered().items() if path.read_text() != text]


def main(argv: list[str]) -> int:
    if "--update" in argv:
        for path, text in rendered().items():
            if path.read_text() != text:
                path.write_text(text)
                print(f"rewrote {path.relative_to(ROOT)}")
        return 0
    differ = stale()
    for path in differ:
        print(f"{path.relative_to(ROOT)} differs from the options table; run {UPDATE}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

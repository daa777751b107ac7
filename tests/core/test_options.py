"""Options are declared once (``_options.OPTIONS``), and everything else agrees with the table:
the overloads of ``locked``/``limited`` and the docs' tables (a fresh rendering, compared as
``unasync --check`` compares), the run-time signatures, the constructors of ``Lock``,
``Semaphore`` and their asyncio twins (parameters and what they pass on), and validation.

No server: decorating and constructing connect to nothing.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from support import options_table

import redlock_deco
import redlock_deco.asyncio as aio
from redlock_deco import Lock, Semaphore, Throttle, limited, locked, throttled
from redlock_deco._options import APIS, BY_NAME, OPTIONS, REQUIRED, Option, options_of

PACKAGE = Path(redlock_deco.__file__).resolve().parent
EMPTY = inspect.Parameter.empty
DECORATORS = ("locked", "limited", "throttled")
#: Each constructor, with the module and class whose ``__init__`` declares it.
CONSTRUCTORS = {
    "Lock": ((Lock, aio.Lock), "_lock.py", "_LockOptions"),
    "Semaphore": ((Semaphore, aio.Semaphore), "_semaphore.py", "_SemaphoreOptions"),
    "Throttle": ((Throttle, aio.Throttle), "_throttle.py", "_ThrottleOptions"),
}
#: What each constructor passes its options to (a lease's, or a throttle's).
BUILDS = ("build_options", "build_throttle_options")


def test_every_option_is_taken_by_known_callables_and_named_once() -> None:
    assert len(BY_NAME) == len(OPTIONS) >= 13
    for option in OPTIONS:
        assert option.takes and set(option.takes) <= set(APIS), option.name
        assert option.meaning and option.annotation, option.name
        assert {api for api, _ in option.defaults} <= set(option.takes), option.name


def test_overloads_and_docs_tables_are_the_tables_rendering() -> None:
    stale = options_table.stale()
    assert not stale, (
        f"{', '.join(str(p.relative_to(options_table.ROOT)) for p in stale)} differ from "
        f"_options.OPTIONS: run {options_table.UPDATE} (and review the diff)"
    )


def test_every_overload_takes_every_option_of_its_callable() -> None:
    """Belt and braces over the text comparison: parsed, each overload's keyword options are
    the table's, with its annotations and defaults (on_busy's type is the overload's own)."""
    tree = ast.parse((PACKAGE / "_decorator_api.py").read_text())
    seen = 0
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name not in DECORATORS:
            continue
        params = {
            a.arg: a for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        }
        if "func" in params:  # bare @locked
            continue
        defaults = dict(
            zip([a.arg for a in node.args.kwonlyargs], node.args.kw_defaults, strict=True)
        )
        overloaded = any(ast.unparse(d) == "overload" for d in node.decorator_list)
        expected = [o.name for o in options_of(node.name)]
        if not overloaded:  # the implementation: its options arrive as **given
            assert node.args.kwarg is not None and node.args.kwarg.arg == "given"
            continue
        seen += 1
        assert [n for n in params if n != "name"] == expected, node.lineno
        for option in options_of(node.name):
            if option.name in ("on_busy", "limit", "rate"):
                continue
            param = params[option.name]
            assert param.annotation is not None
            assert ast.unparse(param.annotation) == option.annotation, (node.lineno, option)
            default = defaults[option.name]
            assert default is not None and ast.literal_eval(default) == option.default_for(
                node.name
            ), (node.lineno, option.name)
    assert seen == 8 + 12 + 12  # locked: one per kind of on_busy, keyed and not; limited and
    # throttled: a keyed one per kind, and two shapes of each (name positional or by keyword)


@pytest.mark.parametrize("api", DECORATORS)
def test_run_time_signatures_are_the_tables(api: str) -> None:
    func = {"locked": locked, "limited": limited, "throttled": throttled}[api]
    params = inspect.signature(func).parameters
    options = [p for p in params.values() if p.name in BY_NAME]
    assert [p.name for p in options] == [o.name for o in options_of(api)]
    for param in options:
        option = BY_NAME[param.name]
        default = option.default_for(api)
        assert param.default is default or param.default == default, param
        assert param.annotation == option.annotation, param
    assert "given" not in params  # **given is hidden behind the declared options


def _expected_lines(api: str) -> str:
    lines = []
    for option in options_of(api):
        default = option.default_for(api)
        tail = "" if default is REQUIRED else f" = {options_table.literal(default)}"
        lines.append(f"{option.name}: {option.annotation}{tail},")
    return "\n".join(lines)


@pytest.mark.parametrize("api", list(CONSTRUCTORS))
def test_constructors_take_exactly_their_options(api: str) -> None:
    classes, module, _ = CONSTRUCTORS[api]
    for cls in classes:
        params = list(inspect.signature(cls).parameters.values())
        assert [p.name for p in params[:1]] == ["name"], cls
        found = [(p.name, p.kind, p.annotation, p.default) for p in params[1:]]
        expected = [
            (o.name, inspect.Parameter.KEYWORD_ONLY, o.annotation,
             EMPTY if o.default_for(api) is REQUIRED else o.default_for(api))
            for o in options_of(api)
        ]  # fmt: skip
        assert found == expected, (
            f"{cls.__qualname__}'s keyword-only parameters in redlock_deco/{module} are not "
            f"the table's; after `name: str, *,` write:\n{_expected_lines(api)}"
        )


@pytest.mark.parametrize("api", list(CONSTRUCTORS))
def test_constructors_pass_every_option_to_build_options(api: str) -> None:
    """Declared but not passed on, an option would be silently ignored."""
    _, module, owner = CONSTRUCTORS[api]
    tree = ast.parse((PACKAGE / module).read_text())
    [init] = [
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == owner
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    ]
    [call] = [
        node
        for node in ast.walk(init)
        if isinstance(node, ast.Call) and ast.unparse(node.func) in BUILDS
    ]
    assert [ast.literal_eval(arg) for arg in call.args] == [api]
    passed = {kw.arg: ast.unparse(kw.value) for kw in call.keywords}
    assert passed == {o.name: o.name for o in options_of(api)}


# -- validation comes from the table: each callable refuses a bad value, naming the option --


def _builders() -> dict[str, list[Callable[..., object]]]:
    return {
        "locked": [lambda **kw: locked("x", **kw)],
        "limited": [lambda **kw: limited("x", **{"limit": 2, **kw})],
        "Lock": [lambda **kw: Lock("x", **kw), lambda **kw: aio.Lock("x", **kw)],
        "Semaphore": [
            lambda **kw: Semaphore("x", **{"limit": 2, **kw}),
            lambda **kw: aio.Semaphore("x", **{"limit": 2, **kw}),
        ],
        "throttled": [lambda **kw: throttled("x", **{"rate": 2, **kw})],
        "Throttle": [
            lambda **kw: Throttle("x", **{"rate": 2, **kw}),
            lambda **kw: aio.Throttle("x", **{"rate": 2, **kw}),
        ],
    }


BAD = {  # one value of the wrong type for each option, and one out of its bounds where any
    "limit": ("3", 0),
    "rate": ("5", 0),
    "per": ("5", 0),
    "burst": ("5", 0.5),
    "ttl": ("5", 0.001),
    "wait": ("5", -1),  # (API.md: wait < 0 is a ValueError, -1 too)
    "auto_renew": ("yes", None),
    "on_busy": (5, "retry"),
    "provider": (5, None),  # "" is a TypeError too (test_lock)
    "prefix": (5, None),
    "replicas": (1.5, -1),
    "on_lost": (5, None),
    "max_hold": ("5", 0),
    "fencing": (1, None),
    "shared": ("no", None),
    "label": (5, "order:{order_id}"),
}


def test_every_option_has_bad_values_here() -> None:
    assert set(BAD) == set(BY_NAME)


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
def test_every_callable_refuses_a_bad_value_naming_the_option(option: Option) -> None:
    wrong_type, out_of_bounds = BAD[option.name]
    for api in option.takes:
        for build in _builders()[api]:
            with pytest.raises(TypeError, match=rf"^{option.name} must be"):
                build(**{option.name: wrong_type})
            if out_of_bounds is not None:
                with pytest.raises(ValueError, match=rf"^{option.name} must be"):
                    build(**{option.name: out_of_bounds})


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
def test_a_callable_that_does_not_take_an_option_says_which_it_takes(option: Option) -> None:
    for api in set(APIS) - set(option.takes):
        for build in _builders()[api]:
            if option.default is REQUIRED:
                continue  # limit (a semaphore's), rate (a throttle's): no default to pass
            with pytest.raises(TypeError, match=rf"'{option.name}'.*it accepts: .*(ttl|rate)"):
                build(**{option.name: option.default_for(api)})


def test_defaults_are_the_tables() -> None:
    lock, semaphore = Lock("x"), Semaphore("x", limit=2)
    for obj, api in ((lock, "Lock"), (semaphore, "Semaphore")):
        for option in options_of(api):
            if hasattr(obj.options, option.name) and option.default is not REQUIRED:
                assert getattr(obj.options, option.name) == option.default_for(api), option


# -- label= --


def test_label_sets_the_events_template_of_a_primitive_used_directly() -> None:
    for make in (
        lambda **kw: Lock("order:7", **kw),
        lambda **kw: Semaphore("tenant:acme", limit=2, **kw),
        lambda **kw: aio.Lock("order:7", **kw),
        lambda **kw: aio.Semaphore("tenant:acme", limit=2, **kw),
    ):
        labelled = make(label="orders", provider="payments")
        source = labelled.options.source  # type: ignore[attr-defined]
        assert (source.template, source.function, source.provider) == (
            "orders", None, "payments"
        )  # fmt: skip
        assert labelled.options.label == "orders"  # type: ignore[attr-defined]
        assert make().options.source is None  # type: ignore[attr-defined]  # its name, lazily


@pytest.mark.parametrize(
    ("label", "error"),
    [("", ValueError), ("   ", ValueError), ("order:{id}", ValueError), ("}", ValueError),
     (b"orders", TypeError), (7, TypeError)],
)  # fmt: skip
def test_label_must_be_a_fixed_non_empty_str(label: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^label must be a non-empty str"):
        Lock("x", label=label)  # type: ignore[arg-type]  # refused
    with pytest.raises(error, match=r"^label must be a non-empty str"):
        locked("x", label=label)  # type: ignore[call-overload]  # refused


def test_the_docs_say_what_label_does() -> None:
    row = textwrap.dedent(options_table.docs_table())
    assert "| `label` | `None` |" in row
    for path in options_table.DOCS_TABLES:
        assert "| `label` | `None` |" in path.read_text(), path

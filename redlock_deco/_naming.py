"""Lock-name templates, compiled once per decorated function.

``"order:{order_id}"`` is checked against the function's signature at decoration time (a field
naming no parameter raises :class:`KeyTemplateError` there, not on the first production call),
and each call only picks the named arguments out of ``args``/``kwargs`` -- no per-call
``Signature.bind`` -- and formats them with :meth:`str.format_map`, which supplies attribute and
index access (``{user.org.id}``, ``{items[0]}``), conversions and format specs.

Fields are the parameters of the callable as its caller calls it (see :mod:`._callables`): a
bound method's ``self`` is not one. A rendered name never holds an object's default repr
(``<Account object at 0x7f...>``): it differs per object and per process, so callers meaning
the same name would never exclude each other; that is a KeyTemplateError naming the field.
Data is never taken for one: a ``str``, ``bytes`` or number argument that merely looks like
a repr (a ticket titled ``"<meeting at 0xCAFE>"``) renders as it is.
"""

from __future__ import annotations

import hashlib
import inspect
import numbers
import re
import string
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ._callables import binds_instance, default_name
from ._callables import describe as describe  # re-exported: the decorators' messages use it
from ._errors import KeyTemplateError
from ._events import Source

#: ``render(instance, args, kwargs) -> name``; ``instance`` is wrapt's (self/cls or None).
Renderer = Callable[[Any, tuple[Any, ...], Mapping[str, Any]], str]
_Getter = Callable[[tuple[Any, ...], Mapping[str, Any]], Any]

_MISSING = object()

#: An object's default repr, as ``object.__repr__`` (and functions, methods...) write it.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
_REPR_SPAN = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")  # the whole ``<Foo object at 0x..>``
_ADDRESS_HINT = " at 0x"  # a plain substring test first: the regex runs only on a likely hit

#: Longest lock name kept as is, in UTF-8 bytes. A longer one keeps a readable prefix and
#: ends in the SHA-256 of the whole name, so distinct names stay distinct and every key stays
#: small (a 1 MB argument must not become a 1 MB key, sent twice per call).
MAX_NAME_BYTES = 1024
_PREFIX_BYTES = MAX_NAME_BYTES - len("~sha256:") - 64


def bounded(name: str) -> str:
    """``name`` as it goes into a key: at most MAX_NAME_BYTES of valid UTF-8.

    Text UTF-8 cannot carry (lone surrogates) is escaped as ``\\udxxx``, deterministically.
    """
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        encoded = name.encode("utf-8", "backslashreplace")
        name = encoded.decode("utf-8")
    if len(encoded) <= MAX_NAME_BYTES:
        return name
    prefix = encoded[:_PREFIX_BYTES].decode("utf-8", "ignore")
    return f"{prefix}~sha256:{hashlib.sha256(encoded).hexdigest()}"


def has_address(text: str) -> bool:
    """Does ``text`` hold an object's default repr (``<... at 0x7f...>``)?"""
    return _ADDRESS_HINT in text and _ADDRESS.search(text) is not None


def stable_name(name: str, what: str, harm: str) -> str:
    """``name`` as a key's name (:func:`bounded`), for a primitive built with it directly;
    KeyTemplateError if it holds an object's default repr, which differs per object and per
    process (``what``: "lock name"; ``harm``: what would follow, "it would exclude nobody").
    One that is no str is refused saying so (review 61, F3: ``Lock(None)`` failed inside).
    An empty one is a name like any other (it may come from data, as a rendered one does)."""
    if not isinstance(name, str):
        hint = " (decode bytes: name.decode())" * isinstance(name, bytes)
        raise TypeError(f"{what} must be a str, got {type(name).__name__} {name!r:.40}{hint}")
    if has_address(name):
        raise KeyTemplateError(
            f"{what} {name!r} holds an object's default repr (<... at 0x...>), which differs "
            f"per object and per process, so {harm}; build the name from a stable attribute "
            "(an id) instead",
            template=name,
        )
    return bounded(name)


#: Values whose text is data, whatever it looks like: a user's ticket title
#: "<meeting at 0xCAFE>" made every call of a ``"ticket:{title}"`` function fail (b03).
_DATA = (str, bytes, bytearray, numbers.Number)
_SEQUENCES = (list, tuple, set, frozenset)


def shows_default_repr(value: object, text: str) -> bool:
    """Does ``text``, rendered from ``value``, hold an object's default repr?

    Never for data (``_DATA``); a built-in container is judged by its items (it renders their
    reprs), so ``["<a at 0x1>"]`` is data and ``[<Opaque object at 0x7f...>]`` is not.
    """
    if isinstance(value, _DATA) or not has_address(text):
        return False
    # Exactly the built-in types: a subclass may render with its own __str__.
    if isinstance(value, _SEQUENCES) and type(value) in _SEQUENCES:
        return any(shows_default_repr(item, repr(item)) for item in value)
    if isinstance(value, dict) and type(value) is dict:
        return any(
            shows_default_repr(k, repr(k)) or shows_default_repr(v, repr(v))
            for k, v in value.items()
        )
    return True


def _quoted_in(text: str, values: Iterator[Any]) -> bool:
    """Is every repr-like span of ``text`` found inside one of the str/bytes ``values``?

    A name callable returns one str: what it formatted is unknown, but a span copied from a
    data argument is data (b03), not an object's repr.
    """
    data = [
        value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
        for value in values
        if isinstance(value, (str, bytes, bytearray))
    ]
    spans = [match.group() for match in _REPR_SPAN.finditer(text)]
    return bool(spans) and all(any(span in one for one in data) for span in spans)


def full_args(instance: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Put back the ``self``/``cls`` that wrapt hands over separately as ``instance``.

    wrapt passes ``instance`` (the object, or the class for classmethods) apart from ``args``
    for methods and classmethods bound in a class body, and ``None`` for plain functions and
    staticmethods; so a function's signature lines up with ``(instance, *args)`` when
    ``instance`` is set.
    """
    return args if instance is None else (instance, *args)


def own_args(instance: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments as given, for callables whose ``self`` is not in their signature.

    wrapt passes a bound method's ``__self__`` as ``instance``; putting it back would shift
    every field by one (``{order_id}`` would render the object).
    """
    return args


def _call_args(func: Callable[..., Any]) -> Callable[[Any, tuple[Any, ...]], tuple[Any, ...]]:
    return full_args if binds_instance(func) else own_args


def template_roots(template: str) -> list[tuple[str, str]]:
    """``(field, root)`` for every replacement field, nested format specs included."""
    found: list[tuple[str, str]] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise KeyTemplateError(
            f"lock name template {template!r} is not a valid str.format template: {exc}",
            template=template,
        ) from None
    for _literal, field, spec, _conversion in parsed:
        if field is None:
            continue
        root = field.split(".", 1)[0].split("[", 1)[0]
        if not root or root.isdigit():
            raise KeyTemplateError(
                f"lock name template {template!r} uses a positional field {{{field}}}; "
                "name the parameter instead, e.g. {order_id}",
                template=template,
                field=field,
            )
        found.append((field, root))
        if spec and "{" in spec:
            found.extend(template_roots(spec))
    return found


def _getter(params: list[inspect.Parameter], name: str) -> _Getter:
    """A function picking one parameter's value out of a call's ``(args, kwargs)``."""
    index = next(i for i, p in enumerate(params) if p.name == name)
    param = params[index]
    default = _MISSING if param.default is param.empty else param.default

    if param.kind is param.VAR_POSITIONAL:
        return lambda args, kwargs: tuple(args[index:])
    if param.kind is param.VAR_KEYWORD:
        named = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        return lambda args, kwargs: {k: v for k, v in kwargs.items() if k not in named}
    if param.kind is param.KEYWORD_ONLY:
        return lambda args, kwargs: kwargs.get(name, default)
    if param.kind is param.POSITIONAL_ONLY:
        return lambda args, kwargs: args[index] if index < len(args) else default
    return lambda args, kwargs: args[index] if index < len(args) else kwargs.get(name, default)


def check_name(name: object) -> None:
    if name is not None and not isinstance(name, str) and not callable(name):
        raise TypeError(f"a name must be a str template, a callable or None, got {name!r}")
    if name == "":  # (one key, ``lock:``, for every function so decorated: review 61, F3)
        raise ValueError("a name must not be empty: pass None (one per function) or a template")


def compile_name(name: str | Callable[..., Any] | None, func: Callable[..., Any]) -> Renderer:
    """Compile ``name`` for ``func``, the undecorated callable (see :mod:`._callables`)."""
    if name is None:
        fixed = bounded(_fixed(default_name(func), None, func))
        return lambda instance, args, kwargs: fixed
    check_name(name)
    if isinstance(name, str):
        return _compile_template(name, func)
    return _compile_callable(name, func)


def _fixed(name: str, template: str | None, func: Callable[..., Any]) -> str:
    """A name known at decoration time, checked there."""
    if has_address(name):
        raise KeyTemplateError(
            f"lock name {name!r} of {describe(func)} holds an object's default repr, which "
            "differs per object and per process; pass name='...' with a stable name",
            template=template,
        )
    return name


def _compile_callable(name_fn: Callable[..., Any], func: Callable[..., Any]) -> Renderer:
    call_args = _call_args(func)

    def render(instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        result = name_fn(*call_args(instance, args), **kwargs)
        if not isinstance(result, str):
            raise KeyTemplateError(
                f"lock name callable {describe(name_fn)} returned {type(result).__name__}; "
                "it must return a str"
            )
        if has_address(result) and not _quoted_in(
            result, iter((*call_args(instance, args), *kwargs.values()))
        ):
            raise KeyTemplateError(
                f"lock name callable {describe(name_fn)} returned {_short(result)!r}, which "
                "holds an object's default repr: it differs per object and per process, so "
                "callers would never exclude each other; build the name from identifying "
                "values (an id, a key), not from the object itself"
            )
        return bounded(result)

    return render


def _parameters(func: Callable[..., Any], template: str) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError) as exc:  # some builtins and C callables have none
        raise TypeError(
            f"cannot read the parameters of {describe(func)} ({exc}), so the lock name "
            f"template {template!r} cannot be checked against them; pass a name callable "
            "taking the same arguments, or a fixed name"
        ) from None


def _unknown_field(
    template: str, func: Callable[..., Any], field: str, root: str, available: list[str]
) -> KeyTemplateError:
    message = (
        f"lock name template {template!r} of {describe(func)} uses {{{field}}}, but "
        f"{root!r} is not a parameter; parameters are: {', '.join(available) or 'none'}"
    )
    if inspect.ismethod(func) and root in ("self", "cls"):
        # locked(...)(obj.meth): the object is bound already, the caller never passes it.
        message += (
            f". {describe(func)} is a bound method, so its {root!r} is not an argument: "
            "decorate the method in the class body to use {self...}, or put the object's "
            "value into the template text"
        )
    return KeyTemplateError(message, template=template, field=field)


def _compile_template(template: str, func: Callable[..., Any]) -> Renderer:
    roots = template_roots(template)
    if not roots:  # a fixed name: no parameters to read (a builtin may not expose them)
        fixed = bounded(_fixed(template.format(), template, func))
        return lambda instance, args, kwargs: fixed
    _fixed(_literal_text(template), template, func)
    params = _parameters(func, template)
    available = [p.name for p in params]
    getters: dict[str, _Getter] = {}
    for field, root in roots:
        if root not in available:
            raise _unknown_field(template, func, field, root, available)
        getters.setdefault(root, _getter(params, root))

    items = tuple(getters.items())
    positional = _call_args(func)

    def render(instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        call_args = positional(instance, args)
        values = {root: get(call_args, kwargs) for root, get in items}
        if any(value is _MISSING for value in values.values()):
            # The call itself is malformed: let Python word the error exactly as it would.
            inspect.signature(func).bind(*call_args, **kwargs)
        try:
            rendered = template.format_map(values)
        except Exception as exc:
            field = _failing_field(template, values)
            raise KeyTemplateError(
                f"cannot render lock name {template!r} of {describe(func)}: field {{{field}}} "
                f"failed with {type(exc).__name__}: {_short(exc)}",
                template=template,
                field=field,
            ) from exc
        if has_address(rendered) and (found := _address_field(template, values)):
            raise _address_error(template, found, func)
        return bounded(rendered)

    return render


def _address_error(
    template: str, found: tuple[str, str], func: Callable[..., Any]
) -> KeyTemplateError:
    field, text = found
    return KeyTemplateError(
        f"lock name {template!r} of {describe(func)}: field {{{field}}} renders as "
        f"{_short(text)!r}, an object's default repr; it differs per object and per process, "
        "so callers meaning the same name would never exclude each other. Name an attribute "
        f"that identifies it (e.g. {{{field}.id}}), or give its class a __str__",
        template=template,
        field=field,
    )


def _literal_text(template: str) -> str:
    return "".join(literal for literal, *_ in string.Formatter().parse(template))


def _fields(template: str) -> Iterator[tuple[str, str]]:
    """``(field, template of that field alone)`` for each replacement field."""
    for _literal, field, spec, conversion in string.Formatter().parse(template):
        if field is not None:
            yield field, "{" + field + (f"!{conversion}" if conversion else "") + f":{spec or ''}}}"


def _address_field(template: str, values: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first field of ``template`` rendering an object's default repr, and its text; None
    when the name only looks like one (data, or the template's own literal text)."""
    formatter = string.Formatter()
    for field, alone in _fields(template):
        text = alone.format_map(values)
        if has_address(text) and shows_default_repr(
            formatter.get_field(field, (), values)[0], text
        ):
            return field, text
    return None


def _failing_field(template: str, values: Mapping[str, Any]) -> str:
    """The first replacement field of ``template`` that cannot be formatted alone."""
    for field, alone in _fields(template):
        try:
            alone.format_map(values)
        except Exception:
            return field
    return "?"


def _short(value: object) -> str:
    """An exception's (or a name's) text, kept short: it may quote a huge or hostile argument."""
    try:
        text = str(value)
    except Exception:
        text = "(unprintable)"
    return text if len(text) <= 200 else text[:200] + "..."


def source_of(names: tuple[Any, ...], func: Callable[..., Any], provider: str) -> Source:
    """The source of a decorated function's events (``names`` as given to the decorator):
    the labels its events carry (see :class:`~redlock_deco._events.Source`)."""
    templates = ", ".join(_template(name, func) for name in names)
    return Source(templates, _qualified(func), provider)


def _template(name: Any, func: Callable[..., Any]) -> str:
    if isinstance(name, str):
        return name
    if name is None:
        return default_name(func)
    return _qualified(name) + "()"  # a name callable: its own name, never what it returns


def _qualified(func: Callable[..., Any]) -> str:
    """``"<module>.<qualname>"`` of the code ``func`` runs; its type's for an object without
    one (never a repr: an address would make a label per object)."""
    try:
        return default_name(func)
    except TypeError:
        kind = type(func)
        return f"{kind.__module__}.{kind.__qualname__}"

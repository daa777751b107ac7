"""Lock-name templates, compiled once per decorated function.

``"order:{order_id}"`` is checked against the function's signature at decoration time (a field
naming no parameter raises :class:`KeyTemplateError` there, not on the first production call),
and each call only picks the named arguments out of ``args``/``kwargs`` -- no per-call
``Signature.bind`` -- and formats them with :meth:`str.format_map`, which supplies attribute and
index access (``{user.org.id}``, ``{items[0]}``), conversions and format specs.
"""

from __future__ import annotations

import hashlib
import inspect
import string
from collections.abc import Callable, Mapping
from typing import Any

from .errors import KeyTemplateError

#: ``render(instance, args, kwargs) -> name``; ``instance`` is wrapt's (self/cls or None).
Renderer = Callable[[Any, tuple[Any, ...], Mapping[str, Any]], str]
_Getter = Callable[[tuple[Any, ...], Mapping[str, Any]], Any]

_MISSING = object()

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


def describe(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def full_args(instance: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Put back the ``self``/``cls`` that wrapt hands over separately as ``instance``.

    wrapt passes ``instance`` (the object, or the class for classmethods) apart from ``args``
    for methods and classmethods, and ``None`` for plain functions and staticmethods; so the
    signature of the underlying function always lines up with ``(instance, *args)`` when
    ``instance`` is set.
    """
    return args if instance is None else (instance, *args)


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
        raise TypeError(f"lock name must be a str template, a callable or None, got {name!r}")


def compile_name(name: str | Callable[..., Any] | None, func: Callable[..., Any]) -> Renderer:
    """Compile ``name`` for ``func`` (the undecorated function, ``self``/``cls`` included)."""
    if name is None:
        fixed = bounded(describe(func))
        return lambda instance, args, kwargs: fixed
    check_name(name)
    if isinstance(name, str):
        return _compile_template(name, func)
    return _compile_callable(name)


def _compile_callable(name_fn: Callable[..., Any]) -> Renderer:
    def render(instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        result = name_fn(*full_args(instance, args), **kwargs)
        if not isinstance(result, str):
            raise KeyTemplateError(
                f"lock name callable {describe(name_fn)} returned {type(result).__name__}; "
                "it must return a str"
            )
        return bounded(result)

    return render


def _compile_template(template: str, func: Callable[..., Any]) -> Renderer:
    params = list(inspect.signature(func).parameters.values())
    available = [p.name for p in params]
    getters: dict[str, _Getter] = {}
    for field, root in template_roots(template):
        if root not in available:
            raise KeyTemplateError(
                f"lock name template {template!r} of {describe(func)} uses {{{field}}}, but "
                f"{root!r} is not a parameter; parameters are: {', '.join(available) or 'none'}",
                template=template,
                field=field,
            )
        getters.setdefault(root, _getter(params, root))
    if not getters:
        fixed = bounded(template.format())
        return lambda instance, args, kwargs: fixed

    items = tuple(getters.items())

    def render(instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        call_args = full_args(instance, args)
        values = {root: get(call_args, kwargs) for root, get in items}
        if any(value is _MISSING for value in values.values()):
            # The call itself is malformed: let Python word the error exactly as it would.
            inspect.signature(func).bind(*call_args, **kwargs)
        try:
            return bounded(template.format_map(values))
        except Exception as exc:
            field = _failing_field(template, values)
            raise KeyTemplateError(
                f"cannot render lock name {template!r} of {describe(func)}: field {{{field}}} "
                f"failed with {type(exc).__name__}: {_short(exc)}",
                template=template,
                field=field,
            ) from exc

    return render


def _failing_field(template: str, values: Mapping[str, Any]) -> str:
    """The first replacement field of ``template`` that cannot be formatted alone."""
    for _literal, field, spec, conversion in string.Formatter().parse(template):
        if field is None:
            continue
        alone = "{" + field + (f"!{conversion}" if conversion else "") + f":{spec or ''}}}"
        try:
            alone.format_map(values)
        except Exception:
            return field
    return "?"


def _short(exc: BaseException) -> str:
    """An exception's text, kept short: it may quote a huge or hostile argument."""
    try:
        text = str(exc)
    except Exception:
        text = "(unprintable)"
    return text if len(text) <= 200 else text[:200] + "..."

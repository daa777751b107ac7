"""A decorated function as an object: :class:`Protected` (and :class:`ProtectedMethod`, what
a decorated method is through its class or an instance), which copies as itself and pickles
by reference, as the plain function would -- never by value, which would drop its lock."""

from __future__ import annotations

import copy
import importlib
import pickle
import types
from typing import Any

import wrapt


def _by_reference(module: str, qualname: str) -> Any:
    """What ``module.qualname`` names now (unpickling a decorated function)."""
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


class _ByValueRefused:
    """Kept in a decorated function's ``__dict__``; refuses to be pickled.

    Pickling by reference never pickles a function's ``__dict__``. cloudpickle (joblib/loky,
    Dask, Ray) and dill pickle functions of ``__main__`` -- a script, a notebook -- *by
    value*: they rebuild the plain function from its code and ``__dict__``, so the other
    process would run it with no lock at all. This makes that a clear error instead.
    """

    __slots__ = ("qualname",)

    def __init__(self, qualname: str) -> None:
        self.qualname = qualname

    def __reduce__(self) -> tuple[Any, ...]:
        raise pickle.PicklingError(
            f"{self.qualname} is decorated by redlock-deco and is being pickled by value "
            "(cloudpickle and dill do that for functions of __main__, e.g. a script or a "
            "notebook), which would drop its lock in the other process; define it in an "
            "importable module so it pickles by reference"
        )


class ProtectedMethod(wrapt.BoundFunctionWrapper):  # type: ignore[type-arg]  # as below
    """A decorated method as seen through its class or an instance: pickles as that
    attribute of that object (an instance pickles itself), the way a bound method does.
    Copies as a bound method does too (wrapt's proxies refuse to be copied)."""

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        instance = self._self_instance
        if instance is None or isinstance(instance, type):
            return self
        return getattr(copy.deepcopy(instance, memo), self.__name__)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        instance = self._self_instance
        if instance is None:  # through the class: the function itself
            reduced: tuple[Any, ...] = self._self_parent.__reduce_ex__(protocol)
            return reduced
        return getattr, (instance, self.__name__)


class Protected(wrapt.FunctionWrapper):  # type: ignore[type-arg]  # wrapt declares it generic only in its stubs
    """A decorated function or method. Pickles by reference, as the plain function would, so
    ``ProcessPoolExecutor``, ``multiprocessing`` (spawn) and Celery can take it: the other
    process imports the module and finds the same decorated function there."""

    __bound_function_wrapper__ = ProtectedMethod

    def __init__(self, wrapped: Any, wrapper: Any) -> None:
        super().__init__(wrapped, wrapper)
        # Stored on the wrapped function (a proxy shares its __dict__): see _ByValueRefused.
        # Only a plain function can be pickled by value (nor has a __dict__ to store it in).
        if isinstance(wrapped, types.FunctionType):
            self._redlock_deco_by_value = _ByValueRefused(wrapped.__qualname__)

    def __copy__(self) -> Protected:
        return self  # a function copies as itself; wrapt's proxy would raise

    def __deepcopy__(self, memo: dict[int, Any]) -> Protected:
        return self

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, tuple[str, str]]:
        module = getattr(self, "__module__", None)
        qualname = getattr(self, "__qualname__", None)
        try:
            found = _by_reference(module, qualname) if module and qualname else None
        except (ImportError, AttributeError):
            found = None
        if found is not self and getattr(found, "_self_parent", None) is not self:
            raise pickle.PicklingError(
                f"cannot pickle {module}.{qualname}: a decorated function pickles by reference, "
                "so it must be reachable by that name at module level (not a local function, "
                "nor decorated without being assigned to its name)"
            )
        return _by_reference, (str(module), str(qualname))

"""What ``@throttled`` does: admit each call by the throttle of its rendered name.

Beside ``_decorators`` (whose preparation it shares: the options, the compiled name, the
sync/async choice, the busy handlers) because a throttle takes no lease: nothing to give back
after the call, no ownership, no renewal. Its signature is in ``_decorator_api.py``.
"""

from __future__ import annotations

import inspect
from typing import Any

from . import _callables as callables
from . import _throttle as throttle
from ._decorators import Refusal, busy_handlers, prepare
from ._naming import check_name
from ._options import OnBusyArg, check_options
from ._protected import Protected
from ._throttle import ThrottleOptions, throttle_options


def decorate_throttled(name: Any, rate: Any, given: dict[str, Any]) -> Any:
    """``throttled(name, rate, **given)``: the decorator."""
    if inspect.isclass(name):
        callables.refuse_class("throttled", name)  # @throttled on a class
    values = check_options("throttled", {**given, "rate": rate})
    check_name(name)
    options, busy = throttle_options(values), values["on_busy"]
    return lambda func: _throttled("throttled", name, options, busy, func)


def _throttled(
    decorator: str, name: Any, options: ThrottleOptions, on_busy: OnBusyArg, func: Any
) -> Any:
    """Admit each call by the throttle of its rendered name; a call refused (no slot within
    ``wait``) goes to ``on_busy``. Nothing to give back afterwards: a throttle holds nothing."""
    underlying, renders, options, run_async = prepare(decorator, (name,), options, func)
    render, prefix, wait = renders[0], options.prefix, options.wait
    busy_sync, busy_async = busy_handlers(decorator, on_busy, underlying, run_async)

    def refusal(lock_name: str, key: str, answer: throttle.Admission) -> Refusal:
        return lambda: throttle.refused(lock_name, key, answer, wait)

    def call_throttled(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
        lock_name = render(instance, args, kwargs)
        key = prefix + lock_name
        answer = throttle.admit(options, lock_name, key, 1.0, wait)
        if not answer.admitted:
            return busy_sync(refusal(lock_name, key, answer), instance, args, kwargs)
        result = wrapped(*args, **kwargs)
        if callables.returned_unrun(result, awaitable=True):  # its body would run unthrottled
            callables.refuse_unrun(decorator, underlying, result)
        return result

    async def call_throttled_async(
        wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        lock_name = render(instance, args, kwargs)
        key = prefix + lock_name
        answer = await throttle.admit_async(options, lock_name, key, 1.0, wait)
        if not answer.admitted:
            return await busy_async(refusal(lock_name, key, answer), instance, args, kwargs)
        result = await wrapped(*args, **kwargs)
        if callables.returned_unrun(result, awaitable=False):  # an async generator behind
            callables.refuse_unrun(decorator, underlying, result)  # a wrapper without wraps
        return result

    return Protected(func, call_throttled_async if run_async else call_throttled)

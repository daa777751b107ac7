"""Clients as applications have them."""

from __future__ import annotations

from typing import Any

import redis


def wrap_execute_command(client: redis.Redis) -> redis.Redis:
    """``client`` with its ``execute_command`` wrapped on the instance, as OpenTelemetry's,
    ddtrace's or Sentry's integration does: the library then sends through redis-py's own
    ``execute_command`` (not directly on the pool), with redis-py's lines between a command's
    write and its read."""
    untraced = client.execute_command

    def execute_command(*args: Any, **options: Any) -> Any:
        return untraced(*args, **options)

    client.execute_command = execute_command  # type: ignore[method-assign]
    return client

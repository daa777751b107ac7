"""Drivers for a quorum of independent masters (Redlock): one protocol step sent to every
master at once, every reply (or failure) collected within the node timeout."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .drivers import AsyncTarget, SyncTarget
from .protocol import Algorithms, Fanout, Sleep, Step
from .quorum import Quorum
from .worker import SerialWorker

# How long a quorum round waits for each master: short against any sensible ttl, so a dead
# or paused master costs a round this much, not a socket timeout.
NODE_TIMEOUT = 0.25


class QuorumSyncTarget:
    """Independent masters, each a SyncTarget, driven together for the quorum algorithms."""

    listening = False  # a quorum waits with backoff, never for a hand-off

    def __init__(self, nodes: list[SyncTarget], node_timeout: float = NODE_TIMEOUT) -> None:
        self.nodes = nodes
        self.node_timeout = node_timeout
        self.algorithms: Algorithms = Quorum(len(nodes))
        self.renewal_worker: SerialWorker | None = None
        self.checked = False
        # One serial worker per master: a hung master blocks only its own queue (a shared
        # pool would fill up with calls stuck on it), and its commands keep their order, so
        # a late acquire there is always followed by the release queued after it. Idle
        # workers end, so a replaced provider leaves no threads behind.
        self._workers = [SerialWorker("redlock-deco-quorum") for _ in nodes]

    def retire(self) -> None:
        """This target was replaced (its provider registered again): let its threads go."""
        for worker in [*self._workers, self.renewal_worker]:
            if worker is not None:
                worker.retire()

    def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        assert isinstance(step, Fanout), step
        futures = [
            worker.submit(node.execute, step.step)
            for worker, node in zip(self._workers, self.nodes, strict=True)
        ]
        deadline = time.monotonic() + self.node_timeout
        replies: list[object] = []
        for future in futures:
            try:
                replies.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except Exception as exc:  # failed or too late: that master grants nothing
                replies.append(exc)
        return replies


class QuorumAsyncTarget:
    """Independent masters, each an AsyncTarget, driven together for the quorum algorithms."""

    listening = False

    def __init__(self, nodes: list[AsyncTarget], node_timeout: float = NODE_TIMEOUT) -> None:
        self.nodes = nodes
        self.node_timeout = node_timeout
        self.algorithms: Algorithms = Quorum(len(nodes))
        self.checked = False

    async def execute(self, step: Step) -> Any:
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        assert isinstance(step, Fanout), step
        return await asyncio.gather(
            *(asyncio.wait_for(node.execute(step.step), self.node_timeout) for node in self.nodes),
            return_exceptions=True,
        )

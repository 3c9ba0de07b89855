"""Lanes: a thread per group, made on first use, where its fast-path operations run off
the loop.

Arena operations queued behind their group's others wait there in order.
Groups must not share one: their operations may run in a different order on
another rank, and one waiting for a peer would stall the other. A group
closed ends its lane (:meth:`Lanes.end`); the session's close ends them all.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Lanes:
    """One process's lanes in one membership of a job (this rank's threads)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, rank: int) -> None:
        self._loop = loop
        self._rank = rank
        self._threads: dict[int, concurrent.futures.ThreadPoolExecutor] = {}

    def run(self, action: Callable[[], T], lane: int) -> Awaitable[T]:
        """Run ``action`` on ``lane``'s own thread, off the loop; await its result."""
        executor = self._threads.get(lane)
        if executor is None:
            executor = self._threads[lane] = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"asyncoll-rank{self._rank}-group{lane}")
        future = self._loop.run_in_executor(executor, action)
        # An operation cancelled while its thread still ran (a peer failed first,
        # say) ends in an error nobody awaits any more: it is reported elsewhere.
        future.add_done_callback(_retrieve)
        return future

    def end(self, lane: int) -> None:
        """End ``lane``'s thread once the actions queued on it, if any, have run."""
        executor = self._threads.pop(lane, None)
        if executor is not None:
            executor.shutdown(wait=False)

    def end_all(self) -> None:
        """End every lane's thread, as :meth:`end` does."""
        for lane in list(self._threads):
            self.end(lane)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()

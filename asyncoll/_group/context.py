"""Membership: what a group needs of this process's membership in its job.

The group layer sits below the runtime, so it names what it uses here, and
the runtime's Session provides it.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from asyncoll._group.faults import GroupFaults
from asyncoll._group.recorder import Recorder
from asyncoll._policy import GroupPolicy
from asyncoll._transport.base import MeshControl

T = TypeVar("T")


class Loop(Protocol):
    """The event loop thread that runs a blocking front door's plans (the runtime's)."""

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop thread and wait for its result."""

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop thread; return a future of its result."""


class Closable(Protocol):
    """What a membership closes when it closes (a group's core)."""

    def close(self, reason: str) -> None:
        """Close it for good, saying ``reason`` to later calls."""


class Membership(Protocol):
    """This process in its job: its rank, its data plane, and its coordinator link."""

    #: Operations started on this rank's Python path, in every group (the compiled
    #: entries count theirs in the session's ``compiled_ops``, where it has one).
    ops: int
    #: Whether this rank destroyed its process group or had it replaced (check_open
    #: raises, saying which).
    closed: bool
    #: The flight recorder of this rank's operations (None: ASYNCOLL_TRACE_BUFFER=0).
    recorder: Recorder | None

    @property
    def rank(self) -> int:
        """This process's global rank."""

    @property
    def mesh(self) -> MeshControl:
        """The data plane: the seam the algorithms speak to, and what the group layer adds."""

    @property
    def faults(self) -> GroupFaults:
        """Which groups are broken on this rank, and why."""

    @property
    def policy(self) -> GroupPolicy:
        """How this process's groups run their operations, read at join."""

    def run_blocking(self, action: Callable[[], T], lane: int) -> Awaitable[T]:
        """Run ``action`` on ``lane``'s own thread, off the loop; await it.

        For arena operations that must wait in order behind the group's
        operations on the loop (a group is a lane): the loop keeps running
        while they wait, and lanes never wait behind each other.
        """

    def call_soon(self, action: Callable[..., Any], *args: Any) -> None:
        """Run ``action(*args)`` on the loop thread; callable from any thread."""

    def on_close(self, part: Closable) -> None:
        """Close ``part`` (a group) when this membership closes, unless it was closed
        before (:meth:`forget`); held weakly."""

    def forget(self, part: Closable) -> None:
        """``part`` is closed: the membership's close has nothing more to do for it."""

    def end_lane(self, lane: int) -> None:
        """End ``lane``'s thread (its group is closed) once the action it runs ends."""

    def check_open(self, what: str) -> None:
        """Raise ClosedError once this rank has destroyed its process group."""

    async def barrier(self, group_id: int, timeout: float) -> None:
        """Wait, through the coordinator, until every member reached the same barrier."""

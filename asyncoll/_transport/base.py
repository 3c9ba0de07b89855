"""The seam between algorithms and transports."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

#: (group id, sequence number, step): what a frame belongs to.
Tag = tuple[int, int, int]


class Mesh(Protocol):
    """What an algorithm needs from the data plane: three methods and two numbers.

    ``send`` and ``recv_into`` register their work at once and return an
    awaitable, so an algorithm can post a receive, start a send and then wait
    for both without creating tasks.
    """

    @property
    def rank(self) -> int:
        """This process's global rank."""

    @property
    def size(self) -> int:
        """The number of ranks in the job."""

    def send(self, peer: int, tag: Tag, payload: memoryview) -> Awaitable[None]:
        """Send ``payload`` (bytes) to global rank ``peer``; done when it may be reused."""

    def recv_into(self, peer: int, tag: Tag, out: memoryview) -> Awaitable[None]:
        """Receive the frame ``tag`` from ``peer`` into ``out``, which it must fill exactly."""

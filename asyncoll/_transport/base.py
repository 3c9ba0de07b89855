"""The seam between algorithms and transports."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from asyncoll._wire.frames import Fingerprint

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

    def send(self, peer: int, tag: Tag, payload: memoryview,
             fingerprint: Fingerprint = ...) -> Awaitable[None]:
        """Send ``payload`` (bytes) to global rank ``peer``; done when it may be reused.

        ``fingerprint`` says which operation the frame belongs to.
        """

    def recv_into(self, peer: int, tag: Tag, out: memoryview,
                  fingerprint: Fingerprint = ...) -> Awaitable[None]:
        """Receive the frame ``tag`` from ``peer`` into ``out``, which it must fill exactly.

        A frame whose fingerprint differs fails the receive with MismatchError.
        """

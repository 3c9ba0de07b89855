"""Team: one operation's view of its group, the vocabulary every algorithm speaks.

Algorithms address peers by their index in the group (0 .. size - 1) and
number their frames with a local step; the team turns those into global
ranks and frame tags (group, seq, first_step + step). A composite operation
(an object collective, say) runs several algorithms inside one sequence
number by giving each a team shifted past the steps of the one before.

Sends are started, not awaited: ``send`` returns at once and ``flush``
waits for every send still in flight, so an algorithm can forward a segment
and go on receiving the next one while the kernel moves the bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

import numpy as np

from asyncoll._transport.base import Mesh, Tag

#: Steps one algorithm may use; a shifted team starts past them.
STEPS_PER_PHASE = 1 << 20


def as_bytes(array: np.ndarray) -> memoryview:
    """The bytes of a contiguous array, as a writable or read-only memoryview."""
    return memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def _retrieve(future: asyncio.Future[None]) -> None:
    # A send that fails after the operation gave up is already reported
    # through the receive that failed with it; do not log it again.
    if not future.cancelled():
        future.exception()


class Team:
    """The members of one operation, its frame tags, and its sends in flight."""

    def __init__(self, mesh: Mesh, ranks: Sequence[int], group_id: int, seq: int,
                 first_step: int = 0) -> None:
        self.mesh = mesh
        #: Global ranks in group-rank order.
        self.ranks = tuple(ranks)
        self.size = len(self.ranks)
        #: This process's index in the group.
        self.me = self.ranks.index(mesh.rank)
        self.group_id = group_id
        self.seq = seq
        self.first_step = first_step
        self._sends: list[Awaitable[None]] = []

    def phase(self, index: int) -> Team:
        """A team for the ``index``-th algorithm of a composite operation."""
        return Team(self.mesh, self.ranks, self.group_id, self.seq,
                    self.first_step + index * STEPS_PER_PHASE)

    def tag(self, step: int) -> Tag:
        """The frame tag of local step ``step``."""
        return (self.group_id, self.seq, self.first_step + step)

    def send(self, index: int, step: int, array: np.ndarray) -> None:
        """Start sending ``array`` to group member ``index``; flush() waits for it."""
        sent = self.mesh.send(self.ranks[index], self.tag(step), as_bytes(array))
        if isinstance(sent, asyncio.Future):
            sent.add_done_callback(_retrieve)
        self._sends.append(sent)

    def recv(self, index: int, step: int, out: np.ndarray) -> Awaitable[None]:
        """Post a receive of step ``step`` from member ``index`` into ``out``."""
        return self.mesh.recv_into(self.ranks[index], self.tag(step), as_bytes(out))

    async def flush(self) -> None:
        """Wait until every send started so far has left its memory."""
        sends, self._sends = self._sends, []
        for sent in sends:
            await sent

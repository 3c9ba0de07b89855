"""LinkTeam: the algorithms' Team over a group's direct links, run in the calling thread.

The socket algorithms (recursive doubling, the binomial tree, the ring
all-gather) are coroutines written against Team's ``send``, ``recv`` and
``flush``. Over DirectLinks every wait blocks the calling thread instead of
suspending, so the same coroutine runs to its end within one ``send(None)``
(:func:`run_here`): the algorithms are not written twice, and both paths
compute the same bits.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator, Sequence
from typing import Any

from numpy.typing import NDArray

from asyncoll._algorithms.team import CHECK_STEP, STEPS_PER_PHASE, as_bytes
from asyncoll._transport.base import Consumer
from asyncoll._transport.links import DirectLinks


_EMPTY = memoryview(bytearray(0))


class _Received:
    """What ``recv`` returns: awaiting it blocks until the record is in."""

    def __init__(self, links: DirectLinks, index: int, step: int, room: memoryview,
                 consume: Consumer | None) -> None:
        self._links, self._index, self._step = links, index, step
        self._room, self._consume = room, consume

    def __await__(self) -> Generator[Any, None, None]:
        self._links.wait_received(self._index, self._step)
        if self._consume is not None:
            self._consume(0, self._room)  # the whole payload, in one part
        return
        yield  # a generator that never suspends


class LinkTeam:
    """One operation's members over direct links (Team's vocabulary, blocking)."""

    def __init__(self, links: DirectLinks, ranks: Sequence[int], me: int,
                 first_step: int = 0, members: Sequence[int] | None = None) -> None:
        self.links = links
        self.ranks = tuple(ranks)
        self.size = len(self.ranks)
        self.me = me
        self.first_step = first_step
        #: Each team member's index on the links (some of the links' members may
        #: form the team: one per host, say).
        self.members = tuple(members) if members is not None else tuple(range(self.size))
        self._sent_to: set[int] = set()
        self._received_from: set[int] = set()

    def again(self) -> LinkTeam:
        """This team, ready for the group's next operation (one team serves them all)."""
        self._sent_to.clear()
        self._received_from.clear()
        return self

    def phase(self, index: int) -> LinkTeam:
        """A team for the ``index``-th algorithm of a composite operation (as Team's)."""
        team = LinkTeam(self.links, self.ranks, self.me,
                        self.first_step + index * STEPS_PER_PHASE, self.members)
        team._sent_to, team._received_from = self._sent_to, self._received_from
        return team

    def send(self, index: int, step: int, array: NDArray[Any]) -> None:
        """Start sending ``array`` to member ``index``; flush() waits for it."""
        self._sent_to.add(index)
        self.links.send(self.members[index], self.first_step + step, as_bytes(array))

    def recv(self, index: int, step: int, out: NDArray[Any],
             consume: Consumer | None = None) -> _Received:
        """Post a receive of step ``step`` from member ``index`` into ``out``.

        With ``consume``, the payload lands in ``out`` and is then handed to it whole.
        """
        room = as_bytes(out)
        self._received_from.add(index)
        member = self.members[index]
        self.links.post(member, self.first_step + step, room)
        return _Received(self.links, member, self.first_step + step, room, consume)

    async def flush(self) -> None:
        """Wait until every send started so far has left this process."""
        self.links.flush()

    def check_neighbours(self) -> None:
        """After the algorithm: exchange empty records where it sent none to a neighbour.

        As Team.check_neighbours does over the transport: every adjacent pair
        of members compares fingerprints at least once, so members that ran
        different operations which moved no data between them (a broadcast's
        root and a reduce's leaf, say) still find out.
        """
        if self.size == 1:
            return
        left, right = (self.me - 1) % self.size, (self.me + 1) % self.size
        if left not in self._sent_to:
            self.links.send(self.members[left], CHECK_STEP, _EMPTY)
        if right not in self._received_from:
            self.links.post(self.members[right], CHECK_STEP, _EMPTY)
            self.links.wait_received(self.members[right], CHECK_STEP)
        self.links.flush()


def run_here(algorithm: Coroutine[Any, Any, None]) -> None:
    """Run an algorithm's coroutine over a LinkTeam to its end, in this thread.

    Raises:
        RuntimeError: it suspended (something it awaited was not a direct link's).
        Whatever the algorithm raises.
    """
    try:
        algorithm.send(None)
    except StopIteration:
        return
    algorithm.close()
    raise RuntimeError("an algorithm run over direct links suspended; it awaited something "
                       "other than its LinkTeam")

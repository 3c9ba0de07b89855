"""Team: one operation's view of its group, the vocabulary every algorithm speaks.

Algorithms address peers by their index in the group (0 .. size - 1) and
number their frames with a local step; the team turns those into global
ranks and frame tags (group, seq, first_step + step). A composite operation
(an object collective, say) runs several algorithms inside one sequence
number by giving each a team shifted past the steps of the one before.

Sends are started, not awaited: ``send`` returns at once and ``flush``
waits for every send still in flight, so an algorithm can forward a segment
and go on receiving the next one while the kernel moves the bytes.

Every frame carries the operation's fingerprint, and receivers check it
before using the data (the mesh also checks frames nobody waits for).
``check_neighbours`` then makes sure every member heard from its right
neighbour and was heard by its left one in this operation, adding an empty
frame where the algorithm sent none: a member that receives nothing (a
broadcast's root, or everyone in an operation on empty arrays) is compared
too, and if any two members disagree, some adjacent pair does.

The team runs wherever its mesh does. Over the transport, its awaitables
suspend on the event loop; over a group's direct links (a
:class:`~asyncoll._transport.link_mesh.LinksMesh`, whose send and receive
are the links' own) they block the calling thread, and :func:`run_here`
runs an algorithm's coroutine to its end in one step: one team, one copy
of each algorithm, for both. There the neighbour check runs in plain calls
on what :meth:`Team.unchecked` leaves to do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Container, Generator, Sequence
from typing import Any

from numpy.typing import NDArray

from asyncoll._transport.base import Consumer, Mesh, Tag
from asyncoll._wire.frames import NO_FINGERPRINT, Fingerprint

#: Steps one algorithm may use; a shifted team starts past them.
STEPS_PER_PHASE = 1 << 20
#: The step of the neighbour check's frame, past every phase's (a phase's own:
#: see check_step).
CHECK_STEP = (1 << 32) - 1
_EMPTY = memoryview(bytearray(0))


def check_step(first_step: int) -> int:
    """The step of the neighbour check of a team whose steps start at ``first_step``.

    Past every step of every phase, and one of its own for each phase
    (phase k's is CHECK_STEP - k), so that it fits the frame's 32-bit step
    whichever phase of a composite operation checks.
    """
    return CHECK_STEP - first_step // STEPS_PER_PHASE


def as_bytes(array: NDArray[Any]) -> memoryview:
    """The bytes of a C-contiguous array, as a writable or read-only memoryview.

    Raises TypeError for one that is not contiguous (it has no such bytes).
    """
    # Several times faster than through numpy views (array.view(np.uint8)).
    # Only numpy's newer stubs declare ndarray a buffer: the ignore is needed
    # with the numpy that Python 3.10 and 3.11 get, and unused with newer ones.
    return memoryview(array).cast("B")  # type: ignore[arg-type, unused-ignore]


class _Nothing:
    """An awaitable with nothing to wait for (one exhausted iterator serves every await)."""

    __slots__ = ()
    _done: Generator[Any, None, None] = iter(())  # type: ignore[assignment]

    def __await__(self) -> Generator[Any, None, None]:
        return self._done


_NOTHING = _Nothing()
#: What run_here's step of an algorithm gives once the algorithm is over.
_FINISHED = object()


def _retrieve(future: asyncio.Future[None]) -> None:
    # A send that fails after the operation gave up is already reported
    # through the receive that failed with it; do not log it again.
    if not future.cancelled():
        future.exception()


def unchecked_neighbours(size: int, me: int, sent_to: Container[int],
                         received_from: Container[int]) -> tuple[int, int]:
    """What the neighbour check leaves to do after an algorithm: (the left neighbour to send
    an empty frame to, the right one to receive one from), -1 where the algorithm
    already did (``me`` sent to each member in ``sent_to``, received from each in
    ``received_from``: containers of member indices)."""
    if size == 1:
        return -1, -1
    left, right = (me - 1) % size, (me + 1) % size
    return -1 if left in sent_to else left, -1 if right in received_from else right


class Team:
    """The members of one operation, its frame tags, and its sends in flight.

    Args:
        mesh: what carries the frames (the transport, or a group's direct links).
        ranks: the members' ranks on ``mesh``, in group-rank order.
        group_id, seq: the first two fields of every frame's tag.
        first_step: where this team's local steps start.
        fingerprint: the operation's, carried by every frame.
        me: this process's index among ``ranks`` (by default, that of ``mesh.rank``).
    """

    def __init__(self, mesh: Mesh, ranks: Sequence[int], group_id: int, seq: int,
                 first_step: int = 0, fingerprint: Fingerprint = NO_FINGERPRINT,
                 me: int | None = None) -> None:
        self.mesh = mesh
        #: The members' ranks on the mesh (global ranks on the transport), in group order.
        self.ranks = tuple(ranks)
        self.size = len(self.ranks)
        #: This process's index in the group.
        self.me = self.ranks.index(mesh.rank) if me is None else me
        self.group_id = group_id
        self.seq = seq
        self.first_step = first_step
        #: What this operation is, as every frame of it says.
        self.fingerprint = fingerprint
        self._sends: list[Awaitable[None]] = []
        self._sent_to: set[int] = set()
        self._received_from: set[int] = set()
        #: Receives posted on the event loop so far, by member index: who has not answered,
        #: on a timeout (those over direct links are told by LinksExpired).
        self.receives: list[tuple[int, Awaitable[None]]] = []
        #: Sends started on the event loop so far, by member index (for a timeout too).
        self.sent: list[tuple[int, Awaitable[None]]] = []
        #: (left neighbour's index, its rank, right one's index, its rank), found at the
        #: first unchecked() (-1: none); a team over the links serves many operations.
        self._neighbours: tuple[int, int, int, int] | None = None

    def phase(self, index: int) -> Team:
        """A team for the ``index``-th algorithm of a composite operation."""
        team = Team(self.mesh, self.ranks, self.group_id, self.seq,
                    self.first_step + index * STEPS_PER_PHASE, self.fingerprint, self.me)
        team.receives, team.sent, team._sent_to = self.receives, self.sent, self._sent_to
        team._received_from = self._received_from
        return team

    def again(self) -> Team:
        """This team, ready for the group's next operation: one team serves them all, one
        at a time, where its tags need not change (the direct links number operations
        themselves)."""
        self._sent_to.clear()
        self._received_from.clear()
        if self._sends or self.receives or self.sent:  # (an operation that failed left them)
            self._sends.clear()
            self.receives.clear()
            self.sent.clear()
        return self

    def check_neighbours(self) -> Awaitable[None] | None:
        """After the algorithm: exchange empty frames where it sent none to a neighbour.

        A member that sent nothing to its left neighbour sends it an empty
        frame, and one that received nothing from its right neighbour waits
        for one, so each adjacent pair compared fingerprints at least once.
        Returns what is left to await, or None (the common case: nothing).
        """
        left, right = unchecked_neighbours(self.size, self.me, self._sent_to,
                                           self._received_from)
        if left < 0 and right < 0:
            return self.flush() if self._sends else None
        tag = (self.group_id, self.seq, check_step(self.first_step))
        if left >= 0:
            self._start(left, self.mesh.send(self.ranks[left], tag, _EMPTY, self.fingerprint))
        if right < 0:
            return self.flush()
        check = self.mesh.recv_into(self.ranks[right], tag, _EMPTY, self.fingerprint)
        self.receives.append((right, check))
        return self._finish_check(check) if self._sends else check

    async def _finish_check(self, check: Awaitable[None]) -> None:
        await check
        await self.flush()

    def unchecked(self) -> tuple[int, int]:
        """What the neighbour check leaves to do after the algorithm, on the mesh: (the
        left neighbour's rank to send an empty frame to, the right one's to receive one
        from), -1 where the algorithm already did.

        Over direct links, where the check runs in plain calls
        (asyncoll._algorithms.doubling.check_on_links) instead of as
        :meth:`check_neighbours`' awaitable.
        """
        left, left_rank, right, right_rank = self._neighbours or self._find_neighbours()
        return (-1 if left in self._sent_to else left_rank,
                -1 if right in self._received_from else right_rank)

    def _find_neighbours(self) -> tuple[int, int, int, int]:
        left, right = unchecked_neighbours(self.size, self.me, (), ())
        self._neighbours = (left, self.ranks[left] if left >= 0 else -1,
                            right, self.ranks[right] if right >= 0 else -1)
        return self._neighbours

    def waiting_for(self) -> list[int]:
        """Global ranks whose frames this operation posted for and did not get; where
        none, those its sends wait for (the peer reads nothing: the data stays here)."""
        return _pending(self.ranks, self.receives) or _pending(self.ranks, self.sent)

    def tag(self, step: int) -> Tag:
        """The frame tag of local step ``step``."""
        return (self.group_id, self.seq, self.first_step + step)

    def send(self, index: int, step: int, array: NDArray[Any]) -> None:
        """Start sending ``array`` to group member ``index``; flush() waits for it."""
        self._sent_to.add(index)
        # The tag and _start written out: this runs for every frame.
        sent = self.mesh.send(self.ranks[index],
                              (self.group_id, self.seq, self.first_step + step),
                              as_bytes(array), self.fingerprint)
        if isinstance(sent, asyncio.Future):
            sent.add_done_callback(_retrieve)
            self.sent.append((index, sent))
        self._sends.append(sent)

    def _start(self, index: int, sent: Awaitable[None]) -> None:
        if isinstance(sent, asyncio.Future):
            sent.add_done_callback(_retrieve)
            self.sent.append((index, sent))
        self._sends.append(sent)

    def recv(self, index: int, step: int, out: NDArray[Any],
             consume: Consumer | None = None) -> Awaitable[None]:
        """Post a receive of step ``step`` from member ``index`` into ``out``.

        With ``consume``, the payload goes to it instead (see Mesh.recv_into),
        and ``out`` is room of the payload's size the transport may use.
        """
        received = self.mesh.recv_into(self.ranks[index],
                                       (self.group_id, self.seq, self.first_step + step),
                                       as_bytes(out), self.fingerprint, consume)
        if isinstance(received, asyncio.Future):
            # A receive the algorithm no longer awaits (another failed first) fails
            # with the group's error, which is reported once, by that other one.
            received.add_done_callback(_retrieve)
            self.receives.append((index, received))
        self._received_from.add(index)
        return received

    def flush(self) -> Awaitable[None]:
        """An awaitable that is done once every send started so far has left its memory."""
        sends = self._sends
        if not sends:
            return _NOTHING
        self._sends = []
        # One send (a ring's step, a tree's edge) is its own awaitable: no coroutine.
        return sends[0] if len(sends) == 1 else _each(sends)


def _pending(ranks: tuple[int, ...], started: list[tuple[int, Awaitable[None]]]) -> list[int]:
    """The ranks of ``started``'s futures not done yet, sorted."""
    return sorted({ranks[i] for i, f in started
                   if isinstance(f, asyncio.Future) and (f.cancelled() or not f.done())})


async def _each(awaitables: list[Awaitable[None]]) -> None:
    for awaitable in awaitables:
        await awaitable


def run_here(algorithm: Awaitable[None] | None) -> None:
    """Run ``algorithm`` (over a team of direct links, whose waits block) to its end in
    this thread; None: nothing to run.

    Raises:
        RuntimeError: it suspended (something it awaited was not a direct link's).
        Whatever the algorithm raises.
    """
    if algorithm is None:
        return
    steps = algorithm.__await__()
    # next() with a default: a coroutine that returns None raises no StopIteration then.
    if next(steps, _FINISHED) is _FINISHED:
        return
    steps.close()
    raise RuntimeError("an algorithm run over direct links suspended; it awaited something "
                       "other than its team's")

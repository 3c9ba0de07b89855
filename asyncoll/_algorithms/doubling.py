"""Recursive-doubling all-reduce: the latency-optimal choice for small arrays.

With p the largest power of two not above n, the first 2 (n - p) members
fold in pairs: each even one hands its data to the odd one after it and
waits for the answer, leaving p active members. In round k each active
member exchanges its whole partial result with the member whose virtual
index differs in bit k and combines the two, so after log2(p) rounds every
active member holds the reduction of everything; the folded members then
get it from their partners. That is log2(p) + 2 latencies instead of the
ring's 2 (n - 1), at the price of sending the whole array each round.

Both members of a pair combine the same two partials in the same order
(the lower virtual index first), so every member gets the same bits.

Who talks to whom, at which step, and in which order each pair combines is
worked out once per (size, member) in a :class:`DoublingPlan`. Two runners
follow it: a coroutine over a Team (the transport's algorithm, also run
over direct links through a LinksMesh) and :class:`DoublingOnLinks`, plain
calls on a group's DirectLinks for the small blocking all-reduces
across hosts, where a coroutine's layers cost more than the exchange. Both
send the same records at the same steps, so they compute the same bits and
either may meet the other.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._algorithms.ops import combine, finish
from asyncoll._algorithms.team import CHECK_STEP, Team, as_bytes, unchecked_neighbours
from asyncoll._transport.links import DirectLinks
from asyncoll.types import ReduceOp

_EMPTY = memoryview(bytearray(0))
#: The tag of the neighbour check's record over the links (of a tag, only the step counts
#: there: they number their operations themselves).
_CHECK_TAG = (0, 0, CHECK_STEP)


@dataclass(frozen=True)
class DoublingPlan:
    """One member's part in a recursive-doubling all-reduce of ``size`` members."""

    size: int
    #: A folded even member: the odd member it hands its data to (-1: not one).
    hands_to: int
    #: A folded odd member: the even member whose data it takes first (-1: not one).
    takes_from: int
    #: Per round: (step, partner, whether this member's partial comes first).
    rounds: tuple[tuple[int, int, bool], ...]
    #: The step at which a folded pair's result goes back to the even member.
    last_step: int
    #: The neighbour check (Team.check_neighbours) this plan leaves to do: send an
    #: empty record to the left neighbour, and receive one from the right one.
    check_left: int
    check_right: int


@functools.lru_cache(maxsize=256)
def plan_of(size: int, me: int) -> DoublingPlan:
    """Member ``me``'s part in a recursive-doubling all-reduce of ``size`` members."""
    active = 1 << (size.bit_length() - 1)
    folded = size - active
    rounds = active.bit_length() - 1
    last_step = rounds + 1
    hands_to = takes_from = -1
    schedule: list[tuple[int, int, bool]] = []
    if me < 2 * folded and me % 2 == 0:
        hands_to = me + 1
    else:
        if me < 2 * folded:
            takes_from = me - 1
            virtual = me // 2
        else:
            virtual = me - folded
        for k in range(rounds):
            partner_virtual = virtual ^ (1 << k)
            partner = 2 * partner_virtual + 1 if partner_virtual < folded else \
                partner_virtual + folded
            schedule.append((k + 1, partner, virtual < partner_virtual))
    talks_to = {partner for _, partner, _ in schedule} | {hands_to, takes_from}
    return DoublingPlan(size, hands_to, takes_from, tuple(schedule), last_step,
                        *unchecked_neighbours(size, me, talks_to, talks_to))


def _combine_round(op: ReduceOp, data: NDArray[Any], incoming: NDArray[Any],
                   mine_first: bool) -> None:
    """``data`` = the pair's two partials combined, the lower virtual index's first."""
    if mine_first:
        combine(op, data, incoming, data)
    else:
        combine(op, incoming, data, data)


async def recursive_doubling_all_reduce(team: Team, data: NDArray[Any], op: ReduceOp,
                                        scratch: NDArray[Any]) -> None:
    """All-reduce the 1-D contiguous array ``data`` in place.

    ``scratch`` holds at least ``data.size`` elements of ``data``'s dtype.
    """
    n = team.size
    if n == 1 or data.size == 0:
        finish(op, data, n)
        return
    plan = plan_of(n, team.me)
    if plan.hands_to >= 0:
        team.send(plan.hands_to, 0, data)
        await team.flush()
        await team.recv(plan.hands_to, plan.last_step, data)
        return
    incoming = scratch[:data.size]
    if plan.takes_from >= 0:
        await team.recv(plan.takes_from, 0, incoming)
        combine(op, incoming, data, data)
    for step, partner, mine_first in plan.rounds:
        received = team.recv(partner, step, incoming)
        team.send(partner, step, data)
        await received
        await team.flush()  # data is about to change under the send
        _combine_round(op, data, incoming, mine_first)
    finish(op, data, n)
    if plan.takes_from >= 0:
        team.send(plan.takes_from, plan.last_step, data)
        await team.flush()


class DoublingOnLinks:
    """:func:`recursive_doubling_all_reduce` over a group's DirectLinks, in this thread,
    made ready once for arrays of one dtype and size (MPI's persistent collective).

    It sends the records a Team over the links would, at the same steps, and
    then does the neighbour check a Team does. Arrays up to :data:`OWN_SCRATCH_BYTES` get
    room of their own for the partner's partial, made here; larger ones take
    ``scratch(dtype, count)`` (the group's, reused) on every run.

    Args:
        me: this member's index among ``size``.
        dtype, count: the arrays' dtype and element count.
        op: the reduction.
        scratch: room for ``count`` elements of ``dtype``.
        members: the links' member index of each of the ``size`` (by default
            the same: all of the links' members take part).
    """

    #: Arrays up to this many bytes get room of their own for the partner's partial.
    OWN_SCRATCH_BYTES = 64 << 10

    def __init__(self, me: int, size: int, dtype: np.dtype[Any], count: int, op: ReduceOp,
                 scratch: Callable[[np.dtype[Any], int], NDArray[Any]],
                 members: Sequence[int] | None = None) -> None:
        self.me, self.size, self.op = me, size, op
        self.plan = plan_of(size, me) if size > 1 else None
        on_links = members if members is not None else range(size)
        #: The neighbour check of a run that moves nothing: (left, right) on the links.
        left, right = unchecked_neighbours(size, me, (), ())
        self._nothing_moved = (on_links[left] if left >= 0 else -1,
                               on_links[right] if right >= 0 else -1)
        if self.plan is not None and members is not None:
            self.plan = _on_members(self.plan, members)
        self._dtype, self._count, self._scratch = dtype, count, scratch
        #: The tags of the records it sends, made once (over the links, of a tag only the
        #: step counts), and its rounds with theirs: (step, tag, partner, mine first).
        last = self.plan.last_step if self.plan is not None else 0
        self._first_tag, self._last_tag = (0, 0, 0), (0, 0, last)
        self._rounds = tuple((step, (0, 0, step), partner, first) for step, partner, first
                             in (self.plan.rounds if self.plan is not None else ()))
        self._incoming: NDArray[Any] | None = None
        self._room = _EMPTY
        if count * dtype.itemsize <= self.OWN_SCRATCH_BYTES:
            self._incoming = np.empty(count, dtype)
            self._room = as_bytes(self._incoming)

    def run(self, step: Any, data: NDArray[Any]) -> None:
        """All-reduce ``data`` (1-D, C-contiguous, of the dtype and size given) in place.

        ``step`` is the operation's on the group's links (its ``links``, a
        DirectLinks, are stamped for it: DirectLinks.stamp).
        """
        links: DirectLinks = step.links
        op, size, plan = self.op, self.size, self.plan
        if plan is None or data.size == 0:
            finish(op, data, size)
            if plan is not None:
                # Nothing moved: each neighbour pair compares fingerprints on empty records.
                check_on_links(links, *self._nothing_moved)
            return
        mine = as_bytes(data)
        if plan.hands_to >= 0:
            links.send_tagged(plan.hands_to, self._first_tag, mine)
            links.flush()
            links.post(plan.hands_to, plan.last_step, mine)
            links.wait_received(plan.hands_to, plan.last_step)
        else:
            incoming, room = self._incoming, self._room
            if incoming is None:
                incoming = self._scratch(self._dtype, self._count)
                room = as_bytes(incoming)
            if plan.takes_from >= 0:
                links.post(plan.takes_from, 0, room)
                links.wait_received(plan.takes_from, 0)
                combine(op, incoming, data, data)
            for step, tag, partner, mine_first in self._rounds:
                links.post(partner, step, room)
                links.send_tagged(partner, tag, mine)
                links.wait_received(partner, step)
                links.flush()  # data is about to change under the send
                _combine_round(op, data, incoming, mine_first)
            finish(op, data, size)
            if plan.takes_from >= 0:
                links.send_tagged(plan.takes_from, self._last_tag, mine)
                links.flush()
        check_on_links(links, plan.check_left, plan.check_right)


def check_on_links(links: DirectLinks, left: int, right: int) -> None:
    """Team.check_neighbours over the links, in plain calls: an empty record to member
    ``left``, one from member ``right`` (-1: none; see Team.unchecked), then every record
    sent has left."""
    if left >= 0:
        links.send_tagged(left, _CHECK_TAG, _EMPTY)
    if right >= 0:
        links.post(right, CHECK_STEP, _EMPTY)
        links.wait_received(right, CHECK_STEP)
    links.flush()


def _on_members(plan: DoublingPlan, members: Sequence[int]) -> DoublingPlan:
    """``plan`` with every partner index turned into its index on the links."""
    def on(index: int) -> int:
        return members[index] if index >= 0 else index

    return dataclasses.replace(
        plan, hands_to=on(plan.hands_to), takes_from=on(plan.takes_from),
        rounds=tuple((step, on(partner), first) for step, partner, first in plan.rounds),
        check_left=on(plan.check_left), check_right=on(plan.check_right))

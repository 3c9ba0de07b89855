"""Ring reduce-scatter, all-gather and all-reduce, pipelined in segments.

Each member's data is cut into one block per member (blocks may differ in
size, and may be empty). The members form a ring: each sends to its right
neighbour (index + 1) and receives from its left one.

Reduce-scatter: at step s (0 .. n-2) member i sends its partial of block
(i - s - 1) and receives the left neighbour's partial of block (i - s - 2),
combining it with its own data for that block. After n - 1 steps member i
holds the full reduction of block i. All-gather then passes the finished
blocks on around the ring, n - 1 steps more, each received straight into
its place. All-reduce is the two in a row over one array. Every member sends
and receives 2 (n - 1) / n of the array, the bandwidth optimum, and each
element of the result is computed on exactly one member and copied to the
others, so the result is bitwise identical everywhere.

Pipelining: a block travels as segments (segments.py). A segment is passed
on (in the next step) as soon as it has been reduced or received, so the
reduction of one segment overlaps the transfer of the next. Receives are
posted two steps ahead into two halves of the scratch space, so data
arriving early lands in place instead of in a temporary buffer.

The reduce-scatter hands each receive a consumer that combines the payload
into the accumulator: over TCP it runs once the payload is in the scratch
space, over shared memory it reads the sender's ring directly, which saves a
copy of every received byte. Combining a block two steps early is safe: no
earlier step sends or reads that block (the block received at step s + 2 is
sent from at step s + 3 at the soonest).

All-reduce runs the two as one pipeline: each segment of a member's own
block goes on into the all-gather as soon as its reduction is complete, and
the all-gather's receives are posted before the reduce-scatter starts. A
member thus always has bytes queued for its right neighbour, and the
operation takes as long as the slower direction of each link over the whole
operation, not the sum of each phase's slower one (on two namespace hosts
with each egress limited to 1 Gbit/s, the phase boundary left a member's
egress idle for 10-37 ms of a 16 MiB operation's 170). Posting the
all-gather's receives early is safe: the data for block b's segment
reaches a member only after b's owner reduced it, which needs that
member's own partial of it, so every send and combine this member makes in
that segment came first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._algorithms.chunking import chunk_bounds
from asyncoll._algorithms.ops import combine, finish
from asyncoll._algorithms.segments import segment_bounds
from asyncoll._algorithms.team import Team
from asyncoll._transport.base import Consumer
from asyncoll.types import ReduceOp


def ring_scratch_elements(block_sizes: Sequence[int]) -> int:
    """Elements of scratch space the reduce-scatter needs: two of the largest block."""
    return 2 * max(block_sizes, default=0)


def _segments(blocks: Sequence[NDArray[Any]], segment_bytes: int) -> list[list[tuple[int, int]]]:
    return [segment_bounds(0, b.size, b.itemsize, segment_bytes) for b in blocks]


async def ring_reduce_scatter(team: Team, sources: Sequence[NDArray[Any]],
                              accumulators: Sequence[NDArray[Any]], op: ReduceOp,
                              scratch: NDArray[Any], segment_bytes: int,
                              reduced: Callable[[int], None] | None = None) -> None:
    """Reduce block b of every member's data into member b's ``accumulators[b]``.

    Args:
        team: the operation's members and tags.
        sources: this member's data, one 1-D array per member (same sizes on
            every member). Read only, unless ``accumulators`` are the same arrays.
        accumulators: where partial results are formed, same sizes as
            ``sources`` (the sources themselves for an in-place all-reduce, or
            scratch); ``accumulators[team.me]`` holds the result on return.
        op: the reduction (AVG is finished by the caller).
        scratch: at least ring_scratch_elements() elements of the same dtype.
        segment_bytes: the pipelining segment size.
        reduced: called with j as soon as segment j of this member's own
            block is complete (by segment_bounds of that block), before the
            last sends are flushed.
    """
    n, me = team.size, team.me
    if n == 1:
        if accumulators[0] is not sources[0]:
            np.copyto(accumulators[0], sources[0])
        return
    right, left = (me + 1) % n, (me - 1) % n
    segments = _segments(sources, segment_bytes)
    width = max(len(s) for s in segments)
    half = max(b.size for b in sources)
    halves = (scratch[:half], scratch[half:2 * half])

    def post(step: int) -> list[Awaitable[None]]:
        block = (me - step - 2) % n
        into = halves[step % 2]
        return [team.recv(left, step * width + j, into[lo:hi],
                          _combiner(op, sources[block][lo:hi], accumulators[block][lo:hi]))
                for j, (lo, hi) in enumerate(segments[block])]

    first = (me - 1) % n
    for j, (lo, hi) in enumerate(segments[first]):
        team.send(right, j, sources[first][lo:hi])
    posted = [post(0), post(1) if n > 2 else []]
    for step in range(n - 1):
        block = (me - step - 2) % n
        for j, (lo, hi) in enumerate(segments[block]):
            await posted[step % 2][j]  # combined into the accumulator on arrival
            if step < n - 2:
                team.send(right, (step + 1) * width + j, accumulators[block][lo:hi])
            elif reduced is not None:
                reduced(j)
        if step + 2 < n - 1:
            posted[step % 2] = post(step + 2)
    await team.flush()


def _combiner(op: ReduceOp, source: NDArray[Any], acc: NDArray[Any]) -> Consumer:
    """A consumer that sets ``acc = source (op) payload``, part by part."""
    itemsize = acc.itemsize

    def consume(offset: int, data: memoryview) -> None:
        first = offset // itemsize
        incoming = np.frombuffer(data, dtype=acc.dtype)
        last = first + incoming.size
        combine(op, source[first:last], incoming, acc[first:last])

    return consume


class _AllGather:
    """A ring all-gather whose receives are posted before this member's block is ready.

    ``send_own(j)`` passes on segment j of ``blocks[team.me]`` (each once,
    in any order); ``run()`` forwards the others' blocks as they come.
    """

    def __init__(self, team: Team, blocks: Sequence[NDArray[Any]], segment_bytes: int) -> None:
        n, me = team.size, team.me
        self._team, self._blocks = team, blocks
        self._right, left = (me + 1) % n, (me - 1) % n
        self._segments = _segments(blocks, segment_bytes)
        self._width = max(len(s) for s in self._segments)
        self._posted = []
        for step in range(n - 1):
            block = (me - step - 1) % n
            self._posted.append([team.recv(left, step * self._width + j, blocks[block][lo:hi])
                                 for j, (lo, hi) in enumerate(self._segments[block])])

    def own_segments(self) -> int:
        """How many segments this member's own block has."""
        return len(self._segments[self._team.me])

    def own(self, j: int) -> NDArray[Any]:
        """Segment j of this member's own block."""
        lo, hi = self._segments[self._team.me][j]
        return self._blocks[self._team.me][lo:hi]

    def send_own(self, j: int) -> None:
        """Pass segment j of this member's own block on to the right neighbour."""
        self._team.send(self._right, j, self.own(j))

    async def run(self) -> None:
        """Receive every other block, forwarding each segment but the last step's."""
        team, n, me = self._team, self._team.size, self._team.me
        for step in range(n - 1):
            block = (me - step - 1) % n
            for j, (lo, hi) in enumerate(self._segments[block]):
                await self._posted[step][j]
                if step < n - 2:
                    team.send(self._right, (step + 1) * self._width + j,
                              self._blocks[block][lo:hi])
        await team.flush()


async def ring_all_gather(team: Team, blocks: Sequence[NDArray[Any]], segment_bytes: int) -> None:
    """Fill every member's ``blocks[b]`` with member b's ``blocks[b]``.

    Args:
        team: the operation's members and tags.
        blocks: one 1-D array per member (same sizes on every member);
            ``blocks[team.me]`` holds this member's data on entry.
        segment_bytes: the pipelining segment size.
    """
    if team.size == 1:
        return
    gather = _AllGather(team, blocks, segment_bytes)
    for j in range(gather.own_segments()):
        gather.send_own(j)
    await gather.run()


async def ring_all_reduce(team: Team, data: NDArray[Any], op: ReduceOp, scratch: NDArray[Any],
                          segment_bytes: int) -> None:
    """All-reduce the 1-D contiguous array ``data`` in place: reduce-scatter, then all-gather.

    The two run as one pipeline (see the module's docstring). ``scratch``
    needs ring_scratch_elements() of the blocks chunk_bounds() cuts
    ``data`` into, in ``data``'s dtype.
    """
    n, me = team.size, team.me
    blocks = [data[lo:hi] for lo, hi in chunk_bounds(data.size, n)]
    if n == 1:
        finish(op, blocks[me], n)
        return
    # The reduce-scatter cuts each block as the all-gather does: the same j.
    gather = _AllGather(team.phase(1), blocks, segment_bytes)

    def reduced(j: int) -> None:
        finish(op, gather.own(j), n)  # elementwise: the same bits as on the whole block
        gather.send_own(j)

    await ring_reduce_scatter(team, blocks, blocks, op, scratch, segment_bytes, reduced)
    await gather.run()


def all_reduce_scratch_elements(count: int, group_size: int) -> int:
    """Scratch elements ring_all_reduce needs for ``count`` elements."""
    return ring_scratch_elements([hi - lo for lo, hi in chunk_bounds(count, group_size)])

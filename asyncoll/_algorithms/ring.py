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
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

import numpy as np

from asyncoll._algorithms.chunking import chunk_bounds
from asyncoll._algorithms.ops import combine, finish
from asyncoll._algorithms.segments import segment_bounds
from asyncoll._algorithms.team import Team
from asyncoll._transport.base import Consumer
from asyncoll.types import ReduceOp


def ring_scratch_elements(block_sizes: Sequence[int]) -> int:
    """Elements of scratch space the reduce-scatter needs: two of the largest block."""
    return 2 * max(block_sizes, default=0)


def _segments(blocks: Sequence[np.ndarray], segment_bytes: int) -> list[list[tuple[int, int]]]:
    return [segment_bounds(0, b.size, b.itemsize, segment_bytes) for b in blocks]


async def ring_reduce_scatter(team: Team, sources: Sequence[np.ndarray],
                              accumulators: Sequence[np.ndarray], op: ReduceOp,
                              scratch: np.ndarray, segment_bytes: int) -> None:
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
        if step + 2 < n - 1:
            posted[step % 2] = post(step + 2)
    await team.flush()


def _combiner(op: ReduceOp, source: np.ndarray, acc: np.ndarray) -> Consumer:
    """A consumer that sets ``acc = source (op) payload``, part by part."""
    itemsize = acc.itemsize

    def consume(offset: int, data: memoryview) -> None:
        first = offset // itemsize
        incoming = np.frombuffer(data, dtype=acc.dtype)
        last = first + incoming.size
        combine(op, source[first:last], incoming, acc[first:last])

    return consume


async def ring_all_gather(team: Team, blocks: Sequence[np.ndarray], segment_bytes: int) -> None:
    """Fill every member's ``blocks[b]`` with member b's ``blocks[b]``.

    Args:
        team: the operation's members and tags.
        blocks: one 1-D array per member (same sizes on every member);
            ``blocks[team.me]`` holds this member's data on entry.
        segment_bytes: the pipelining segment size.
    """
    n, me = team.size, team.me
    if n == 1:
        return
    right, left = (me + 1) % n, (me - 1) % n
    segments = _segments(blocks, segment_bytes)
    width = max(len(s) for s in segments)
    posted = []
    for step in range(n - 1):
        block = (me - step - 1) % n
        posted.append([team.recv(left, step * width + j, blocks[block][lo:hi])
                       for j, (lo, hi) in enumerate(segments[block])])
    for j, (lo, hi) in enumerate(segments[me]):
        team.send(right, j, blocks[me][lo:hi])
    for step in range(n - 1):
        block = (me - step - 1) % n
        for j, (lo, hi) in enumerate(segments[block]):
            await posted[step][j]
            if step < n - 2:
                team.send(right, (step + 1) * width + j, blocks[block][lo:hi])
    await team.flush()


async def ring_all_reduce(team: Team, data: np.ndarray, op: ReduceOp, scratch: np.ndarray,
                          segment_bytes: int) -> None:
    """All-reduce the 1-D contiguous array ``data`` in place: reduce-scatter, then all-gather.

    ``scratch`` needs ring_scratch_elements() of the blocks chunk_bounds() cuts
    ``data`` into, in ``data``'s dtype.
    """
    blocks = [data[lo:hi] for lo, hi in chunk_bounds(data.size, team.size)]
    await ring_reduce_scatter(team, blocks, blocks, op, scratch, segment_bytes)
    finish(op, blocks[team.me], team.size)
    await ring_all_gather(team.phase(1), blocks, segment_bytes)


def all_reduce_scratch_elements(count: int, group_size: int) -> int:
    """Scratch elements ring_all_reduce needs for ``count`` elements."""
    return ring_scratch_elements([hi - lo for lo, hi in chunk_bounds(count, group_size)])

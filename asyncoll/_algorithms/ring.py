"""Ring all_reduce: reduce-scatter then all-gather around the group.

The array is cut into one chunk per rank (chunk_bounds). In the
reduce-scatter, at step s rank i sends chunk (i - s) to its right neighbour
and receives chunk (i - s - 1) from its left one, adding it into its own copy;
after n - 1 steps rank i holds the full reduction of chunk (i + 1). In the
all-gather each rank passes reduced chunks on around the ring, receiving
each one straight into its place in the array. Every rank sends and receives
2 (n - 1) / n of the array, the bandwidth optimum, and every element of the
result was computed on exactly one rank and copied to the others, so the
result is bitwise identical everywhere.

Empty chunks (fewer elements than ranks) are skipped on both sides, as both
compute the same bounds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from asyncoll._algorithms.chunking import chunk_bounds
from asyncoll._algorithms.ops import finish, reduce_into
from asyncoll._transport.base import Mesh
from asyncoll.types import ReduceOp


def _bytes(array: np.ndarray) -> memoryview:
    return memoryview(array.view(np.uint8))  # type: ignore[arg-type]


def ring_scratch_bytes(count: int, itemsize: int, group_size: int) -> int:
    """Bytes of scratch space ring_all_reduce needs: one chunk, the largest."""
    start, stop = chunk_bounds(count, group_size)[0]
    return (stop - start) * itemsize


async def ring_all_reduce(mesh: Mesh, ranks: Sequence[int], group_id: int, seq: int,
                          data: np.ndarray, op: ReduceOp, scratch: np.ndarray) -> None:
    """All-reduce the 1-D contiguous array ``data`` in place over the group ``ranks``.

    Args:
        mesh: the data plane.
        ranks: the group's global ranks, in group-rank order; must contain mesh.rank.
        group_id: the group's id, for frame tags.
        seq: this operation's sequence number in the group, for frame tags.
        data: this rank's values; holds the result on return.
        op: the reduction.
        scratch: a uint8 array of at least ring_scratch_bytes(); received
            chunks land there before they are reduced into ``data``.
    """
    n = len(ranks)
    me = ranks.index(mesh.rank)
    bounds = chunk_bounds(data.size, n)
    if n == 1:
        finish(op, data, 1)
        return
    right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
    incoming = scratch[:ring_scratch_bytes(data.size, data.itemsize, n)].view(data.dtype)

    for step in range(n - 1):
        send_lo, send_hi = bounds[(me - step) % n]
        recv_lo, recv_hi = bounds[(me - step - 1) % n]
        tag = (group_id, seq, step)
        scratch = incoming[:recv_hi - recv_lo]
        received = mesh.recv_into(left, tag, _bytes(scratch)) if scratch.size else None
        if send_hi > send_lo:
            await mesh.send(right, tag, _bytes(data[send_lo:send_hi]))
        if received is not None:
            await received
            reduce_into(op, data[recv_lo:recv_hi], scratch)

    own_lo, own_hi = bounds[(me + 1) % n]
    finish(op, data[own_lo:own_hi], n)

    for step in range(n - 1):
        send_lo, send_hi = bounds[(me + 1 - step) % n]
        recv_lo, recv_hi = bounds[(me - step) % n]
        tag = (group_id, seq, n - 1 + step)
        received = (mesh.recv_into(left, tag, _bytes(data[recv_lo:recv_hi]))
                    if recv_hi > recv_lo else None)
        if send_hi > send_lo:
            await mesh.send(right, tag, _bytes(data[send_lo:send_hi]))
        if received is not None:
            await received

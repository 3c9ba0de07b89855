"""The transport's algorithm for each collective, bound to a call's signature.

:func:`transport_of` gives, for a signature and the algorithm chosen over
the transport, the coroutine function a Plan runs on the loop: given the
operation's team and the call's arrays, in the form the fast paths' kernels
take them too. It binds no arrays, so a remembered call keeps none alive,
and direct links run the same function over their own team.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._algorithms import selection
from asyncoll._algorithms.compressed_ring import compressed_ring_all_reduce
from asyncoll._algorithms.compression import codec
from asyncoll._algorithms.doubling import recursive_doubling_all_reduce
from asyncoll._algorithms.ops import finish
from asyncoll._algorithms.ring import (
    all_reduce_scratch_elements,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    ring_scratch_elements,
)
from asyncoll._algorithms.team import Team
from asyncoll._algorithms.tree import chain_broadcast, chain_reduce, tree_broadcast, tree_reduce
from asyncoll._group.plan import Signature, Transport
from asyncoll.types import ReduceOp


class Scratch:
    """A group's working memory, reused across its operations (they run one at a time).

    Allocating a large buffer per call costs a page fault per 4 KiB touched.
    """

    def __init__(self) -> None:
        self._memory = np.empty(0, dtype=np.uint8)

    def __call__(self, dtype: np.dtype[Any], count: int) -> NDArray[Any]:
        """Room for ``count`` elements of ``dtype``, valid until the next call."""
        nbytes = count * dtype.itemsize
        if self._memory.nbytes < nbytes:
            self._memory = np.empty(nbytes, dtype=np.uint8)
        return self._memory[:nbytes].view(dtype)


def transport_of(signature: Signature, algorithm: str, scratch: Scratch) -> Transport:
    """The transport's ``algorithm`` for calls of ``signature``: (team, arrays) -> awaitable."""
    return functools.partial(_ALGORITHMS[signature.collective], signature, algorithm, scratch)


def spread(algorithm: Callable[..., Awaitable[None]]) -> Transport:
    """A transport that calls ``algorithm(team, *arrays)``: for collectives that have one."""
    return functools.partial(_spread, algorithm)


async def _spread(algorithm: Callable[..., Awaitable[None]], team: Team,
                  arguments: tuple[Any, ...]) -> None:
    await algorithm(team, *arguments)


async def _all_reduce(signature: Signature, algorithm: str, scratch: Scratch, team: Team,
                      array: Any) -> None:
    """The all_reduce of ``array``; compressed, of ``array``'s (data, residual or None)."""
    op = signature.op
    assert op is not None
    if signature.compression is not None:
        (mode, block), (data, residual) = signature.compression, array
        await compressed_ring_all_reduce(team, data, op, codec(mode, data.dtype, block),
                                         selection.SEGMENT_BYTES, residual)
    elif algorithm == "ring":
        room = scratch(array.dtype, all_reduce_scratch_elements(array.size, team.size))
        await ring_all_reduce(team, array, op, room, selection.SEGMENT_BYTES)
    else:
        await recursive_doubling_all_reduce(team, array, op, scratch(array.dtype, array.size))


async def _reduce(signature: Signature, algorithm: str, scratch: Scratch, team: Team,
                  array: NDArray[Any]) -> None:
    op, root = signature.op, signature.root
    assert op is not None
    if algorithm == "chain":
        await chain_reduce(team, array, op, root, scratch(array.dtype, array.size),
                           selection.SEGMENT_BYTES)
    else:
        await tree_reduce(team, array, op, root, scratch(array.dtype, 2 * array.size))


async def _broadcast(signature: Signature, algorithm: str, scratch: Scratch, team: Team,
                     array: NDArray[Any]) -> None:
    if algorithm == "chain":
        await chain_broadcast(team, array, signature.root, selection.SEGMENT_BYTES)
    else:
        await tree_broadcast(team, array, signature.root)


async def _reduce_scatter(signature: Signature, algorithm: str, scratch: Scratch, team: Team,
                          arrays: tuple[NDArray[Any], list[NDArray[Any]]]) -> None:
    """Reduce block i of every member's input into member i's result (arrays: result, blocks)."""
    op, sizes, me = signature.op, signature.sizes, team.me
    assert op is not None
    result, blocks = arrays
    partial = sum(sizes) - sizes[me]
    room = scratch(result.dtype, partial + ring_scratch_elements(sizes))
    accumulators, offset = [], 0
    for i, size in enumerate(sizes):
        if i == me:
            accumulators.append(result)
        else:
            accumulators.append(room[offset:offset + size])
            offset += size
    await ring_reduce_scatter(team, blocks, accumulators, op, room[partial:],
                              selection.SEGMENT_BYTES)
    finish(op, result, team.size)


async def _all_gather(signature: Signature, algorithm: str, scratch: Scratch, team: Team,
                      arrays: tuple[list[NDArray[Any]], NDArray[Any]]) -> None:
    """Copy member i's source into output i everywhere (arrays: outputs, source)."""
    outputs, source = arrays
    mine = outputs[team.me]
    if not (mine.size and np.shares_memory(mine, source)
            and mine.__array_interface__ == source.__array_interface__):
        np.copyto(mine, source)
    await ring_all_gather(team, outputs, selection.SEGMENT_BYTES)


async def _barrier(signature: Signature, algorithm: str, scratch: Scratch, team: Team,
                   nothing: None) -> None:
    """A recursive-doubling all-reduce (MAX) of one zero byte (a barrier moves no data)."""
    token = np.zeros(1, dtype=np.uint8)
    await recursive_doubling_all_reduce(team, token, ReduceOp.MAX, scratch(token.dtype, 1))


_ALGORITHMS: dict[str, Callable[..., Awaitable[None]]] = {
    "all_reduce": _all_reduce,
    "reduce": _reduce,
    "broadcast": _broadcast,
    "reduce_scatter": _reduce_scatter,
    "all_gather": _all_gather,
    "barrier": _barrier,
}

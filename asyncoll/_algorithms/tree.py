"""Broadcast and reduce from one root: binomial trees and pipelined chains.

Members are numbered relative to the root (r = (index - root) mod n).

Binomial tree (small arrays): member r receives from r - 2^k, where 2^k is
the lowest set bit of r, and sends to r + 2^j for every smaller j. A
broadcast reaches everyone in ceil(log2 n) latencies; a reduce runs the same
tree upwards, each member combining its own partial (lower relative ranks)
with each child's, in order, so the result does not depend on timing.

Pipelined chain (large arrays): member r receives from r - 1 and passes on
to r + 1 (a reduce runs the other way, from the last member to the root).
The array travels in segments, each forwarded as soon as it arrives, so
after the first segment's n - 1 hops every link is busy and the time is
about one array transfer however many members there are.

Only the root's array changes in a reduce: the others accumulate in scratch.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from numpy.typing import NDArray

from asyncoll._algorithms.ops import combine, finish
from asyncoll._algorithms.segments import segment_bounds
from asyncoll._algorithms.team import Team
from asyncoll.types import ReduceOp


def _relative(team: Team, root: int) -> tuple[int, int]:
    """(this member's rank relative to ``root``, n)."""
    return (team.me - root) % team.size, team.size


def _absolute(team: Team, root: int, relative: int) -> int:
    return (relative + root) % team.size


def _lowest_bit(r: int, n: int) -> int:
    """The mask of r's lowest set bit, or the first power of two >= n for the root."""
    mask = 1
    while mask < n and not r & mask:
        mask <<= 1
    return mask


async def tree_broadcast(team: Team, data: NDArray[Any], root: int) -> None:
    """Copy the root member's ``data`` into every member's ``data`` (binomial tree)."""
    r, n = _relative(team, root)
    if n == 1 or data.size == 0:
        return
    top = _lowest_bit(r, n)
    if r != 0:
        await team.recv(_absolute(team, root, r - top), 0, data)
    mask = top >> 1
    while mask:
        if r + mask < n:
            team.send(_absolute(team, root, r + mask), 0, data)
        mask >>= 1
    await team.flush()


async def tree_reduce(team: Team, data: NDArray[Any], op: ReduceOp, root: int,
                      scratch: NDArray[Any]) -> None:
    """Reduce every member's ``data`` into the root's (binomial tree).

    ``scratch`` holds at least 2 * data.size elements of data's dtype.
    """
    r, n = _relative(team, root)
    if n == 1 or data.size == 0:
        finish(op, data, n)
        return
    top = _lowest_bit(r, n)
    acc = data if r == 0 else scratch[:data.size]
    incoming = scratch[data.size:2 * data.size]
    first = True
    mask = 1
    while mask < top:
        if r + mask < n:
            await team.recv(_absolute(team, root, r + mask), 0, incoming)
            combine(op, data if first else acc, incoming, acc)
            first = False
        mask <<= 1
    if r == 0:
        finish(op, data, n)
        return
    team.send(_absolute(team, root, r - top), 0, data if first else acc)
    await team.flush()


async def chain_broadcast(team: Team, data: NDArray[Any], root: int,
                          segment_bytes: int) -> None:
    """Copy the root member's ``data`` into every member's (pipelined chain)."""
    r, n = _relative(team, root)
    if n == 1:
        return
    segments = segment_bounds(0, data.size, data.itemsize, segment_bytes)
    previous, following = _absolute(team, root, r - 1), _absolute(team, root, r + 1)
    posted: list[Awaitable[None]] = []
    if r != 0:
        posted = [team.recv(previous, j, data[lo:hi]) for j, (lo, hi) in enumerate(segments)]
    for j, (lo, hi) in enumerate(segments):
        if posted:
            await posted[j]
        if r + 1 < n:
            team.send(following, j, data[lo:hi])
    await team.flush()


async def chain_reduce(team: Team, data: NDArray[Any], op: ReduceOp, root: int,
                       scratch: NDArray[Any], segment_bytes: int) -> None:
    """Reduce every member's ``data`` into the root's (pipelined chain).

    Member r's partial is its data combined with the partial of r + 1, so the
    root gets d0 (op) (d1 (op) (... (op) d_{n-1})). ``scratch`` holds at least
    data.size elements of data's dtype.
    """
    r, n = _relative(team, root)
    if n == 1:
        finish(op, data, n)
        return
    segments = segment_bounds(0, data.size, data.itemsize, segment_bytes)
    previous, following = _absolute(team, root, r - 1), _absolute(team, root, r + 1)
    if r == n - 1:
        for j, (lo, hi) in enumerate(segments):
            team.send(previous, j, data[lo:hi])
        await team.flush()
        return
    partial = scratch[:data.size]
    posted = [team.recv(following, j, partial[lo:hi]) for j, (lo, hi) in enumerate(segments)]
    for j, (lo, hi) in enumerate(segments):
        await posted[j]
        if r == 0:
            combine(op, data[lo:hi], partial[lo:hi], data[lo:hi])
        else:
            combine(op, data[lo:hi], partial[lo:hi], partial[lo:hi])
            team.send(previous, j, partial[lo:hi])
    if r == 0:
        finish(op, data, n)
    await team.flush()

"""Collectives through a shared-memory arena, in the calling thread (same-host members).

Operation k of an arena uses the slot set k mod 2 and two phases, ``2k - 1``
and ``2k``:

1. Every member writes its input into its own slot and publishes phase
   2k - 1 with the operation's fingerprint.
2. Once every member has published it, the fingerprints are compared
   (members that called different collectives raise MismatchError before
   reading anything), and each member reads what it needs of the others'
   slots. An all-reduce of a medium array works reduce-scatter style: member
   i writes into its slot only the chunks the others reduce, reduces chunk i
   of every other slot and of its own input, writes the result over chunk i
   of its own slot (no other member reads that chunk of it before phase
   2k), publishes phase 2k, and every member then copies chunk j from
   member j's slot.

Copies are slice assignments between arrays of one dtype (``a[...] = b``):
for a small array they cost a quarter of ``np.copyto``, for a large one the same.

Reductions add the members' contributions in member order 0, 1, ..., n - 1
and each element is reduced by one member (or by every member in the same
order), so every member gets the same bits.

Why this is safe without locks: each member writes only its own slot and
control line. It writes its slot of set k mod 2 again at operation k + 2
only after every member published phase 2k + 1, that is, started operation
k + 1, so finished reading operation k's slots. See
asyncoll._transport.shm.arena for the memory order this relies on.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from asyncoll._algorithms.chunking import chunk_bounds
from asyncoll._algorithms.ops import combine, finish, reduce_into, ufunc_of
from asyncoll._transport.shm.arena import PUBLISHED, Arena, Poll, Waiter
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import MismatchError
from asyncoll.types import ReduceOp

# A module constant: reading an Enum member off its class costs 0.2 us a time.
_AVG = ReduceOp.AVG


def all_reduce(arena: Arena, operation: int, data: np.ndarray, op: ReduceOp,
               fingerprint: Fingerprint, waiter: Waiter, split: bool) -> None:
    """All-reduce the 1-D contiguous array ``data`` in place through ``arena``.

    Args:
        arena: this member's view of the group's arena.
        operation: the operation's number on this arena (1, 2, ...; the same
            on every member, one more each call).
        data: the array; its bytes fit a slot.
        op: the reduce op.
        fingerprint: what this operation is; every member must pass the same.
        waiter: the deadline and failure check of every wait.
        split: reduce-scatter style (True) or every member reducing everything.

    Raises:
        MismatchError: a member published another operation.
        ArenaExpired: the waiter's deadline passed.
    """
    AllReduce(op, data.dtype, data.size, split).run(arena, operation, data, fingerprint,
                                                    waiter)


class AllReduce:
    """:func:`all_reduce` made ready once for arrays of one dtype and size (MPI's
    persistent collective): a group's repeated calls keep one and skip looking
    up their slots, their poll and their ufunc each time.

    Args:
        op: the reduce op.
        dtype, count: the arrays'.
        split: reduce-scatter style (True) or every member reducing everything.
    """

    def __init__(self, op: ReduceOp, dtype: np.dtype, count: int, split: bool) -> None:
        self._op, self._dtype, self._count, self._split = op, dtype, count, split
        self._ufunc = ufunc_of(op)
        self._arena: Arena | None = None
        self._sets: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
        self._poll: Poll | None = None

    def _meet(self, arena: Arena) -> None:
        """Look up what every run on ``arena`` uses (the first run on it)."""
        dtype, count = self._dtype, self._count
        self._sets = (arena.slots(0, dtype, count), arena.slots(1, dtype, count))
        self._poll = arena.all_at_least(PUBLISHED, 0)
        self._arena = arena

    def run(self, arena: Arena, operation: int, data: np.ndarray, fingerprint: Fingerprint,
            waiter: Waiter) -> None:
        """All-reduce ``data`` in place as operation ``operation`` of ``arena``
        (see :func:`all_reduce`)."""
        if arena is not self._arena:
            self._meet(arena)
        n, me = arena.size, arena.me
        slots = self._sets[operation & 1]
        if self._split and n > 1:
            self._split_run(arena, operation, data, slots, fingerprint, waiter)
            return
        slots[me][...] = data
        phase = 2 * operation - 1
        arena.publish(phase, fingerprint)
        poll = self._poll
        assert poll is not None
        poll.phase = phase
        if not poll():
            waiter.until(poll)
        if n == 1:
            data[...] = slots[0]
        else:
            _check_fingerprints(arena, fingerprint, operation)
            # The members' slots in member order, into a third array: no
            # operand is the output (see ops.combine).
            ufunc = self._ufunc
            ufunc(slots[0], slots[1], out=data)
            for slot in slots[2:]:
                ufunc(data, slot, out=data)
        if self._op is _AVG:
            finish(_AVG, data, n)

    def _split_run(self, arena: Arena, operation: int, data: np.ndarray,
                   slots: list[np.ndarray], fingerprint: Fingerprint, waiter: Waiter) -> None:
        """Reduce-scatter style. This member's own chunk is reduced from ``data``
        itself, so only the chunks the others reduce go into its slot first (a
        copy of 1/n of the array saved); the result of its chunk goes straight
        into its slot, which no one reads before phase 2k."""
        n, me = arena.size, arena.me
        mine = slots[me]
        bounds = chunk_bounds(data.size, n)
        for j, (lo, hi) in enumerate(bounds):
            if j != me:
                mine[lo:hi] = data[lo:hi]
        _publish_and_check(arena, operation, fingerprint, waiter)
        lo, hi = bounds[me]
        _reduce_slots(mine[lo:hi], [data[lo:hi] if j == me else slot[lo:hi]
                                    for j, slot in enumerate(slots)], self._op, n)
        arena.publish(2 * operation, fingerprint)
        data[lo:hi] = mine[lo:hi]
        waiter.until(arena.all_at_least(PUBLISHED, 2 * operation))
        for j, (lo, hi) in enumerate(bounds):
            if j != me:
                data[lo:hi] = slots[j][lo:hi]


def reduce(arena: Arena, operation: int, data: np.ndarray, op: ReduceOp, root: int,
           fingerprint: Fingerprint, waiter: Waiter) -> None:
    """Reduce every member's ``data`` into member ``root``'s; the others' stay as they were."""
    slots = _exchange(arena, operation, data, fingerprint, waiter)
    if arena.me == root:
        _reduce_slots(data, slots, op, arena.size)


def broadcast(arena: Arena, operation: int, data: np.ndarray, root: int,
              fingerprint: Fingerprint, waiter: Waiter) -> None:
    """Copy member ``root``'s ``data`` into every member's ``data``."""
    slot = arena.slots(operation, data.dtype, data.size)[root]
    if arena.me == root:
        slot[...] = data
    _publish_and_check(arena, operation, fingerprint, waiter)
    if arena.me != root:
        data[...] = slot


def all_gather(arena: Arena, operation: int, mine: np.ndarray, outputs: Sequence[np.ndarray],
               fingerprint: Fingerprint, waiter: Waiter) -> None:
    """Copy member j's ``mine`` into ``outputs[j]`` on every member (sizes may differ).

    This member's own block is copied from ``mine`` too, unless it is ``mine``.
    """
    me = arena.me
    _exchange(arena, operation, mine, fingerprint, waiter)
    for j, out in enumerate(outputs):
        if j != me:
            out[...] = arena.slots(operation, out.dtype, out.size)[j]
        elif not np.shares_memory(out, mine):
            out[...] = mine


def reduce_scatter(arena: Arena, operation: int, inputs: Sequence[np.ndarray],
                   output: np.ndarray, op: ReduceOp, fingerprint: Fingerprint,
                   waiter: Waiter) -> None:
    """Reduce block i (``inputs[i]``) across the members into member i's ``output``."""
    n, me = arena.size, arena.me
    offsets = [0, *itertools.accumulate(block.size for block in inputs)]
    slots = arena.slots(operation, output.dtype, offsets[-1])
    for block, start in zip(inputs, offsets):
        slots[me][start:start + block.size] = block
    _publish_and_check(arena, operation, fingerprint, waiter)
    lo, hi = offsets[me], offsets[me + 1]
    _reduce_slots(output, [slot[lo:hi] for slot in slots], op, n)


def barrier(arena: Arena, operation: int, fingerprint: Fingerprint, waiter: Waiter) -> None:
    """Return once every member has reached this operation."""
    _publish_and_check(arena, operation, fingerprint, waiter)


# -- the phases ---------------------------------------------------------------------------


def _publish_and_check(arena: Arena, operation: int, fingerprint: Fingerprint,
                       waiter: Waiter) -> None:
    """Publish this member's input phase, wait for everyone's, compare fingerprints."""
    arena.publish(2 * operation - 1, fingerprint)
    waiter.until(arena.all_at_least(PUBLISHED, 2 * operation - 1))
    _check_fingerprints(arena, fingerprint, operation)


def _exchange(arena: Arena, operation: int, data: np.ndarray, fingerprint: Fingerprint,
              waiter: Waiter) -> list[np.ndarray]:
    """Put ``data`` in this member's slot, meet; return every member's slot."""
    slots = arena.slots(operation, data.dtype, data.size)
    slots[arena.me][...] = data
    _publish_and_check(arena, operation, fingerprint, waiter)
    return slots


def _reduce_slots(out: np.ndarray, parts: Sequence[np.ndarray], op: ReduceOp, n: int) -> None:
    """``out`` = parts[0] op parts[1] op ... in member order, then the op's finish (AVG)."""
    count = len(parts)
    if count == 1:
        out[...] = parts[0]
    else:
        combine(op, parts[0], parts[1], out)
        if count > 2:
            for part in parts[2:]:
                reduce_into(op, out, part)
    if op is _AVG:
        finish(op, out, n)


def _check_fingerprints(arena: Arena, mine: Fingerprint, operation: int) -> None:
    member = arena.differs(mine, operation)
    if member is None:
        return
    me, them = arena.ranks[arena.me], arena.ranks[member]
    theirs = Fingerprint(*arena.fingerprint(member, operation))
    raise MismatchError(
        f"ranks {me} and {them} called operation #{operation} of their shared-memory "
        f"arena differently ({'; '.join(mine.differences(theirs, me, them))}): every "
        "rank must call the same collectives in the same order, with the same "
        "arguments")

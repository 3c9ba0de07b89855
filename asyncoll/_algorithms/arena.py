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

An array larger than :data:`WHOLE_UP_TO_BYTES` (or than the slot) goes
through in pieces (:data:`PIECE_BYTES`, at most a slot), one operation
number each: piece p of an operation starting at k is operation k + p, in
the set (k + p) mod 2, so a member writes piece p + 1 while a slower one
still reads piece p, and what one piece touches stays in the processor's
caches. Every function returns the last operation number it used; the
caller's next operation takes the one after.

Copies are slice assignments between arrays of one dtype (``a[...] = b``: for a
small array a quarter of ``np.copyto``'s cost), in steps for a large one (:func:`copy`).

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
from dataclasses import make_dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from asyncoll import _native
from asyncoll._algorithms import arena_steps
from asyncoll._algorithms.arena_steps import check_fingerprints
from asyncoll._algorithms.chunking import chunk_bounds
from asyncoll._algorithms.ops import combine, finish, reduce_into, ufunc_of
from asyncoll._native.contract import COPY_BLOCK_BYTES, PUBLISHED
from asyncoll._transport.shm.arena import Arena, Poll, Waiter
from asyncoll._wire.frames import Fingerprint
from asyncoll.types import ReduceOp

# A module constant: reading an Enum member off its class costs 0.2 us a time.
_AVG = ReduceOp.AVG
# Whether the compiled extension runs (asyncoll._native), once: the pure-Python path
# then pays nothing for asking.
_NATIVE = _native.arena is not None

#: Arrays up to this many bytes go through the arena whole, where a slot holds
#: them; larger ones in pieces of PIECE_BYTES (docs/design/algorithm-choice.md has the
#: measurements these come from) ...
WHOLE_UP_TO_BYTES = 1 << 20
PIECE_BYTES = 512 << 10
#: ... and broadcast's, which only copies, in pieces of this many.
BROADCAST_PIECE_BYTES = 1 << 20


def piece_elements(arena: Arena, itemsize: int, count: int, piece: int = PIECE_BYTES) -> int:
    """Elements of ``itemsize`` bytes in one piece of an array of ``count`` on
    ``arena``: all of them where it goes whole, else at most ``piece`` bytes'
    worth (at least one)."""
    if count * itemsize <= min(WHOLE_UP_TO_BYTES, arena.slot_bytes):
        return max(count, 1)
    return max(1, min(piece, arena.slot_bytes) // itemsize)


def copy(to: NDArray[Any], source: NDArray[Any]) -> None:
    """``to[...] = source``, in steps of :data:`COPY_BLOCK_BYTES` where both are 1-D."""
    if to.nbytes <= COPY_BLOCK_BYTES or to.ndim != 1 or source.ndim != 1:
        to[...] = source
        return
    step = COPY_BLOCK_BYTES // to.itemsize
    for lo in range(0, to.size, step):
        to[lo:lo + step] = source[lo:lo + step]


def pieces(count: int, elements: int) -> list[tuple[int, int]]:
    """``range(count)`` cut into (start, stop) pieces of ``elements`` (one piece when
    it fits, empty or not)."""
    if count <= elements:
        return [(0, count)]
    return [(lo, min(lo + elements, count)) for lo in range(0, count, elements)]


class Step(Protocol):
    """An operation on an arena as a group runs it: where, its number, what it is, its waits.

    :meth:`AllReduce.run` leaves in ``operation`` the last number it used.
    """

    arena: Arena
    operation: int
    fingerprint: Fingerprint
    waiter: Waiter


#: A Step of all_reduce's own.
_Step = make_dataclass("_Step", ["arena", "operation", "fingerprint", "waiter"])


def all_reduce(arena: Arena, operation: int, data: NDArray[Any], op: ReduceOp,
               fingerprint: Fingerprint, waiter: Waiter, split: bool) -> int:
    """All-reduce the 1-D contiguous array ``data`` in place through ``arena``;
    return the last operation number it used.

    Args:
        arena: this member's view of the group's arena.
        operation: the operation's number on this arena (1, 2, ...; the same
            on every member, one more each call).
        data: the array (larger than a piece: in pieces).
        op: the reduce op.
        fingerprint: what this operation is; every member must pass the same.
        waiter: the deadline and failure check of every wait.
        split: reduce-scatter style (True) or every member reducing everything
            (arrays in pieces always split).

    Raises:
        MismatchError: a member published another operation.
        ArenaExpired: the waiter's deadline passed.
    """
    step: Step = _Step(arena, operation, fingerprint, waiter)
    AllReduce(op, data.dtype, data.size, split).run(step, data)
    return step.operation


class AllReduce:
    """:func:`all_reduce` made ready once for arrays of one dtype and size (MPI's
    persistent collective): a group's repeated calls keep one and skip looking
    up their slots, their poll and their ufunc each time.

    Args:
        op: the reduce op.
        dtype, count: the arrays'.
        split: reduce-scatter style (True) or every member reducing everything.
    """

    def __init__(self, op: ReduceOp, dtype: np.dtype[Any], count: int, split: bool) -> None:
        self._op, self._dtype, self._count, self._split = op, dtype, count, split
        self._ufunc = ufunc_of(op)
        #: The compiled extension's code for the reduction, or None (asyncoll._native).
        self._kind = _native.kind(dtype, op)
        #: The arena's compiled steps, where they run these arrays (whole, not split).
        self._core: Any = None
        self._split_kind: int | None = None
        self._arena: Arena | None = None
        self._sets: tuple[list[NDArray[Any]], list[NDArray[Any]]] = ([], [])
        self._poll: Poll | None = None
        #: The pieces of an array that does not go whole (else None), and the
        #: members' chunks of a piece (of the whole array where it goes whole).
        self._pieces: list[tuple[int, int]] | None = None
        self._bounds: list[tuple[int, int]] = []

    def _meet(self, arena: Arena) -> None:
        """Look up what every run on ``arena`` uses (the first run on it)."""
        dtype, count = self._dtype, self._count
        elements = piece_elements(arena, dtype.itemsize, count)
        if count > elements:
            self._pieces = pieces(count, elements)
            count = elements
        self._sets = (arena.slots(0, dtype, count), arena.slots(1, dtype, count))
        self._bounds = chunk_bounds(count, arena.size)
        self._poll = arena.all_at_least(PUBLISHED, 0)
        whole = self._pieces is None and not (self._split and arena.size > 1)
        native = arena.core is not None and self._kind is not None
        self._core = arena.core if whole and native else None
        #: The kind, where the compiled step runs the reduce-scatter style runs (and pieces).
        self._split_kind = self._kind if native and not whole else None
        self._arena = arena
        arena.keep(self)

    def forget(self) -> None:
        """Drop the slots' views :meth:`_meet` took (they would keep a closed arena mapped)."""
        self._arena, self._core, self._poll, self._sets = None, None, None, ([], [])

    def run(self, step: Step, data: NDArray[Any]) -> None:
        """All-reduce ``data`` in place from operation ``step.operation`` on; leave
        the last operation it used there (see :func:`all_reduce`).

        A group's kernel: one call, as every call of a small all_reduce passes here.
        """
        arena, operation = step.arena, step.operation
        if arena is not self._arena:
            self._meet(arena)
        fingerprint, waiter = step.fingerprint, step.waiter
        core = self._core
        if core is not None:
            # The whole array through the compiled step, written out here: every call
            # of a small all_reduce passes this way.
            try:
                status = core.all_reduce(data, operation, fingerprint, self._kind,
                                         waiter.spins)
            except ValueError:
                pass  # not aligned for C: the Python path below runs it
            else:
                if status:
                    self._finish_native(core, arena, operation, data, fingerprint, waiter,
                                        status)
                return
        n, me = arena.size, arena.me
        if self._pieces is not None:
            step.operation = self._run_pieces(arena, operation, data, fingerprint, waiter)
            return
        slots = self._sets[operation & 1]
        if self._split and n > 1:
            kind = self._split_kind
            if kind is not None and arena_steps.split(arena, operation, data, kind,
                                                      fingerprint, waiter):
                return
            self._split_run(arena, operation, data, slots, self._bounds, fingerprint, waiter)
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
            if arena.differs(fingerprint, operation) is not None:
                check_fingerprints(arena, fingerprint, operation)  # says how
            # The members' slots in member order, into a third array: no
            # operand is the output (see ops.combine).
            ufunc = self._ufunc
            ufunc(slots[0], slots[1], out=data)
            for slot in slots[2:]:
                ufunc(data, slot, out=data)
        if self._op is _AVG:
            finish(_AVG, data, n)

    @property
    def whole_kind(self) -> int | None:
        """The compiled reduction's kind where the arena this met last runs the whole
        array through its compiled step (asyncoll._group.express takes such calls), else
        None."""
        return self._kind if self._core is not None else None

    def resume(self, step: Step, started: tuple[NDArray[Any], int]) -> None:
        """Finish an all_reduce of ``started[0]`` that the compiled entry started as
        operation ``step.operation``, whose step returned ``started[1]`` (not DONE)."""
        assert self._core is not None
        self._finish_native(self._core, step.arena, step.operation, started[0],
                            step.fingerprint, step.waiter, started[1])

    def _finish_native(self, core: Any, arena: Arena, operation: int, data: NDArray[Any],
                       fingerprint: Fingerprint, waiter: Waiter, status: int) -> None:
        """Finish the compiled step that returned ``status`` (a member is late, or differs)."""
        kind = self._kind
        arena_steps.finish(arena, operation, fingerprint, waiter, status,
                           lambda: core.all_reduce_out(data, operation, fingerprint, kind))

    def _run_pieces(self, arena: Arena, operation: int, data: NDArray[Any],
                    fingerprint: Fingerprint, waiter: Waiter) -> int:
        """Each piece as its own operation, reduce-scatter style (one member alone
        copies through its slot)."""
        assert self._pieces is not None
        full = self._pieces[0][1]
        for index, (lo, hi) in enumerate(self._pieces):
            number = operation + index
            slots, bounds = self._sets[number & 1], self._bounds
            piece, kind = data[lo:hi], self._split_kind
            if kind is not None and arena_steps.split(arena, number, piece, kind, fingerprint,
                                                      waiter):
                continue
            if hi - lo < full:
                slots = [slot[:hi - lo] for slot in slots]
                bounds = chunk_bounds(hi - lo, arena.size)
            self._split_run(arena, number, piece, slots, bounds, fingerprint, waiter)
        return operation + len(self._pieces) - 1

    def _split_run(self, arena: Arena, operation: int, data: NDArray[Any],
                   slots: list[NDArray[Any]], bounds: list[tuple[int, int]],
                   fingerprint: Fingerprint, waiter: Waiter) -> None:
        """Reduce-scatter style. This member's own chunk is reduced from ``data``
        itself, so only the chunks the others reduce go into its slot first (a
        copy of 1/n of the array saved). The result goes into ``data``, then is
        copied into the slot, which no one reads before phase 2k (a copy writes a
        slot for less than a reduction: :data:`COPY_BLOCK_BYTES`); past the first
        two members, whose chunk member order reads later, the other way round."""
        n, me = arena.size, arena.me
        mine = slots[me]
        for j, (lo, hi) in enumerate(bounds):
            if j != me:
                copy(mine[lo:hi], data[lo:hi])
        _publish_and_check(arena, operation, fingerprint, waiter)
        lo, hi = bounds[me]
        own = data[lo:hi]
        parts = [own if j == me else slot[lo:hi] for j, slot in enumerate(slots)]
        if me < 2:
            _reduce_slots(own, parts, self._op, n)
            copy(mine[lo:hi], own)
            arena.publish(2 * operation, fingerprint)
        else:
            _reduce_slots(mine[lo:hi], parts, self._op, n)
            arena.publish(2 * operation, fingerprint)
            copy(own, mine[lo:hi])
        waiter.until(arena.all_at_least(PUBLISHED, 2 * operation))
        for j, (lo, hi) in enumerate(bounds):
            if j != me:
                copy(data[lo:hi], slots[j][lo:hi])


def reduce(arena: Arena, operation: int, data: NDArray[Any], op: ReduceOp, root: int,
           fingerprint: Fingerprint, waiter: Waiter) -> int:
    """Reduce every member's ``data`` into member ``root``'s; the others' stay as they were.

    Returns the last operation number used, as every function here does.
    """
    cut = _cut(arena, data, PIECE_BYTES)
    if cut is None:
        _reduce_once(arena, operation, data, op, root, fingerprint, waiter)
        return operation
    for number, (lo, hi) in enumerate(cut, start=operation):
        _reduce_once(arena, number, data[lo:hi], op, root, fingerprint, waiter)
    return operation + len(cut) - 1


def _reduce_once(arena: Arena, operation: int, data: NDArray[Any], op: ReduceOp, root: int,
                 fingerprint: Fingerprint, waiter: Waiter) -> None:
    """:func:`reduce` of an array that fits a slot, as one operation."""
    kind = _native.kind(data.dtype, op) if arena.core is not None else None
    if kind is not None and arena_steps.reduce(arena, operation, data, kind, root,
                                               fingerprint, waiter):
        return
    slots = _exchange(arena, operation, data, fingerprint, waiter)
    if arena.me == root:
        _reduce_slots(data, slots, op, arena.size)


def broadcast(arena: Arena, operation: int, data: NDArray[Any], root: int,
              fingerprint: Fingerprint, waiter: Waiter) -> int:
    """Copy member ``root``'s ``data`` into every member's ``data``."""
    cut = _cut(arena, data, BROADCAST_PIECE_BYTES)
    if cut is None:
        _broadcast_once(arena, operation, data, root, fingerprint, waiter)
        return operation
    for number, (lo, hi) in enumerate(cut, start=operation):
        _broadcast_once(arena, number, data[lo:hi], root, fingerprint, waiter)
    return operation + len(cut) - 1


def _broadcast_once(arena: Arena, operation: int, data: NDArray[Any], root: int,
                    fingerprint: Fingerprint, waiter: Waiter) -> None:
    """:func:`broadcast` of an array that fits a slot, as one operation."""
    if arena.core is not None and arena_steps.broadcast(arena, operation, data, root,
                                                        fingerprint, waiter):
        return
    slot = arena.slots(operation, data.dtype, data.size)[root]
    if arena.me == root:
        copy(slot, data)
    _publish_and_check(arena, operation, fingerprint, waiter)
    if arena.me != root:
        copy(data, slot)


def all_gather(arena: Arena, operation: int, mine: NDArray[Any], outputs: Sequence[NDArray[Any]],
               fingerprint: Fingerprint, waiter: Waiter) -> int:
    """Copy member j's ``mine`` into ``outputs[j]`` on every member (sizes may differ).

    This member's own block is copied from ``mine`` too, unless it is ``mine``.
    Pieces cut every member's block at the same offsets.
    """
    me = arena.me
    longest = max(out.size for out in outputs)
    elements = piece_elements(arena, mine.dtype.itemsize, longest)
    if elements >= longest:
        if arena.core is not None and arena_steps.all_gather(arena, operation, mine, outputs,
                                                             fingerprint, waiter):
            return operation
        _exchange(arena, operation, mine, fingerprint, waiter)
        for j, out in enumerate(outputs):
            if j != me:
                copy(out, arena.slots(operation, out.dtype, out.size)[j])
            elif not np.shares_memory(out, mine):
                out[...] = mine
        return operation
    cut = pieces(longest, elements)
    for number, (lo, hi) in enumerate(cut, start=operation):
        _exchange(arena, number, mine[lo:hi], fingerprint, waiter)
        for j, out in enumerate(outputs):
            if j != me and out.size > lo:
                part = out[lo:hi]
                copy(part, arena.slots(number, out.dtype, part.size)[j])
    if not np.shares_memory(outputs[me], mine):
        outputs[me][...] = mine
    return operation + len(cut) - 1


def reduce_scatter(arena: Arena, operation: int, inputs: Sequence[NDArray[Any]],
                   output: NDArray[Any], op: ReduceOp, fingerprint: Fingerprint,
                   waiter: Waiter) -> int:
    """Reduce block i (``inputs[i]``) across the members into member i's ``output``.

    A piece holds the same stretch of every block, one after another.
    """
    n = arena.size
    longest = max(block.size for block in inputs)
    # A slot holds a piece of every block.
    whole = piece_elements(arena, output.dtype.itemsize, n * longest)
    if whole >= n * longest:
        _reduce_scatter_once(arena, operation, inputs, output, op, fingerprint, waiter)
        return operation
    cut = pieces(longest, max(1, whole // n))
    for index, (lo, hi) in enumerate(cut):
        _reduce_scatter_once(arena, operation + index, [block[lo:hi] for block in inputs],
                             output[lo:hi], op, fingerprint, waiter)
    return operation + len(cut) - 1


def _reduce_scatter_once(arena: Arena, operation: int, inputs: Sequence[NDArray[Any]],
                         output: NDArray[Any], op: ReduceOp, fingerprint: Fingerprint,
                         waiter: Waiter) -> None:
    """:func:`reduce_scatter` of blocks that fit a slot together, as one operation."""
    n, me = arena.size, arena.me
    offsets = [0, *itertools.accumulate(block.size for block in inputs)]
    slots = arena.slots(operation, output.dtype, offsets[-1])
    for block, start in zip(inputs, offsets):
        copy(slots[me][start:start + block.size], block)
    _publish_and_check(arena, operation, fingerprint, waiter)
    lo, hi = offsets[me], offsets[me + 1]
    _reduce_slots(output, [slot[lo:hi] for slot in slots], op, n)


def barrier(arena: Arena, operation: int, fingerprint: Fingerprint, waiter: Waiter) -> int:
    """Return once every member has reached this operation."""
    if arena.core is not None:
        arena_steps.barrier(arena, operation, fingerprint, waiter)
    else:
        _publish_and_check(arena, operation, fingerprint, waiter)
    return operation


def resume_barrier(step: Step, started: tuple[None, int]) -> None:
    """Finish a barrier that the compiled entry started as operation ``step.operation``,
    whose step returned ``started[1]`` (not DONE)."""
    arena_steps.finish_barrier(step.arena, step.operation, step.fingerprint, step.waiter,
                               started[1])


# -- the phases ---------------------------------------------------------------------------


def _publish_and_check(arena: Arena, operation: int, fingerprint: Fingerprint,
                       waiter: Waiter) -> None:
    """Publish this member's input phase, wait for everyone's, compare fingerprints."""
    arena.publish(2 * operation - 1, fingerprint)
    waiter.until(arena.all_at_least(PUBLISHED, 2 * operation - 1))
    check_fingerprints(arena, fingerprint, operation)


def _cut(arena: Arena, data: NDArray[Any], piece: int) -> list[tuple[int, int]] | None:
    """The (start, stop) pieces of ``data``, or None where it goes whole (most calls)."""
    count = data.size
    elements = piece_elements(arena, data.dtype.itemsize, count, piece)
    return None if elements >= count else pieces(count, elements)


def _exchange(arena: Arena, operation: int, data: NDArray[Any], fingerprint: Fingerprint,
              waiter: Waiter) -> list[NDArray[Any]]:
    """Put ``data`` in this member's slot, meet; return every member's slot."""
    slots = arena.slots(operation, data.dtype, data.size)
    copy(slots[arena.me], data)
    _publish_and_check(arena, operation, fingerprint, waiter)
    return slots


def _reduce_slots(out: NDArray[Any], parts: Sequence[NDArray[Any]], op: ReduceOp, n: int) -> None:
    """``out`` = parts[0] op parts[1] op ... in member order, then the op's finish (AVG)."""
    if _NATIVE and arena_steps.reduce_parts(out, parts, op, n):
        return
    if len(parts) == 1:
        out[...] = parts[0]
    else:
        combine(op, parts[0], parts[1], out)
        for part in parts[2:]:
            reduce_into(op, out, part)
    if op is _AVG:
        finish(op, out, n)

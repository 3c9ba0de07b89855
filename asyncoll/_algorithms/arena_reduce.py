"""All-reduce through a shared-memory arena, in the calling thread (same-host members).

Operation k uses two phases, ``2k - 1`` and ``2k``:

1. Every member waits until every slot of operation k - 1 has been read
   (all RELEASED >= 2k - 2), writes its array into its own slot and
   publishes phase 2k - 1 with the operation's fingerprint.
2. Once every member has published it, the fingerprints are compared
   (members that called different collectives raise MismatchError before
   reading anything), then:

   - *whole* (small arrays): every member reduces all slots, in member
     order 0, 1, ..., n - 1, into its own array: one synchronization, and
     every member computes the same expression, so gets the same bits;
   - *split* (medium arrays, reduce-scatter style): member i reduces only
     chunk i of every slot, in member order, and writes the result over
     chunk i of its own slot (no other member reads that chunk of it: they
     read their own chunks), publishes phase 2k; once all have, every
     member copies chunk j from member j's slot. Each element is reduced
     once, by one member, so the work is split n ways.

3. It releases phase 2k: the slots may be overwritten by operation k + 1.

Why this is safe without locks: each member writes only its own slot and
control line, and writes a slot only after every member released the last
phase that read it; see arena.py for the memory order this relies on.
"""

from __future__ import annotations

import numpy as np

from asyncoll._algorithms.chunking import chunk_bounds
from asyncoll._algorithms.ops import finish, reduce_into
from asyncoll._transport.shm.arena import PUBLISHED, RELEASED, Arena, Waiter
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import MismatchError
from asyncoll.types import ReduceOp


def arena_all_reduce(arena: Arena, operation: int, data: np.ndarray, op: ReduceOp,
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
    n, me = arena.size, arena.me
    inputs, outputs = 2 * operation - 1, 2 * operation
    waiter.until(arena.all_at_least(RELEASED, inputs - 1))
    arena.slot(me, data.dtype, data.size)[:] = data
    arena.publish(inputs, fingerprint)
    waiter.until(arena.all_at_least(PUBLISHED, inputs))
    _check_fingerprints(arena, fingerprint, operation)
    slots = [arena.slot(j, data.dtype, data.size) for j in range(n)]
    if not split or n == 1:
        data[:] = slots[0]
        for j in range(1, n):
            reduce_into(op, data, slots[j])
        finish(op, data, n)
    else:
        bounds = chunk_bounds(data.size, n)
        lo, hi = bounds[me]
        chunk = data[lo:hi]
        chunk[:] = slots[0][lo:hi]
        for j in range(1, n):
            reduce_into(op, chunk, slots[j][lo:hi])
        finish(op, chunk, n)
        slots[me][lo:hi] = chunk
        arena.publish(outputs, fingerprint)
        waiter.until(arena.all_at_least(PUBLISHED, outputs))
        for j, (lo, hi) in enumerate(bounds):
            if j != me:
                data[lo:hi] = slots[j][lo:hi]
    arena.release(outputs)


def _check_fingerprints(arena: Arena, mine: Fingerprint, operation: int) -> None:
    me = arena.ranks[arena.me]
    for member, row in enumerate(arena.fingerprints()):
        theirs = Fingerprint(*row)
        if theirs != mine:
            them = arena.ranks[member]
            raise MismatchError(
                f"ranks {me} and {them} called operation #{operation} of their shared-memory "
                f"arena differently ({'; '.join(mine.differences(theirs, me, them))}): every "
                "rank must call the same collectives in the same order, with the same "
                "arguments")

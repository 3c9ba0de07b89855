"""The arena's steps through the compiled extension, and the check both paths share.

Where :mod:`asyncoll._native` is built, an arena carries a ``core`` whose
steps (all_reduce whole or reduce-scatter style, reduce, broadcast,
all_gather, barrier) each do in one call into C what
their pure-Python twins in :mod:`asyncoll._algorithms.arena` do: copy in,
publish, wait briefly with the GIL released, compare fingerprints, reduce
in member order, copy out. A step returns DONE, WAITING (a member is late:
the group's :class:`Waiter` takes over, with its checks and sleeps, then the
step's ``*_out`` call finishes) or MISMATCH (the Python check below then
raises, saying how): asyncoll._native.contract's statuses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from numpy.typing import NDArray

from asyncoll import _native
from asyncoll._algorithms.desync import out_of_step
from asyncoll._native.contract import BRIEF_YIELDS, DONE, MISMATCH, PUBLISHED, WAITING
from asyncoll._transport.shm.arena import Arena, Waiter
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import CollectiveError
from asyncoll.types import ReduceOp

#: A reduce-scatter step's brief wait spins this many times as long as the others':
#: between its meetings each member copies and reduces up to a slot's worth, so they
#: arrive further apart, and a wait the brief one misses costs a return to Python
#: and a call back, twice a piece. (No spins where members outnumber processors.)
SPLIT_SPINS = 16


def finish(arena: Arena, operation: int, fingerprint: Fingerprint, waiter: Waiter,
           status: int, out: Callable[[], int]) -> None:
    """Finish a compiled step that returned ``status`` (not DONE): wait, then ``out()``.

    Raises:
        MismatchError: a member published another operation.
        Whatever the waiter raises (ArenaExpired, a lost peer, ...).
    """
    if status == WAITING:
        # The step's brief wait is spent: the waiter goes on from its yields.
        waiter.until(arena.all_at_least(PUBLISHED, 2 * operation - 1),
                     waiter.spins + BRIEF_YIELDS)
        status = out()
    if status == MISMATCH:
        mismatched(arena, fingerprint, operation)


def split(arena: Arena, operation: int, data: NDArray[Any], kind: int,
          fingerprint: Fingerprint, waiter: Waiter) -> bool:
    """All-reduce ``data`` (it fits a slot) reduce-scatter style in C, as
    AllReduce._split_run does; False, having done nothing, where C does not take it."""
    core, spins = arena.core, waiter.spins * SPLIT_SPINS
    try:
        status = core.split(data, operation, fingerprint, kind, spins, 0)
    except ValueError:
        return False  # not aligned for C: the Python path runs it
    while status:
        if status == MISMATCH:
            mismatched(arena, fingerprint, operation)
        # Waiting for the inputs (phase 2k - 1) or for the results (2k), then on: the
        # waiter yields and sleeps as after any brief wait.
        waited = status == WAITING
        waiter.until(arena.all_at_least(PUBLISHED, 2 * operation - waited),
                     waiter.spins + BRIEF_YIELDS)
        status = core.split(data, operation, fingerprint, kind, spins, 1 if waited else 2)
    return True


def broadcast(arena: Arena, operation: int, data: NDArray[Any], root: int,
              fingerprint: Fingerprint, waiter: Waiter) -> bool:
    """Broadcast ``data`` (it fits a slot) from member ``root`` in C; False: not taken."""
    core = arena.core
    try:
        status = core.broadcast(data, operation, fingerprint, root, waiter.spins)
    except ValueError:
        return False  # a buffer C does not take: the Python path runs it
    if status:
        finish(arena, operation, fingerprint, waiter, status,
               lambda: core.broadcast_out(data, operation, fingerprint, root))
    return True


def reduce(arena: Arena, operation: int, data: NDArray[Any], kind: int, root: int,
           fingerprint: Fingerprint, waiter: Waiter) -> bool:
    """Reduce every member's ``data`` (it fits a slot) into member ``root``'s, in C;
    False, having done nothing, where C does not take it."""
    core = arena.core
    try:
        status = core.reduce(data, operation, fingerprint, kind, root, waiter.spins)
    except ValueError:
        return False
    if status:
        finish(arena, operation, fingerprint, waiter, status,
               lambda: core.reduce_out(data, operation, fingerprint, kind, root))
    return True


def all_gather(arena: Arena, operation: int, mine: NDArray[Any],
               outputs: Sequence[NDArray[Any]], fingerprint: Fingerprint,
               waiter: Waiter) -> bool:
    """Member j's ``mine`` (each fits a slot) into ``outputs[j]`` on every member, in C;
    False, having done nothing, where C does not take them."""
    core = arena.core
    try:
        status = core.all_gather(mine, outputs, operation, fingerprint, waiter.spins)
    except ValueError:
        return False
    if status:
        finish(arena, operation, fingerprint, waiter, status,
               lambda: core.all_gather_out(mine, outputs, operation, fingerprint))
    return True


def barrier(arena: Arena, operation: int, fingerprint: Fingerprint, waiter: Waiter) -> None:
    """Meet every member at ``operation``, in C."""
    status = arena.core.barrier(None, operation, fingerprint, waiter.spins)
    if status:
        finish_barrier(arena, operation, fingerprint, waiter, status)


def finish_barrier(arena: Arena, operation: int, fingerprint: Fingerprint, waiter: Waiter,
                   status: int) -> None:
    """Finish a compiled barrier step that returned ``status`` (not DONE)."""
    core = arena.core
    finish(arena, operation, fingerprint, waiter, status,
           lambda: DONE if core.same(operation, fingerprint) else MISMATCH)


def reduce_parts(out: NDArray[Any], parts: Sequence[NDArray[Any]], op: ReduceOp,
                 members: int) -> bool:
    """``out`` = parts[0] op parts[1] op ..., then AVG's divide by ``members``, in one
    pass over memory in C; False, having done nothing, where C does not compute it."""
    kind = _native.kind(out.dtype, op)
    if kind is None:
        return False
    try:
        _native.arena.reduce(kind, out, parts, members)
    except ValueError:
        return False  # not aligned for C: numpy computes it
    return True


def mismatched(arena: Arena, mine: Fingerprint, operation: int) -> None:
    """Raise the MismatchError of a step that found another member's fingerprint."""
    check_fingerprints(arena, mine, operation)
    # The fields of an operation do not change until every member has started the next.
    raise CollectiveError(f"operation #{operation} of the arena saw a member's fingerprint "
                          "differ from this member's, and then agree: the arena's memory is "
                          "written by something else")


def check_fingerprints(arena: Arena, mine: Fingerprint, operation: int) -> None:
    """Raise MismatchError if another member published another fingerprint for ``operation``."""
    member = arena.differs(mine, operation)
    if member is None:
        return
    me, them = arena.ranks[arena.me], arena.ranks[member]
    theirs = Fingerprint(*arena.fingerprint(member, operation))
    raise out_of_step(me, them, operation, "their shared-memory arena", mine, theirs)

"""GroupArena: a same-host group's shared-memory arena, and what its operations share.

A group whose members all run on one host (and where shared memory is on,
on x86-64) gets an arena the first time one of its collectives picks the
arena algorithm: every member's slot and control line in one segment
(asyncoll._transport.shm.arena). Its operations then run in the calling
thread, with no event loop, socket or thread hop on the way
(asyncoll._algorithms.arena).

Setting up runs inside that first operation, on the loop, over the
transport: member 0 creates the segment and broadcasts its name and slot
size, the others map it, and an all-reduce of "mapped" flags tells every
member whether all did. Then member 0 unlinks the name, so nothing is left in /dev/shm even
after kill -9 (the memory lives on while mapped); only member 0 killed
during the set-up leaves it, named after its pid, which asyncoll-run sweeps.
If any member could not map it (a full /dev/shm, a hostname shared by two
machines), every member knows, and the group keeps the transport's
algorithms: ranks always agree on the path.

While an operation waits for a peer in the arena, between polls it checks
(:meth:`GroupArena.check`) what the loop has learned (a lost peer, an ABORT:
the group's sticky error), whether a member gave up on this operation (its
control line says so), whether every member's process still exists, and
whether the operation was cancelled.

The slot size: by default member 0 takes the largest of 8 MiB, 4, 2 and
1 MiB whose segment leaves three quarters of /dev/shm's free room to
everything else (other groups' arenas, shared-memory rings, other
programs), and 1 MiB where none does (docker's 64 MB /dev/shm with 4
members) or the room is unknown; ``ASYNCOLL_ARENA_BYTES`` sets it exactly.
Arrays larger than 1 MiB or than the slot go through in pieces
(asyncoll._algorithms.arena.PIECE_BYTES), so an arena runs an
operation of any size: which collectives take it, and up to what size, is
selection.UP_TO_BYTES, the same on every member whatever slot was made.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll import _native
from asyncoll._algorithms import arena as in_arena
from asyncoll._algorithms import selection
from asyncoll._algorithms.doubling import recursive_doubling_all_reduce
from asyncoll._algorithms.team import Team
from asyncoll._algorithms.tree import tree_broadcast
from asyncoll._defaults import ABANDON_WORDS_S
from asyncoll._group.closing import close_under, destroyed
from asyncoll._group.context import Membership
from asyncoll._group.faults import named_by
from asyncoll._group.processors import processors
from asyncoll._group.plan import Kernel, Signature, Transport
from asyncoll._transport.shm import segment
from asyncoll._transport.shm.arena import (
    OVERSUBSCRIBED_YIELDS,
    SPINS,
    YIELDS,
    Arena,
    ArenaExpired,
    Poll,
    Waiter,
    arena_bytes,
)
from asyncoll._policy import ARENA_SLOT_FLOOR_BYTES
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import (
    AsyncollError,
    CollectiveError,
    PeerLostError,
    code_of_number,
    error_number,
)
from asyncoll.types import ReduceOp

log = logging.getLogger("asyncoll")

#: Bytes of the broadcast that carries the segment's name, then its slot size.
_NAME_BYTES = 64
#: The share of /dev/shm's free room one group's arena may take by default.
_ROOM_SHARE = 4


def _unheeded() -> bool:
    """Strangers, for a group with a processor per member: its waits keep yielding
    (a DDP step's compute threads beside it ran slower when they slept instead)."""
    return False


def slot_for(members: int, largest: int, room: int | None) -> int:
    """The slot of a new arena for ``members``, sized to /dev/shm's free ``room``.

    The largest of ``largest``, its half, quarter ... down to
    ARENA_SLOT_FLOOR_BYTES whose segment takes at most a quarter of
    ``room``; the floor where none does or ``room`` is unknown (None).
    """
    floor = min(largest, ARENA_SLOT_FLOOR_BYTES)
    if room is None:
        return floor
    slot = largest
    while slot > floor and arena_bytes(members, slot) > room // _ROOM_SHARE:
        slot //= 2
    return max(slot, floor)


@dataclass(slots=True)
class ArenaStep:
    """One operation on the arena: what its algorithm is given.

    A group reuses one, operation after operation (they run one at a time,
    under the arena's lock): making objects costs microseconds here. Its
    fields are slots, which the compiled entry reads and writes itself
    (asyncoll/_native/field.c).
    """

    arena: Arena
    #: The operation's number on this arena (1, 2, ...), the same on every member.
    operation: int
    fingerprint: Fingerprint
    waiter: Waiter
    #: Set by another thread to make the waits give up (the operation was cancelled).
    cancelled: bool = False


class GroupArena:
    """A group's arena: whether it can have one, setting it up, checks while waiting.

    For a group whose members all run on one host (see fast_path_of).

    Args:
        session: this process's membership in the job.
        group_id: the group.
        ranks: its members' global ranks, in group-rank order.
    """

    #: The algorithm name selection gives operations on this path.
    algorithm = "arena"
    #: The phases (Team.phase) of the set-up's operation it uses.
    set_up_phases = 2

    def __init__(self, session: Membership, group_id: int, ranks: tuple[int, ...]) -> None:
        self._session = session
        self._group_id = group_id
        self._ranks = ranks
        #: The largest slot the arena may have (0: this group has no arena and never will).
        self.slot_bytes = session.policy.arena_slot_bytes if session.rank in ranks else 0
        self._sized_to_room = session.policy.arena_sized_to_room
        self.arena: Arena | None = None
        #: Whether the arena is mapped, so operations may run in the calling thread
        #: (an attribute, not a property: every call on the path reads it).
        self.ready = False
        self._step: ArenaStep | None = None
        #: Held by the thread running an operation on the arena, for its length (the
        #: compiled one where it is built: the compiled entry takes it from C).
        self.lock: threading.Lock | _native.arena.PathLock = threading.Lock() \
            if _native.arena is None else _native.arena.PathLock()
        #: Set once the group is closed here: operations give up, and the arena is
        #: unmapped as soon as none runs (asyncoll._group.closing).
        self.closing = False

    @property
    def capacity(self) -> int:
        """The largest operation (bytes) operations choose the arena for; 0: none.

        Any size, in pieces, where the group may have an arena at all.
        """
        return selection.ANY_SIZE if self.slot_bytes else 0

    @property
    def up_to(self) -> Mapping[str, int]:
        """The largest operation each collective chooses the arena for."""
        return selection.UP_TO_BYTES[selection.ARENA]

    @property
    def deadline(self) -> float:
        """The deadline of the latest arena operation (time.monotonic; 0.0: none yet)."""
        step = self._step
        return step.waiter.deadline if step is not None else 0.0

    @property
    def undecided(self) -> bool:
        """Whether the next arena operation must set the arena up first."""
        return self.slot_bytes > 0 and self.arena is None

    async def set_up(self, team: Team) -> None:
        """Make or map the arena with every member (inside the first arena operation).

        Afterwards either :attr:`ready`, or :attr:`slot_bytes` is 0 on every member.
        """
        memory = None
        # The name, then the slot size (int64): member 0 decides both.
        message = np.zeros(_NAME_BYTES + 8, dtype=np.uint8)
        created = ""
        try:
            if team.me == 0:
                slot = (slot_for(team.size, self.slot_bytes, segment.room())
                        if self._sized_to_room else self.slot_bytes)
                message[_NAME_BYTES:] = np.array([slot], dtype="<i8").view(np.uint8)
                size = arena_bytes(team.size, slot)
                try:
                    created = segment.new_name()
                    memory = segment.create(created, size)
                    message[:len(created)] = np.frombuffer(created.encode(), dtype=np.uint8)
                except OSError as exc:
                    log.info("no shared-memory arena for group %d (%d bytes): %s",
                             self._group_id, size, exc)
            await tree_broadcast(team.phase(0), message, 0)
            text = bytes(message[:_NAME_BYTES]).rstrip(b"\0").decode()
            slot = int(message[_NAME_BYTES:].view("<i8")[0])
            size = arena_bytes(team.size, slot)
            if team.me != 0 and text:
                try:
                    memory = segment.attach_shared(text, size)
                except (OSError, ValueError) as exc:
                    log.info("cannot map group %d's arena %s: %s", self._group_id, text, exc)
            mapped = np.array([memory is not None], dtype=np.uint8)
            await recursive_doubling_all_reduce(team.phase(1), mapped, ReduceOp.MIN,
                                                np.empty(1, dtype=np.uint8))
        except BaseException:
            if memory is not None:
                memory.close()
            raise
        finally:
            # Once the flags are reduced, every member has mapped it or given up;
            # if the set-up failed, the name must not outlive it either.
            if created:
                segment.unlink(created)
        if mapped[0]:
            assert memory is not None
            self.arena = Arena(memory, team.size, team.me, slot, self._ranks)
            self.ready = True
            if self.closing:  # closed during the set-up: nothing may be left mapped
                self.let_go()
            elif team.me == 0:
                _native.warn_once()  # where the compiled steps should run and cannot
        else:
            if memory is not None:
                memory.close()
            self.slot_bytes = 0

    def kernel(self, signature: Signature, algorithm: str, transport: Transport) -> Kernel:
        """The arena's algorithm for calls of ``signature``: (step, arrays) -> None.

        It stands in for the transport's ``algorithm`` (``transport``), which
        the arena does not need.
        """
        return _KERNELS[signature.collective](signature)

    def step(self, fingerprint: Fingerprint, limit: float, started: int = 0) -> ArenaStep:
        """The next operation on the arena, or operation ``started`` that the compiled
        entry started on it (0: none), with its deadline ``limit`` seconds from now."""
        step = self._step
        if step is None:
            arena = self.arena
            if arena is None:
                raise destroyed(self._group_id, 0)
            crowded = len(self._ranks) > processors()
            step = self._step = ArenaStep(arena, 0, fingerprint, Waiter(
                0.0, self.check, 0 if crowded else SPINS, arena.rest,
                arena.core.wait if arena.core is not None else None,
                OVERSUBSCRIBED_YIELDS if crowded else YIELDS,
                arena.strangers_running if crowded else _unheeded,
                arena.core.yields_to_stranger if arena.core is not None else None))
        step.operation = started or step.operation + 1
        step.fingerprint = fingerprint
        step.cancelled = False
        step.waiter.deadline = time.monotonic() + limit
        return step

    def compiled(self) -> tuple[Any, ArenaStep] | None:
        """The arena's compiled steps and its step, where an operation ran on the arena
        and the compiled steps run it (asyncoll._group.express); else None."""
        arena, step = self.arena, self._step
        if arena is None or arena.core is None or step is None:
            return None
        return arena.core, step

    def check(self, poll: Poll) -> None:
        """Raise what stops the operation from waiting for ``poll`` any longer (see the module)."""
        step = self._step
        assert step is not None
        if self.closing:
            raise destroyed(self._group_id, step.operation)
        if step.cancelled:
            raise CollectiveError(f"operation #{step.operation} of group {self._group_id}'s "
                                  "arena was cancelled")
        self._session.check_open(f"an operation of group {self._group_id}")
        first = self._session.faults.stopping(self._group_id)
        if first is not None:
            # The group broke while this operation ran: its error is the operation's
            # (later calls get GroupBrokenError), as for an operation on the loop.
            raise first
        arena = step.arena
        me = os.getpid()
        mesh = self._session.mesh
        for member in poll.behind():
            rank = self._ranks[member]
            mesh.awaiting(rank)  # a frozen process exists: the keepalive finds it
            left = self._session.faults.left(rank)
            if left is not None:
                raise copy.copy(left)
            pid = arena.pid(member)
            if pid and pid != me and not _alive(pid):
                host = mesh.hostname(rank)
                raise PeerLostError(f"rank {rank} on host {host} was lost: its process "
                                    f"(pid {pid}) is gone", rank=rank, host=host)
        gave_up = arena.abandoned()
        if gave_up is not None and gave_up[0] != arena.me:
            # The giver-up's own words come over the mesh (its ABORT frames): they say
            # why (which field of a desync, say), where the control line cannot.
            until = time.monotonic() + ABANDON_WORDS_S
            while time.monotonic() < min(until, step.waiter.deadline):
                first = self._session.faults.stopping(self._group_id)
                if first is not None:
                    raise first
                time.sleep(0.001)
            member, operation, number, named, waited_ms = gave_up
            raise self._session.faults.gave_up(
                self._group_id, operation, self._ranks[member], code_of_number(number), named,
                where=" (its shared-memory arena)", waited=waited_ms / 1000)

    def expired(self, exc: BaseException) -> list[int] | None:
        """The member indices a deadline's expiry (``exc``) waited for; None for other errors."""
        return exc.behind if isinstance(exc, ArenaExpired) else None

    def failure(self, exc: BaseException) -> AsyncollError | None:
        """Nothing: the arena's waits raise asyncoll errors themselves."""
        return None

    def abandon(self, step: ArenaStep, error: BaseException) -> None:
        """Tell the other members, through the arena, that this member gave up on ``step``."""
        number = error_number(type(error)) if isinstance(error, AsyncollError) else \
            error_number(CollectiveError)
        named, waited = named_by(error)
        step.arena.abandon(step.operation, number, named, round(waited * 1000))

    def close(self) -> None:
        """Unmap the arena (its group is destroyed, or the session closes), once no
        operation runs on it (asyncoll._group.closing)."""
        self.closing = True
        self.ready = False
        self.slot_bytes = 0
        if self.arena is not None:
            close_under(self.lock, self.let_go, f"group {self._group_id}'s arena")

    def let_go(self) -> None:
        """Unmap the arena now (the caller holds :attr:`lock`, or no operation can run)."""
        arena, self.arena = self.arena, None
        self._step = None
        self.ready = False
        if arena is not None:
            arena.close()


# -- the kernels: each binds a signature to the arena's algorithm (asyncoll._algorithms.arena)


def _all_reduce(signature: Signature) -> Kernel:
    assert signature.dtype is not None and signature.op is not None
    split = signature.elements * signature.dtype.itemsize >= selection.ARENA_SPLIT_FROM_BYTES
    # Made ready once: a remembered call keeps it (MPI's persistent collective).
    return in_arena.AllReduce(signature.op, signature.dtype, signature.elements, split).run


def _reduce(signature: Signature) -> Kernel:
    assert signature.op is not None
    return functools.partial(_run_reduce, signature.op, signature.root)


def _run_reduce(op: ReduceOp, root: int, step: ArenaStep, array: NDArray[Any]) -> None:
    step.operation = in_arena.reduce(step.arena, step.operation, array, op, root,
                                     step.fingerprint, step.waiter)


def _broadcast(signature: Signature) -> Kernel:
    return functools.partial(_run_broadcast, signature.root)


def _run_broadcast(root: int, step: ArenaStep, array: NDArray[Any]) -> None:
    step.operation = in_arena.broadcast(step.arena, step.operation, array, root,
                                        step.fingerprint, step.waiter)


def _reduce_scatter(signature: Signature) -> Kernel:
    assert signature.op is not None
    return functools.partial(_run_reduce_scatter, signature.op)


def _run_reduce_scatter(op: ReduceOp, step: ArenaStep,
                        arrays: tuple[NDArray[Any], list[NDArray[Any]]]) -> None:
    step.operation = in_arena.reduce_scatter(step.arena, step.operation, arrays[1],
                                             arrays[0], op, step.fingerprint, step.waiter)


def _all_gather(signature: Signature) -> Kernel:
    return _run_all_gather


def _run_all_gather(step: ArenaStep, arrays: tuple[list[NDArray[Any]], NDArray[Any]]) -> None:
    step.operation = in_arena.all_gather(step.arena, step.operation, arrays[1], arrays[0],
                                         step.fingerprint, step.waiter)


def _barrier(signature: Signature) -> Kernel:
    return _run_barrier


def _run_barrier(step: ArenaStep, arrays: object) -> None:
    in_arena.barrier(step.arena, step.operation, step.fingerprint, step.waiter)


_KERNELS = {"all_reduce": _all_reduce, "reduce": _reduce, "broadcast": _broadcast,
            "reduce_scatter": _reduce_scatter, "all_gather": _all_gather, "barrier": _barrier}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True

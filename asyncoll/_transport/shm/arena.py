"""Arena: one shared-memory segment where the same-host members of a group meet.

For collectives that run to completion in the calling thread (issue 13's
fast path): no event loop, no socket, no thread hop. Each member owns one
control line and one data slot; it writes only its own and reads everyone's.

Layout: ``size`` control lines of 128 bytes (so no two members write the
same cache line, nor an adjacent pair the prefetcher couples), then
``size`` data slots of ``slot_bytes`` each, 128-byte aligned. A control
line is read as int64 fields:

- ``PUBLISHED``: the last phase whose data this member's slot holds;
- ``RELEASED``: the last phase whose slots this member has finished reading,
  so the others may overwrite theirs;
- ``PID``: the member's process id, for a cheap liveness check;
- ``FINGERPRINT`` (6 fields): what the published phase is, compared before
  anything is read, so members that called different collectives raise
  MismatchError instead of reading each other's data;
- ``ABANDONED``, ``ABANDONED_CODE``, ``ABANDONED_RANK``: the operation this
  member gave up on (0: none), its error's code and the rank that error
  names (-1: none), so the others stop waiting for it at once.

Memory order: a member writes its slot, then its fingerprint, then
PUBLISHED; a reader loads PUBLISHED, then the fingerprint and the slot.
x86-64 keeps that order (stores are not reordered with other stores, nor
loads with other loads), and each write here is a separate call into C that
no compiler moves another across. Weaker models (aarch64) would need
barriers Python cannot issue: :func:`supported` is False there, and groups
keep the socket path.

Waiting (:class:`Waiter`) spins briefly, then yields the processor, then
sleeps in growing steps, so that more ranks than cores do not livelock and
a rank that waits long for a late peer costs little CPU; between polls it
checks a deadline and a failure callback (a lost peer, a broken group).
"""

from __future__ import annotations

import mmap
import os
import platform
import time
from collections.abc import Callable, Sequence

import numpy as np

from asyncoll._transport.shm import segment

#: Bytes of one member's control line.
LINE_BYTES = 128
PUBLISHED, RELEASED, PID = 0, 1, 2
FINGERPRINT = slice(3, 9)
ABANDONED, ABANDONED_CODE, ABANDONED_RANK = 9, 10, 11
#: Slots start on this boundary.
ALIGN = 128

#: Polls that only spin, then polls that yield the CPU, before sleeping.
SPINS = 64
YIELDS = 256
#: Sleeps start at this many seconds and double up to the largest.
FIRST_SLEEP_S = 20e-6
LONGEST_SLEEP_S = 1e-3


def supported() -> bool:
    """Whether this machine's memory model and platform allow the arena (x86-64, POSIX)."""
    return segment.AVAILABLE and platform.machine().lower() in ("x86_64", "amd64")


def arena_bytes(size: int, slot_bytes: int) -> int:
    """The segment size for ``size`` members with slots of ``slot_bytes``."""
    return size * LINE_BYTES + size * _aligned(slot_bytes)


def _aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


class ArenaExpired(Exception):
    """A wait's deadline passed (the caller turns it into its own timeout error).

    Attributes:
        behind: the member indices the wait was still waiting for.
    """

    def __init__(self, behind: list[int]) -> None:
        super().__init__(f"members {behind} did not arrive in time")
        self.behind = behind


class Poll:
    """A wait's condition: has every member's control field reached a phase?"""

    def __init__(self, column: np.ndarray, phase: int) -> None:
        self._column = column
        self._phase = phase

    def __call__(self) -> bool:
        return bool((self._column >= self._phase).all())

    def behind(self) -> list[int]:
        """The members whose field has not reached the phase yet."""
        return [int(i) for i in np.flatnonzero(self._column < self._phase)]


class Waiter:
    """Adaptive waiting with a deadline and a failure check between polls.

    The check is given the poll, so it can ask whom the wait is for.
    """

    def __init__(self, deadline: float, check: Callable[[Poll], None]) -> None:
        self.deadline = deadline
        self._check = check

    def until(self, ready: Poll) -> None:
        """Return once ``ready()`` is true.

        Raises:
            ArenaExpired: the deadline (time.monotonic) passed first; it names
                the members ``ready`` still waited for.
            Whatever ``check`` raises (it is called between polls once the
            spinning is over).
        """
        polls = 0
        pause = FIRST_SLEEP_S
        while not ready():
            polls += 1
            if polls <= SPINS:
                continue
            self._check(ready)
            if time.monotonic() >= self.deadline:
                raise ArenaExpired(ready.behind())
            if polls <= SPINS + YIELDS:
                os.sched_yield()
            else:
                time.sleep(pause)
                pause = min(pause * 2, LONGEST_SLEEP_S)


class Arena:
    """One member's view of a group's arena.

    Args:
        memory: the mapped segment (read-write).
        size: the number of members.
        me: this member's index.
        slot_bytes: the capacity of each slot.
        ranks: the members' global ranks, for messages (default: their indices).
    """

    def __init__(self, memory: mmap.mmap, size: int, me: int, slot_bytes: int,
                 ranks: Sequence[int] | None = None) -> None:
        if len(memory) < arena_bytes(size, slot_bytes) or not 0 <= me < size:
            raise ValueError(f"an arena of {len(memory)} bytes cannot hold {size} members "
                             f"with slots of {slot_bytes} bytes (member {me})")
        self._memory = memory
        self.size = size
        self.me = me
        self.slot_bytes = slot_bytes
        self.ranks = tuple(ranks) if ranks is not None else tuple(range(size))
        buffer = np.frombuffer(memory, dtype=np.uint8)
        self.lines = buffer[:size * LINE_BYTES].view(np.int64).reshape(size, -1)
        stride = _aligned(slot_bytes)
        start = size * LINE_BYTES
        self._slots = [buffer[start + i * stride:start + i * stride + slot_bytes]
                       for i in range(size)]
        self.lines[me, PID] = os.getpid()

    def slot(self, member: int, dtype: np.dtype, count: int) -> np.ndarray:
        """The first ``count`` elements of ``member``'s slot, as ``dtype``."""
        return self._slots[member][:count * dtype.itemsize].view(dtype)

    def publish(self, phase: int, fingerprint: Sequence[int]) -> None:
        """Say this member's slot holds ``phase``'s data (written before this call)."""
        self.lines[self.me, FINGERPRINT] = fingerprint
        self.lines[self.me, PUBLISHED] = phase

    def release(self, phase: int) -> None:
        """Say this member has finished reading every slot of ``phase``."""
        self.lines[self.me, RELEASED] = phase

    def all_at_least(self, field: int, phase: int) -> Poll:
        """A poll: has every member's ``field`` reached ``phase``?"""
        return Poll(self.lines[:, field], phase)

    def abandon(self, operation: int, code: int, rank: int) -> None:
        """Say this member gave up on ``operation`` with error ``code`` (naming ``rank``)."""
        self.lines[self.me, ABANDONED_CODE] = code
        self.lines[self.me, ABANDONED_RANK] = rank
        self.lines[self.me, ABANDONED] = operation

    def abandoned(self) -> tuple[int, int, int, int] | None:
        """(member, operation, error code, rank named) of a member that gave up, or None."""
        column = self.lines[:, ABANDONED]
        if not column.any():
            return None
        member = int(np.flatnonzero(column)[0])
        line = self.lines[member]
        return member, int(line[ABANDONED]), int(line[ABANDONED_CODE]), int(line[ABANDONED_RANK])

    def fingerprints(self) -> list[tuple[int, ...]]:
        """Every member's published fingerprint, one tuple each."""
        return [tuple(int(v) for v in row) for row in self.lines[:, FINGERPRINT]]

    def pid(self, member: int) -> int:
        """The process id ``member`` wrote when it mapped the arena."""
        return int(self.lines[member, PID])

    def close(self) -> None:
        """Drop this member's views and unmap the segment."""
        self.lines = np.empty((0, 0), dtype=np.int64)
        self._slots = []
        try:
            self._memory.close()
        except BufferError:
            pass  # a view is still exported somewhere: the mapping goes with the process

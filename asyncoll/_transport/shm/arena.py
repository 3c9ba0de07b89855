"""Arena: one shared-memory segment where the same-host members of a group meet.

For collectives that run to completion in the calling thread (issue 13's
fast path): no event loop, no socket, no thread hop. Each member owns one
control line and one data slot; it writes only its own and reads everyone's.

Layout (its numbers are `asyncoll._native.contract`'s, which the C
shares): ``size`` control lines of 256 bytes (so no two members write the
same cache line, nor an adjacent pair the prefetcher couples), then two
sets of ``size`` data slots of ``slot_bytes`` each, 128-byte aligned:
operations alternate between the sets (and between two fingerprint fields),
so a member may write its slot for operation k + 1 while a slower one still
reads operation k's. A control line is read as int64 fields:

- ``PUBLISHED``: the last phase whose data this member's slot holds;
- ``PID``: the member's process id, for a cheap liveness check;
- ``FINGERPRINTS`` (6 fields each, one per set): what the operation is,
  compared before anything is read, so members that called different
  collectives raise MismatchError instead of reading each other's data;
- ``ABANDONED``, ``ABANDONED_CODE``, ``ABANDONED_RANK``, ``ABANDONED_MS``:
  the operation this member gave up on (0: none), its error's code, the
  rank that error names (the peer lost, or the one a timeout waited for;
  -1: none) and a timeout's deadline in milliseconds, so the others stop
  waiting for it at once and can say why;
- ``SLEEPING``: nonzero while the member sleeps on another's PUBLISHED
  word (a futex: asyncoll._transport.shm.futex), so a member that
  publishes knows to wake it.

Memory order: a member writes its slot, then its fingerprint, then
PUBLISHED; a reader loads PUBLISHED, then the fingerprint and the slot.
x86-64 keeps that order (stores are not reordered with other stores, nor
loads with other loads), and each write here is a separate call into C that
no compiler moves another across. Where the compiled extension runs
(asyncoll._native), :meth:`Arena.publish` and its steps are C, with a
release store of PUBLISHED and acquire loads of it: the same order. Weaker
models (aarch64) would need barriers Python cannot issue: :func:`supported`
is False there, and groups keep the socket path.

Waiting (:class:`Waiter`) spins briefly, then yields the processor, then
sleeps in growing steps, so that more ranks than cores do not livelock and
a rank that waits long for a late peer costs little CPU; between polls it
checks a deadline and a failure callback (a lost peer, a broken group).
Where futexes are available (Linux) a sleeping member is woken by the
publish it waits for (:meth:`Arena.rest`), instead of at its step's end.
"""

from __future__ import annotations

import mmap
import os
import platform
import struct
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from asyncoll._native import arena as native
from asyncoll._native.contract import (
    ABANDONED,
    ABANDONED_CODE,
    ABANDONED_MS,
    ABANDONED_RANK,
    ALIGN,
    BRIEF_YIELDS,
    FINGERPRINT_WORDS,
    FINGERPRINTS,
    LINE_BYTES,
    LINE_WORDS,
    PID,
    PUBLISHED,
    NEIGHBOUR_STAYS,
    QUIET_NS,
    SLEEPING,
    STRANGER_NS,
)
from asyncoll._transport.shm import futex, segment
from asyncoll._transport.shm.tasks import running_tasks

#: A fingerprint's fields as a control line holds them (int64, this machine's order).
_FINGERPRINT = struct.Struct(f"={FINGERPRINT_WORDS}q")
_LINE = LINE_WORDS

#: Polls that only spin, then polls that yield the CPU, before sleeping.
#: (With more members than processors, none spin: see Waiter.spins.)
SPINS = 64
YIELDS = 256
#: Polls that yield before sleeping where members outnumber the processors: a
#: yield then hands the processor to a member that needs it, and a member
#: asleep costs its waker a futex wake and its own wake-up, longer than the
#: steps it waits between (a few milliseconds of yields in all, then sleeps).
OVERSUBSCRIBED_YIELDS = 4096
#: While yielding, the failure check and the deadline are looked at every this many polls
#: (the compiled brief wait's yields, BRIEF_YIELDS: a wait going on from it checks at once).
CHECK_EVERY = BRIEF_YIELDS
#: STRANGER_NS and QUIET_NS in seconds, time.monotonic's unit.
_STRANGER_S = STRANGER_NS / 1e9
_QUIET_S = QUIET_NS / 1e9
#: Sleeps start at this many seconds and double up to the largest.
FIRST_SLEEP_S = 20e-6
LONGEST_SLEEP_S = 1e-3


def supported() -> bool:
    """Whether this machine's memory model and platform allow the arena (x86-64, POSIX)."""
    return segment.AVAILABLE and platform.machine().lower() in ("x86_64", "amd64")


def arena_bytes(size: int, slot_bytes: int) -> int:
    """The segment size for ``size`` members with (two) slots of ``slot_bytes``."""
    return size * LINE_BYTES + 2 * size * _aligned(slot_bytes)


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
    """A wait's condition: has every member's control field reached a phase? Read
    from the control lines without numpy: several times faster for a few members."""

    def __init__(self, words: memoryview, fields: Sequence[int], phase: int,
                 published: bool = False) -> None:
        self._words = words
        self._fields = fields
        #: The phase waited for; an arena reuses its polls, one wait after another.
        self.phase = phase
        #: Whether the fields are the members' PUBLISHED words (the compiled wait's).
        self.published = published

    def __call__(self) -> bool:
        words, phase = self._words, self.phase
        for index in self._fields:
            if words[index] < phase:
                return False
        return True

    def behind(self) -> list[int]:
        """The members whose field has not reached the phase yet."""
        return [member for member, index in enumerate(self._fields)
                if self._words[index] < self.phase]

    def first_behind(self) -> tuple[int, int] | None:
        """(word index, value) of the first field short of the phase, or None."""
        words, phase = self._words, self.phase
        for index in self._fields:
            value = words[index]
            if value < phase:
                return index, value
        return None


def _sleep(ready: Poll, seconds: float) -> None:
    time.sleep(seconds)


def _unknown() -> bool:
    return True


class Waiter:
    """Adaptive waiting with a deadline and a failure check between polls.

    The check is given the poll, so it can ask whom the wait is for.
    """

    def __init__(self, deadline: float, check: Callable[[Poll], None],
                 spins: int = SPINS, rest: Callable[[Poll, float], None] = _sleep,
                 brief: Callable[[int, int], bool] | None = None,
                 yields: int = YIELDS, strangers: Callable[[], bool] = _unknown,
                 elsewhere: Callable[[], bool] | None = None) -> None:
        self.deadline = deadline
        self._check = check
        #: How a long wait sleeps for up to a step's seconds (Arena.rest, or a timed sleep).
        self._rest = rest
        #: Polls that only spin; 0 where members outnumber the processors, since a
        #: spinning member then holds a processor the member it waits for needs.
        self.spins = spins
        #: Polls that yield, after the spins, before the waiter sleeps.
        self.yields = yields
        #: The compiled wait for every member's PUBLISHED (phase, spins) -> ready:
        #: the spins and BRIEF_YIELDS yields, with the GIL released; None: none.
        self.brief = brief
        #: Until then (time.monotonic), waits do not yield: a yield lately handed the
        #: processor to a task that is no member, for a time slice (STRANGER_NS),
        #: that is, it came back late while ``strangers()`` said such tasks run.
        self.quiet_until = 0.0
        #: Until then, one more yield to a stranger makes the waits quiet (_met_stranger).
        self.suspect_until = 0.0
        self._strangers = strangers
        #: Core.yields_to_stranger (after it, the wait sleeps, not yields), or None.
        self._elsewhere = elsewhere

    def until(self, ready: Poll, polls: int = 0) -> None:
        """Return once ``ready()`` is true.

        ``polls``: how many polls were made already (a compiled step's brief
        wait), so the spinning, the yielding and the checks go on from there.

        Raises:
            ArenaExpired: the deadline (time.monotonic) passed first; it names
                the members ``ready`` still waited for.
            Whatever ``check`` raises (it is called between polls once the
            spinning is over).
        """
        spins, brief = self.spins, self.brief
        if not polls and brief is not None and ready.published:
            if brief(ready.phase, spins):
                return
            polls = spins + BRIEF_YIELDS
        if polls and self._elsewhere is not None and self._elsewhere():
            polls = spins + self.yields  # the compiled wait's finding: sleeps from now on
        pause = FIRST_SLEEP_S
        while not ready():
            polls += 1
            if polls <= spins:
                continue
            if polls <= spins + self.yields:
                before = time.monotonic()
                if before < self.quiet_until:
                    polls = spins + self.yields  # sleeps from now on
                    continue
                if polls % CHECK_EVERY == 0:
                    self._check(ready)
                    if before >= self.deadline:
                        raise ArenaExpired(ready.behind())
                os.sched_yield()
                after = time.monotonic()
                if after - before > _STRANGER_S and self._strangers():
                    self._met_stranger(after)
            else:
                self._check(ready)
                if time.monotonic() >= self.deadline:
                    raise ArenaExpired(ready.behind())
                self._rest(ready, pause)
                pause = min(pause * 2, LONGEST_SLEEP_S)


    def _met_stranger(self, now: float) -> None:
        """A yield that ended at ``now`` went to a stranger: the second within
        QUIET_NS of the first makes the waits quiet for QUIET_NS (an idle
        machine's passing task makes one, a busy neighbour many), and one within
        NEIGHBOUR_STAYS quiet times after a quiet time ended makes them quiet
        again: a busy neighbour stays (the compiled met_stranger keeps the same
        rule)."""
        if now < self.suspect_until:
            self.quiet_until = now + _QUIET_S
            self.suspect_until = self.quiet_until + NEIGHBOUR_STAYS * _QUIET_S
        else:
            self.suspect_until = now + _QUIET_S


class Holder(Protocol):
    """What keeps views of an arena's slots between operations (a persistent
    collective): it lets go of them when the arena closes."""

    def forget(self) -> None:
        """Drop every view of the arena's memory this holds."""


class ArenaStillMapped(BufferError):
    """An arena could not be unmapped: something still holds a view of its memory."""


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
        #: The control lines as int64 words: member m's field f is word m * _LINE + f.
        self._words = memoryview(memory)[:size * LINE_BYTES].cast("q")
        self._mine = me * _LINE
        buffer = np.frombuffer(memory, dtype=np.uint8)
        stride = _aligned(slot_bytes)
        start = size * LINE_BYTES
        self._slots = [[buffer[start + i * stride:start + i * stride + slot_bytes]
                        for i in range(which * size, (which + 1) * size)] for which in (0, 1)]
        # Views of every slot by (set, dtype, count): operations on one array reuse them.
        self._views: dict[tuple[int, np.dtype[Any], int], list[NDArray[Any]]] = {}
        self._words[self._mine + PID] = os.getpid()
        #: The compiled steps on this mapping (asyncoll._native), or None: pure Python.
        self.core: Any = native.Core(memory, size, me, slot_bytes) if native else None
        # Futex addresses are the mapping's; numpy tells where it starts.
        self._address = buffer.ctypes.data if futex.AVAILABLE else 0
        self._sleeping = range(SLEEPING, size * _LINE, _LINE)
        self._polls: dict[int, Poll] = {}
        #: The fingerprint object last written in each set's field, by identity.
        self._written: list[Sequence[int] | None] = [None, None]
        #: The fingerprint last compared (by identity) and its bytes in a control line.
        self._packed_for: Sequence[int] | None = None
        self._packed = b""
        # What keeps views of the slots between operations (AllReduce kernels), told
        # to drop them at close; weakly, so that a forgotten kernel leaves at once.
        self._holders: weakref.WeakSet[Holder] = weakref.WeakSet()

    def keep(self, holder: Holder) -> None:
        """Tell ``holder`` to drop its views of the slots when this arena closes."""
        self._holders.add(holder)

    def slots(self, operation: int, dtype: np.dtype[Any], count: int) -> list[NDArray[Any]]:
        """Every member's slot for ``operation`` (its set alternates), the first
        ``count`` elements as ``dtype``."""
        key = (operation & 1, dtype, count)
        views = self._views.get(key)
        if views is None:
            if len(self._views) > 64:
                self._views.clear()
            views = self._views[key] = [slot[:count * dtype.itemsize].view(dtype)
                                        for slot in self._slots[operation & 1]]
        return views

    def publish(self, phase: int, fingerprint: Sequence[int]) -> None:
        """Say this member's slot holds ``phase``'s data (written before this call).

        Phases ``2k - 1`` and ``2k`` belong to operation k, whose fingerprint
        goes in its set's field.
        """
        core = self.core
        if core is not None:
            # Its fingerprint field compared before it is written: the compiled steps
            # publish through it too.
            core.publish(phase, fingerprint)
            return
        words, mine = self._words, self._mine
        which = ((phase + 1) // 2) & 1
        if self._written[which] is not fingerprint:
            # Written two operations ago and unchanged: repeated calls skip this.
            start = mine + FINGERPRINTS[which]
            for offset, value in enumerate(fingerprint, start=start):
                words[offset] = value
            self._written[which] = fingerprint
        words[mine + PUBLISHED] = phase
        if self._address:
            # The store above, before the loads below: futex.fence, written out
            # (every operation passes here).
            futex.FENCE_ENTER()
            futex.FENCE_LEAVE()
            for index in self._sleeping:
                if words[index]:
                    futex.wake(self._address + 8 * (mine + PUBLISHED))
                    break

    def sleeping(self, member: int) -> bool:
        """Whether ``member`` sleeps on a futex now."""
        return bool(self._words[member * _LINE + SLEEPING])

    def strangers_running(self) -> bool:
        """Whether this machine runs more tasks than this arena has members awake
        (not asleep on a futex): a task that is no member wants a processor. Yes
        where the count of running tasks cannot be read (the compiled
        strangers_running keeps the same rule)."""
        running = running_tasks()
        if running is None:
            return True
        words = self._words
        return running > sum(not words[index] for index in self._sleeping)

    def rest(self, ready: Poll, seconds: float) -> None:
        """Sleep up to ``seconds``, or until the first member ``ready`` waits for publishes.

        Without futexes, a timed sleep.
        """
        if not self._address:
            time.sleep(seconds)
            return
        behind = ready.first_behind()
        if behind is None:
            return
        index, value = behind
        words, flag = self._words, self._mine + SLEEPING
        words[flag] = 1
        try:
            futex.wait(self._address + 8 * index, value, seconds)
        finally:
            words[flag] = 0

    def all_at_least(self, field: int, phase: int) -> Poll:
        """A poll: has every member's ``field`` reached ``phase``?

        The arena's one poll of ``field``, aimed at ``phase``: its waits come
        one at a time (its operations run under the group's lock).
        """
        poll = self._polls.get(field)
        if poll is None:
            poll = self._polls[field] = Poll(self._words, range(field, self.size * _LINE,
                                                                _LINE), phase,
                                             field == PUBLISHED)
        poll.phase = phase
        return poll

    def abandon(self, operation: int, code: int, rank: int, waited_ms: int = 0) -> None:
        """Say this member gave up on ``operation`` with error ``code`` (naming ``rank``;
        a timeout's deadline ``waited_ms``)."""
        words, mine = self._words, self._mine
        words[mine + ABANDONED_CODE] = code
        words[mine + ABANDONED_RANK] = rank
        words[mine + ABANDONED_MS] = waited_ms
        words[mine + ABANDONED] = operation

    def abandoned(self) -> tuple[int, int, int, int, int] | None:
        """(member, operation, error code, rank named, deadline in ms) of a member that
        gave up, or None."""
        words = self._words
        for member in range(self.size):
            line = member * _LINE
            if words[line + ABANDONED]:
                return (member, words[line + ABANDONED], words[line + ABANDONED_CODE],
                        words[line + ABANDONED_RANK], words[line + ABANDONED_MS])
        return None

    def fingerprint(self, member: int, operation: int) -> tuple[int, ...]:
        """The fingerprint ``member`` published for ``operation`` (or for k +- 2...)."""
        start = member * _LINE + FINGERPRINTS[operation & 1]
        return tuple(self._words[start:start + 6])

    def differs(self, fingerprint: Sequence[int], operation: int) -> int | None:
        """The first other member whose fingerprint for ``operation`` is not ``fingerprint``.

        Compared as bytes, read straight from the mapping (a third of the cost
        of six words through the memoryview).
        """
        if fingerprint is not self._packed_for:
            self._packed = _FINGERPRINT.pack(*fingerprint)
            self._packed_for = fingerprint
        memory, packed, me = self._memory, self._packed, self.me
        start = 8 * FINGERPRINTS[operation & 1]
        for member in range(self.size):
            if member != me and memory[start:start + _FINGERPRINT.size] != packed:
                return member
            start += LINE_BYTES
        return None

    def pid(self, member: int) -> int:
        """The process id ``member`` wrote when it mapped the arena."""
        return int(self._words[member * _LINE + PID])

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` unmapped the segment."""
        return self._memory.closed

    def close(self) -> None:
        """Drop this member's views (and its holders'), then unmap the segment.

        Raises:
            ArenaStillMapped: a view of the memory is still exported somewhere
                (a bug: every holder registers with :meth:`keep`); the mapping
                then stays until that view goes.
        """
        if self._memory.closed:
            return
        for holder in list(self._holders):
            holder.forget()
        self._holders.clear()
        self._views.clear()
        self._slots = []
        self._polls.clear()
        self._written = [None, None]
        self._packed_for = None
        if self.core is not None:
            self.core.release()
        self._words.release()
        try:
            self._memory.close()
        except BufferError as exc:
            raise ArenaStillMapped(f"the arena of {len(self._memory)} bytes could not be "
                                   f"unmapped: a view of its memory is still held ({exc})"
                                   ) from exc

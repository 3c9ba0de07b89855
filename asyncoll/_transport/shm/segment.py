"""Shared memory for large payloads between peers on the same host.

A sender copies a large payload into a ring of shared memory it owns for
one peer, and sends over that peer's TCP connection only a small SHM_DATA
frame saying where the bytes lie. The receiver copies them straight into
the destination array (or a buffer kept for the receive to come) and
answers SHM_FREE, which lets the sender reuse that part of the ring. The
TCP connection stays the notification channel, so ordering, desync checks,
aborts, goodbyes and the detection of a lost peer are the TCP transport's,
unchanged; only the payload bytes bypass the kernel's socket buffers.

Nothing is left in /dev/shm, even after kill -9: the receiver unlinks a
segment as soon as it has mapped it (the memory lives on, mapped in both
processes, until both have exited), and the sender unlinks it itself when
the peer refuses it or is lost first. Only a sender killed in the moment
between creating a segment and its peer mapping it could leave one behind;
asyncoll-run removes those (named after the sender's pid) when the job ends.

Segments are made with the same POSIX calls multiprocessing.shared_memory
uses, without its resource tracker: on Python < 3.13 that tracker starts a
process per rank, and unlinks at exit every segment a process merely
attached to, which would pull the ring from under its owner.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import re
import secrets
from collections import deque

try:
    import _posixshmem  # type: ignore[import-not-found]
except ImportError:  # not a POSIX system: the TCP transport carries everything
    _posixshmem = None

#: Whether this platform has POSIX shared memory (the runtime turns it off otherwise).
AVAILABLE = _posixshmem is not None

#: Prefix of every segment name, so a leak would be easy to see and sweep.
PREFIX = "asyncoll-"
_NAME = re.compile(r"asyncoll-[0-9]+-[0-9a-f]{12}\Z")
#: The smallest ring: two pieces of 64-byte multiples.
MIN_RING_BYTES = 4096
#: The largest ring a receiver agrees to map.
MAX_RING_BYTES = 1 << 30


#: Where POSIX shared memory lives on Linux.
SHM_DIR = "/dev/shm"


def room() -> int | None:
    """Bytes free for new segments (``/dev/shm``'s free space); None where unknown."""
    try:
        stats = os.statvfs(SHM_DIR)
    except (OSError, AttributeError):  # no /dev/shm, or no statvfs (Windows)
        return None
    return stats.f_bavail * stats.f_frsize


def new_name() -> str:
    """A fresh segment name, carrying this process's pid for the launcher's sweep."""
    return f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"


def create(name: str, size: int) -> mmap.mmap:
    """Create the segment ``name`` of ``size`` bytes and map it read-write.

    Raises:
        OSError: shared memory is unavailable or full; nothing is left behind.
    """
    if _posixshmem is None:
        raise OSError("shared memory is not available on this platform")
    fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        # Reserve the pages now: on a full /dev/shm this fails with ENOSPC,
        # where a merely truncated file would kill the process with SIGBUS on
        # its first write.
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        else:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    except BaseException:
        unlink(name)
        raise
    finally:
        os.close(fd)


def attach(name: str, size: int) -> mmap.mmap:
    """Map the peer's segment ``name`` read-only, then unlink it.

    Raises:
        OSError: no such segment here (the peer is on another host), or it is
            smaller than ``size``.
        ValueError: ``name`` or ``size`` is not one asyncoll makes.
    """
    if _posixshmem is None:
        raise OSError("shared memory is not available on this platform")
    if not _NAME.match(name) or not 0 < size <= MAX_RING_BYTES:
        raise ValueError(f"refusing shared-memory segment {name!r} of {size} bytes")
    fd = _posixshmem.shm_open("/" + name, os.O_RDONLY, 0)
    try:
        if os.fstat(fd).st_size < size:
            raise OSError(f"shared-memory segment {name!r} is smaller than {size} bytes")
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
        unlink(name)


def attach_shared(name: str, size: int) -> mmap.mmap:
    """Map the segment ``name`` read-write, leaving it in place for other members.

    For a group's arena, which every member writes; its creator unlinks it
    once every member has mapped it.

    Raises:
        OSError: no such segment here, or it is smaller than ``size``.
        ValueError: ``name`` or ``size`` is not one asyncoll makes.
    """
    if _posixshmem is None:
        raise OSError("shared memory is not available on this platform")
    if not _NAME.match(name) or size <= 0:
        raise ValueError(f"refusing shared-memory segment {name!r} of {size} bytes")
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, 0)
    try:
        if os.fstat(fd).st_size < size:
            raise OSError(f"shared-memory segment {name!r} is smaller than {size} bytes")
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def unlink(name: str) -> None:
    """Remove ``name`` from /dev/shm if it is still there."""
    if _posixshmem is None:
        return
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass


def held() -> tuple[int, int]:
    """(mappings, open files) of asyncoll's segments in this process, from Linux's /proc.

    For leak checks: a segment unlinked while mapped still shows, as
    ``/dev/shm/asyncoll-... (deleted)``. (0, 0) where /proc is not there.
    """
    marker = f"{SHM_DIR}/{PREFIX}".encode()
    try:
        mappings = _mapped(marker)
        descriptors = os.listdir("/proc/self/fd")
    except OSError:
        return 0, 0
    files = 0
    for fd in descriptors:
        try:
            files += os.readlink(f"/proc/self/fd/{fd}").encode().startswith(marker)
        except OSError:
            pass  # the listing's own descriptor, closed since
    return mappings, files


def _mapped(marker: bytes) -> int:
    """The lines of /proc/self/maps naming ``marker``, counted until two reads agree: a
    read comes a page at a time, and may skip lines that another thread's mmap or
    munmap moved meanwhile."""
    counts: list[int] = []
    while len(counts) < 2 or (counts[-1] != counts[-2] and len(counts) < 10):
        with open("/proc/self/maps", "rb") as maps:
            counts.append(maps.read().count(marker))
    return counts[-1]


def unmap(view: memoryview) -> None:
    """Release ``view`` of a mapping and unmap it (its only view: a ring's).

    Raises:
        BufferError: a slice of ``view`` or an array made from it is still held.
    """
    mapping = view.obj
    view.release()
    if isinstance(mapping, mmap.mmap):
        mapping.close()


def sweep(pids: list[int], directory: str = "/dev/shm") -> list[str]:
    """Unlink segments left by the processes ``pids``; return their names."""
    wanted = tuple(f"{PREFIX}{pid}-" for pid in pids)
    try:
        names = [name for name in os.listdir(directory) if name.startswith(wanted)]
    except OSError:
        return []
    for name in names:
        unlink(name)
    return names


class RingSpace:
    """Which bytes of a ring the sender may write: pure bookkeeping, no memory.

    Positions count bytes ever reserved; the ring offset is a position modulo
    the capacity. A piece never wraps: when it would not fit before the end,
    the rest of the ring is skipped as padding. The receiver frees pieces in
    the order they were reserved, echoing the position after each, so one
    counter says what is free.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.head = 0  # position after the last reserved byte
        self.tail = 0  # position up to which the receiver is done

    @property
    def largest_piece(self) -> int:
        """The biggest piece worth asking for: half the ring, so two can be in flight.

        A multiple of 64 bytes, so pieces never split an element (the receiver
        may reduce straight out of the ring).
        """
        return max(64, self.capacity // 2 // 64 * 64)

    def reserve(self, nbytes: int) -> tuple[int, int] | None:
        """Reserve ``nbytes`` contiguous bytes: (ring offset, position after), or None if full."""
        if self.head == self.tail:
            # Empty: start again at the ring's beginning, wasting nothing.
            self.head = self.tail = -(-self.head // self.capacity) * self.capacity
        offset = self.head % self.capacity
        padding = self.capacity - offset if offset + nbytes > self.capacity else 0
        if self.head + padding + nbytes - self.tail > self.capacity:
            return None
        self.head += padding + nbytes
        return (0 if padding else offset), self.head

    def free(self, position: int) -> None:
        """The receiver is done with everything before ``position``."""
        if self.tail < position <= self.head:
            self.tail = position


class Outbox:
    """The sending side of one same-host pair: a ring this process owns."""

    def __init__(self, name: str, segment: mmap.mmap) -> None:
        self.name = name
        self.view = memoryview(segment)
        self.space = RingSpace(len(segment))
        # Senders waiting for space, oldest first, with the channel of each.
        self._waiters: deque[tuple[asyncio.Future[None], int]] = deque()
        #: Set once the ring is unmapped (close): what a sender then fails with.
        self._closed_by: BaseException | None = None

    async def reserve(self, nbytes: int, channel: int) -> tuple[int, int]:
        """Reserve ``nbytes`` of the ring for a frame of ``channel``, waiting for space.

        The wait has no deadline of its own: the operation's deadline cancels
        it, and losing the peer or failing the channel fails it (:meth:`fail`).
        """
        while True:
            if self._closed_by is not None:
                raise self._closed_by
            place = self.space.reserve(nbytes) if not self._waiters else None
            if place is not None:
                return place
            waiter = asyncio.get_running_loop().create_future()
            entry = (waiter, channel)
            self._waiters.append(entry)
            try:
                await waiter
            finally:
                if entry in self._waiters:
                    self._waiters.remove(entry)
            if self._closed_by is not None:
                raise self._closed_by
            place = self.space.reserve(nbytes)
            if place is not None:
                self._wake_next()
                return place

    def close(self, error: BaseException) -> None:
        """Unmap the ring; senders waiting for space, and later ones, fail with ``error``."""
        if self._closed_by is None:
            self._closed_by = error
            self.fail(error)
            unmap(self.view)

    def freed(self, position: int) -> None:
        """The receiver freed the ring up to ``position``: let the next sender try."""
        self.space.free(position)
        self._wake_next()

    def fail(self, error: BaseException, channel: int | None = None) -> None:
        """Fail the senders waiting for space (of ``channel``; all when the peer is gone).

        A receiver that has left frees nothing more, so a sender of a failed
        channel would otherwise wait until the connection closes.
        """
        for waiter, of in list(self._waiters):
            if (channel is None or of == channel) and not waiter.done():
                waiter.set_exception(error)

    def _wake_next(self) -> None:
        for waiter, _ in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
                return

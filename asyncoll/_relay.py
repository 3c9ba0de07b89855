"""asyncoll-run's relay of its workers' output: whole lines, in order per worker.

Workers that share the launcher's stdout write to it at once, and a Python
worker with ``PYTHONUNBUFFERED=1`` (as Docker images and CI systems often
set) writes one print in several pieces, so two workers' words could mix
within a line. Instead each worker writes into pipes of its own, and the
relay copies what comes out of them a whole line at a time (a line ends at
``\\n``, or at ``\\r`` so that a progress bar stays live), each line in one
``write`` where it fits in an atomic pipe write, so that even two launchers
sharing one terminal or pipe keep their lines whole.

The relay runs on the runtime's event loop: it starts no thread of its own.
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import subprocess

__all__ = ["LineRelay"]

#: Where a line ends: after each newline or carriage return.
_LINE_ENDS = re.compile(rb"(?<=[\r\n])")
#: A line longer than this is passed on in pieces: a worker that writes megabytes
#: without a newline must not make the launcher keep them.
_MAX_PARTIAL = 1 << 16
#: The most bytes one write(2) to a pipe puts in it at once, unmixed with other writers.
_ATOMIC = getattr(select, "PIPE_BUF", 512)


class LineRelay:
    """Copies each worker's stdout and stderr to this process's, whole lines at a time.

    Args:
        prefix: put ``[rank N] `` before each line (torchrun's log line prefix).
        stdout_fd, stderr_fd: where the lines go (this process's own by default).
    """

    def __init__(self, prefix: bool, stdout_fd: int = 1, stderr_fd: int = 2) -> None:
        self._prefix = prefix
        self._fds = (stdout_fd, stderr_fd)
        #: Each worker's readers: done once its pipes have closed.
        self._readers: dict[int, list[_LineReader]] = {}

    async def attach(self, proc: subprocess.Popen[bytes], rank: str) -> None:
        """Relay ``proc``'s stdout and stderr, which must be pipes; ``rank`` names it."""
        loop = asyncio.get_running_loop()
        label = f"[rank {rank}] ".encode() if self._prefix else b""
        readers = []
        for pipe, fd in ((proc.stdout, self._fds[0]), (proc.stderr, self._fds[1])):
            assert pipe is not None  # the launcher always gives its workers pipes
            reader = _LineReader(fd, label, loop.create_future())
            # connect_read_pipe calls the factory before it returns: this reader.
            await loop.connect_read_pipe(lambda: reader, pipe)
            readers.append(reader)
        self._readers[proc.pid] = readers

    async def finish(self, pids: list[int], timeout: float) -> None:
        """Wait up to ``timeout`` s for those workers' pipes to close, then pass on the rest.

        A worker's pipes close when it exits, unless a process it started
        still holds them: after ``timeout`` its last partial line goes out
        and the relay stops reading from it.
        """
        readers = [r for pid in pids for r in self._readers.pop(pid, [])]
        if not readers:
            return
        await asyncio.wait([r.closed for r in readers], timeout=timeout)
        for reader in readers:
            reader.stop()

    async def finish_all(self, timeout: float) -> None:
        """:meth:`finish` for every worker still relayed."""
        await self.finish(list(self._readers), timeout)


class _LineReader(asyncio.Protocol):
    """One pipe's reader: keeps a partial line until its end comes."""

    def __init__(self, fd: int, label: bytes, closed: asyncio.Future[None]) -> None:
        self._fd = fd
        self._label = label
        self._partial = b""
        self._transport: asyncio.BaseTransport | None = None
        self.closed = closed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        data = self._partial + data
        end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        self._partial = data[end:]
        if len(self._partial) > _MAX_PARTIAL:
            end, self._partial = len(data), b""
        if end:
            _write_lines(self._fd, _LINE_ENDS.split(data[:end]), self._label)

    def eof_received(self) -> bool | None:
        return None  # close the pipe

    def connection_lost(self, exc: Exception | None) -> None:
        self._flush_partial()
        if not self.closed.done():
            self.closed.set_result(None)

    def stop(self) -> None:
        """Stop reading (a process the worker started still holds the pipe)."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()  # connection_lost flushes the partial line
        else:
            self._flush_partial()

    def _flush_partial(self) -> None:
        # A worker that died in the middle of a line still gets its text out,
        # ended, so that the next line written starts on a line of its own.
        if self._partial:
            partial, self._partial = self._partial, b""
            _write_lines(self._fd, [partial + b"\n"], self._label)


def _write_lines(fd: int, lines: list[bytes], label: bytes) -> None:
    """Write ``lines`` to ``fd``, several to a write(2) while they fit in an atomic one."""
    batch = b""
    for line in lines:
        if not line:
            continue
        line = label + line
        if batch and len(batch) + len(line) > _ATOMIC:
            _write_all(fd, batch)
            batch = b""
        batch += line
    if batch:
        _write_all(fd, batch)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            # Someone made the launcher's stdout non-blocking: wait until it drains.
            select.select([], [fd], [])
        except OSError:
            return  # nobody reads the launcher's output any more (EPIPE): drop it

"""The ring all-reduce with compressed frames, for links slower than the codec.

The ring of ring.py, with what travels encoded (compression.py):

- Reduce-scatter: at step s member i encodes its partial of block
  (i - s - 1) and sends it right; it decodes what comes from the left and
  adds it to its own data for that block, in the input's precision. Each
  partial is encoded where it leaves, so n - 1 encodings meet every element
  before its block is finished.
- The block's owner finishes it (AVG divides), encodes it once, and
  replaces its own copy with what those bytes decode to.
- All-gather: the encoded blocks go round unchanged, each member forwarding
  the bytes it received and decoding them into its array. Every member
  decodes the same bytes with the same code, so the result is bitwise
  identical everywhere.

A block travels as segments, pipelined as in ring.py: a segment is passed
on as soon as it has been received, decoded and added. Segments hold whole
codec blocks (int8's shared scales), so a segment's encoding depends on its
own values only, and both ends cut them alike. Each encoded frame has its
own buffer, kept until the sends are flushed.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._algorithms.chunking import chunk_bounds
from asyncoll._algorithms.compression import Codec, Int8
from asyncoll._algorithms.ops import finish
from asyncoll._algorithms.segments import MAX_SEGMENTS
from asyncoll._algorithms.team import Team
from asyncoll.types import ReduceOp


def codec_segments(count: int, codec: Codec, segment_bytes: int) -> list[tuple[int, int]]:
    """Cut ``count`` values into segments of about ``segment_bytes`` (before encoding,
    as the exact ring cuts them), each a whole number of the codec's blocks but the last.

    >>> from asyncoll._algorithms.compression import codec
    >>> codec_segments(1000, codec("int8", np.dtype(np.float32), 256), 1600)
    [(0, 512), (512, 1000)]
    """
    if count <= 0:
        return []
    align = codec.block if isinstance(codec, Int8) else 1
    per = max(segment_bytes // codec.dtype.itemsize, 1, -(-count // MAX_SEGMENTS))
    per = -(-per // align) * align
    return [(lo, min(lo + per, count)) for lo in range(0, count, per)]


class _Encoded:
    """One block's segments and where each one's encoding sits in a buffer."""

    def __init__(self, count: int, codec: Codec, segment_bytes: int) -> None:
        self.segments = codec_segments(count, codec, segment_bytes)
        self.offsets = [0]
        for lo, hi in self.segments:
            self.offsets.append(self.offsets[-1] + codec.encoded_bytes(hi - lo))

    def buffer(self) -> NDArray[np.uint8]:
        return np.empty(self.offsets[-1], np.uint8)

    def frame(self, buffer: NDArray[np.uint8], j: int) -> NDArray[np.uint8]:
        return buffer[self.offsets[j]:self.offsets[j + 1]]


async def compressed_ring_all_reduce(team: Team, data: NDArray[Any], op: ReduceOp,
                                     codec: Codec, segment_bytes: int,
                                     residual: NDArray[Any] | None = None) -> None:
    """All-reduce the 1-D contiguous float array ``data`` in place, frames encoded by ``codec``.

    ``op`` is SUM or AVG (the caller refuses others). A group of one
    member sends nothing and leaves its data exact. ``residual`` (as long as
    ``data``), where given, gets what this member's encodings dropped, at the
    sum's scale: each element is encoded once here, as a partial sum on its way
    or as this member's finished result.
    """
    n, me = team.size, team.me
    bounds = chunk_bounds(data.size, n)
    blocks = [data[lo:hi] for lo, hi in bounds]
    if residual is not None:
        residual[:] = 0
    dropped = [residual[lo:hi] for lo, hi in bounds] if residual is not None else None
    if n == 1:
        finish(op, blocks[me], n)
        return
    right, left = (me + 1) % n, (me - 1) % n
    cuts = [_Encoded(b.size, codec, segment_bytes) for b in blocks]
    width = max(len(c.segments) for c in cuts)
    gather = team.phase(1)
    # The all-gather's receives first: a finished block may come before this
    # member's reduce-scatter ends.
    gathered = [cut.buffer() for cut in cuts]
    arrivals = [[gather.recv(left, step * width + j, cuts[block].frame(gathered[block], j))
                 for j in range(len(cuts[block].segments))]
                for step, block in ((s, (me - s - 1) % n) for s in range(n - 1))]
    decoded = np.empty(max(b.size for b in blocks), data.dtype)

    def received(block: int, step: int) -> tuple[list[Awaitable[None]], NDArray[np.uint8]]:
        into = cuts[block].buffer()
        return [team.recv(left, step * width + j, cuts[block].frame(into, j))
                for j in range(len(cuts[block].segments))], into

    def send_encoded(to: Team, tag: int, block: int, lo: int, hi: int,
                     frame: NDArray[np.uint8], scale: int = 1) -> None:
        values = blocks[block][lo:hi]
        codec.encode(values, frame)
        to.send(right, tag, frame)
        if dropped is not None:  # what the frame says less than the values, times scale
            kept = dropped[block][lo:hi]
            codec.decode(frame, kept)
            with np.errstate(over="ignore", invalid="ignore"):
                np.subtract(values, kept, out=kept)
                kept *= scale

    first = (me - 1) % n
    sent = cuts[first].buffer()
    for j, (lo, hi) in enumerate(cuts[first].segments):
        send_encoded(team, j, first, lo, hi, cuts[first].frame(sent, j))
    posted = [received((me - 2) % n, 0)]
    for step in range(n - 1):
        block = (me - step - 2) % n
        waits, into = posted[step]
        if step + 1 < n - 1:
            posted.append(received((me - step - 3) % n, step + 1))
        out = cuts[block].buffer()
        for j, (lo, hi) in enumerate(cuts[block].segments):
            await waits[j]
            mine, part = blocks[block][lo:hi], decoded[:hi - lo]
            codec.decode(cuts[block].frame(into, j), part)
            with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN as IEEE gives them
                np.add(mine, part, out=mine)
            if step < n - 2:
                send_encoded(team, (step + 1) * width + j, block, lo, hi,
                             cuts[block].frame(out, j))
            else:  # this member's own block, finished: encoded once, for everyone
                finish(op, mine, n)
                frame = cuts[block].frame(gathered[block], j)
                send_encoded(gather, j, block, lo, hi, frame, n if op is ReduceOp.AVG else 1)
                codec.decode(frame, mine)
    for step in range(n - 1):
        block = (me - step - 1) % n
        for j, (lo, hi) in enumerate(cuts[block].segments):
            await arrivals[step][j]
            frame = cuts[block].frame(gathered[block], j)
            if step < n - 2:
                gather.send(right, (step + 1) * width + j, frame)
            codec.decode(frame, blocks[block][lo:hi])
    await team.flush()
    await gather.flush()


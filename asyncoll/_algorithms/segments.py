"""How a block of elements is cut into segments that travel as separate frames.

Pipelined algorithms send a block as several frames so that the receiver
can reduce or forward one segment while the next is still on the wire. Both
sides compute the same cut from the block's size alone.
"""

from __future__ import annotations

#: Most segments one block is cut into: bounds the number of frames (and
#: steps) of a huge array; its segments grow instead.
MAX_SEGMENTS = 1024


def segment_bounds(start: int, stop: int, itemsize: int,
                   segment_bytes: int) -> list[tuple[int, int]]:
    """Cut elements [start, stop) into consecutive (lo, hi) segments of about segment_bytes.

    An empty block has no segments.

    >>> segment_bounds(0, 10, 4, 16)
    [(0, 4), (4, 8), (8, 10)]
    """
    count = stop - start
    if count <= 0:
        return []
    per = max(1, segment_bytes // max(1, itemsize), -(-count // MAX_SEGMENTS))
    return [(lo, min(lo + per, stop)) for lo in range(start, stop, per)]

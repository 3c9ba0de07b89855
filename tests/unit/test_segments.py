"""segment_bounds: how a block is cut into frames for pipelining."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncoll._algorithms.segments import MAX_SEGMENTS, segment_bounds

pytestmark = pytest.mark.timeout(60)


@given(start=st.integers(0, 10**6), count=st.integers(0, 10**8),
       itemsize=st.sampled_from([1, 2, 4, 8, 16, 32]),
       segment_bytes=st.integers(1, 1 << 22))
def test_segments_cover_the_block_in_order_and_are_bounded_in_number(
        start: int, count: int, itemsize: int, segment_bytes: int) -> None:
    bounds = segment_bounds(start, start + count, itemsize, segment_bytes)

    if count == 0:
        assert bounds == []
        return
    assert bounds[0][0] == start and bounds[-1][1] == start + count
    assert all(hi == lo for (_, hi), (lo, _) in zip(bounds, bounds[1:]))
    assert all(hi > lo for lo, hi in bounds)
    assert len(bounds) <= MAX_SEGMENTS
    sizes = {hi - lo for lo, hi in bounds[:-1]}
    assert len(sizes) <= 1, "all segments but the last have one size"


def test_segments_hold_about_segment_bytes_and_at_least_one_element() -> None:
    assert segment_bounds(0, 10, 4, 16) == [(0, 4), (4, 8), (8, 10)]
    assert segment_bounds(5, 8, 8, 1) == [(5, 6), (6, 7), (7, 8)]
    assert segment_bounds(0, 3, 4, 1 << 20) == [(0, 3)]

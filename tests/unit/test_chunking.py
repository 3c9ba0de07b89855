"""chunk_bounds: one contiguous chunk per part, sizes within one, bigger first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncoll._algorithms.chunking import chunk_bounds

pytestmark = pytest.mark.timeout(60)

COUNTS = st.integers(min_value=0, max_value=10**7)
PARTS = st.integers(min_value=1, max_value=300)


@given(count=COUNTS, parts=PARTS)
def test_chunks_cover_the_range_contiguously_in_order(count: int, parts: int) -> None:
    bounds = chunk_bounds(count, parts)

    assert len(bounds) == parts
    assert bounds[0][0] == 0
    assert bounds[-1][1] == count
    for (_, stop), (start, _) in zip(bounds, bounds[1:]):
        assert stop == start
    assert all(start <= stop for start, stop in bounds)


@given(count=COUNTS, parts=PARTS)
def test_chunk_sizes_differ_by_at_most_one_with_bigger_chunks_first(count: int,
                                                                    parts: int) -> None:
    sizes = [stop - start for start, stop in chunk_bounds(count, parts)]

    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)
    assert sum(sizes) == count
    assert sizes.count(count // parts + 1) == count % parts


def test_docstring_example() -> None:
    assert chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]


def test_not_divisible_count() -> None:
    bounds = chunk_bounds(10_007, 4)

    assert [b - a for a, b in bounds] == [2502, 2502, 2502, 2501]


@pytest.mark.parametrize("parts", [1, 2, 7])
def test_zero_elements_give_parts_empty_chunks(parts: int) -> None:
    assert chunk_bounds(0, parts) == [(0, 0)] * parts


@given(data=st.data(), parts=st.integers(min_value=2, max_value=64))
def test_fewer_elements_than_parts_give_single_elements_then_empty_chunks(
        data: st.DataObject, parts: int) -> None:
    count = data.draw(st.integers(min_value=1, max_value=parts - 1))

    bounds = chunk_bounds(count, parts)

    assert bounds[:count] == [(i, i + 1) for i in range(count)]
    assert bounds[count:] == [(count, count)] * (parts - count)


def test_one_part_is_the_whole_range() -> None:
    assert chunk_bounds(5, 1) == [(0, 5)]


@pytest.mark.parametrize("parts", [0, -1, -100])
def test_fewer_than_one_part_raises_value_error_naming_it(parts: int) -> None:
    with pytest.raises(ValueError, match=f"parts must be >= 1, got {parts}"):
        chunk_bounds(10, parts)


@pytest.mark.parametrize("count", [-1, -10])
def test_negative_count_raises_value_error_naming_it(count: int) -> None:
    with pytest.raises(ValueError, match=f"count must be >= 0, got {count}"):
        chunk_bounds(count, 2)

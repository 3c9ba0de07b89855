"""The compact wire forms: rank lists as runs, and the packed directory."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncoll._wire.compact import (
    pack_directory,
    pack_runs,
    runs_count,
    unpack_directory,
    unpack_runs,
)
from asyncoll.errors import ProtocolError

RANKS = st.lists(st.integers(min_value=-5, max_value=70), max_size=40)


@given(ranks=RANKS)
def test_runs_give_back_the_ranks_in_order(ranks: list[int]) -> None:
    runs = pack_runs(ranks)

    assert unpack_runs(runs) == tuple(ranks)
    assert runs_count(runs) == len(ranks)
    assert len(runs) <= 3 * ((len(ranks) + 1) // 2)  # never much longer than the list


@given(first=RANKS, second=RANKS)
def test_equal_lists_and_only_they_have_equal_runs(first: list[int], second: list[int]) -> None:
    assert (pack_runs(first) == pack_runs(second)) == (first == second)


@pytest.mark.parametrize("ranks, runs", [
    (range(4096), (0, 4096, 1)),
    (range(7, 4096, 8), (7, 512, 8)),
    ((3, 2, 1, 0), (3, 4, -1)),
    ((5,), (5, 1, 1)),
    ((0, 1, 2, 10, 11), (0, 3, 1, 10, 2, 1)),
    ((), ()),
])
def test_common_groups_take_a_run_or_two(ranks: tuple[int, ...], runs: tuple[int, ...]) -> None:
    assert pack_runs(tuple(ranks)) == runs


@pytest.mark.parametrize("runs", [(0, 1), (0, 0, 1), (0, -3, 1), (0, 1, 1, 5)])
def test_malformed_runs_are_a_protocol_error(runs: tuple[int, ...]) -> None:
    with pytest.raises(ProtocolError, match="triples with counts of at least 1"):
        unpack_runs(runs)


PLACES = st.tuples(st.sampled_from(["10.0.0.1", "10.0.0.2", "::1", ""]),
                   st.integers(min_value=0, max_value=65535),
                   st.sampled_from(["node-a", "node-b", "ü"]))


@given(peers=st.lists(PLACES, max_size=30).flatmap(
    lambda peers: st.permutations(peers) if peers else st.just(peers)))
def test_the_directory_gives_back_every_rank_s_place(peers: list[tuple[str, int, str]]) -> None:
    assert unpack_directory(pack_directory(peers)) == peers


def test_the_directory_names_each_host_once() -> None:
    peers = [(f"10.0.0.{r // 64}", 40000 + r, f"node-{r // 64}") for r in range(4096)]

    blob = pack_directory(peers)

    assert unpack_directory(blob) == peers
    assert len(blob) < 4096 * 2 + 64 * 40  # a port per rank; each host once, and its ranks

"""The in-memory mesh: a second implementation of the transport's seams.

The algorithms and the group layer's failure handling run over it as they do
over TCP, with every rank in this process and no socket: what they need of a
transport is the seam, and nothing of TCP.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from asyncoll._algorithms.doubling import recursive_doubling_all_reduce
from asyncoll._algorithms.ring import all_reduce_scratch_elements, ring_all_reduce
from asyncoll._algorithms.team import Team
from asyncoll._algorithms.tree import tree_broadcast
from asyncoll._group.faults import GroupFaults
from memory_mesh import memory_meshes  # tests/transport/memory_mesh.py
from asyncoll._wire.frames import Fingerprint, Operation
from asyncoll.errors import CollectiveTimeoutError, MismatchError, PeerLostError
from asyncoll.types import ReduceOp

pytestmark = pytest.mark.timeout(30)

SUM = Fingerprint(Operation.ALL_REDUCE, 1)


def teams(size: int, seq: int = 1, fingerprint: Fingerprint = SUM) -> list[Team]:
    return [Team(mesh, range(size), 0, seq, fingerprint=fingerprint)
            for mesh in memory_meshes(size)]


@pytest.mark.parametrize("size, count", [(2, 10), (3, 1001), (4, 0), (5, 77)])
async def test_ring_all_reduce_over_memory_matches_numpy(size, count):
    arrays = [np.arange(count, dtype=np.float64) * (rank + 1) for rank in range(size)]

    async def run(team, data):
        scratch = np.empty(all_reduce_scratch_elements(data.size, team.size), data.dtype)
        await ring_all_reduce(team, data, ReduceOp.SUM, scratch, 64)
        await team.flush()

    await asyncio.gather(*(run(t, a) for t, a in zip(teams(size), arrays)))
    for data in arrays:
        np.testing.assert_array_equal(data, np.arange(count) * sum(range(1, size + 1)))


@pytest.mark.parametrize("size", [1, 3, 6])
async def test_doubling_and_tree_over_memory_match_numpy(size):
    maxima = [np.array([rank, -rank], dtype=np.int32) for rank in range(size)]
    copies = [np.full(3, rank, dtype=np.int16) for rank in range(size)]

    async def run(team, mine, copy):
        await recursive_doubling_all_reduce(team, mine, ReduceOp.MAX, np.empty_like(mine))
        await tree_broadcast(team.phase(1), copy, size - 1)
        await team.flush()

    await asyncio.gather(*(run(t, m, c) for t, m, c in zip(teams(size), maxima, copies)))
    assert all(m.tolist() == [size - 1, 0] for m in maxima)
    assert all(c.tolist() == [size - 1] * 3 for c in copies)


async def test_ranks_running_different_operations_fail_with_mismatch():
    meshes = memory_meshes(2)
    faults = [GroupFaults(mesh) for mesh in meshes]
    for fault in faults:
        fault.register(0, (0, 1))
    other = Fingerprint(Operation.BROADCAST, 1, root=0)

    async def as_the_group_layer_does(rank, call, fingerprint):
        faults[rank].begin(0, 1, fingerprint)
        try:
            await asyncio.wait_for(call, 5)
        except MismatchError as exc:  # the first failure breaks the group everywhere
            faults[rank].abort(0, 1, exc, (0, 1))
            return exc
        return None

    data = [np.ones(4, np.float32), np.ones(4, np.float32)]
    results = await asyncio.gather(
        as_the_group_layer_does(0, recursive_doubling_all_reduce(
            Team(meshes[0], (0, 1), 0, 1, fingerprint=SUM), data[0], ReduceOp.SUM,
            np.empty(4, np.float32)), SUM),
        as_the_group_layer_does(1, tree_broadcast(
            Team(meshes[1], (0, 1), 0, 1, fingerprint=other), data[1], 0), other))
    assert all(isinstance(r, MismatchError) for r in results), results
    for error in results:
        assert "all_reduce on rank 0" in str(error) and "broadcast on rank 1" in str(error)


async def test_a_lost_peer_fails_the_survivors_waiting_for_it_naming_it():
    meshes = memory_meshes(3)
    faults = [GroupFaults(mesh) for mesh in meshes]
    for fault in faults:
        fault.register(0, (0, 1, 2))
    waiting = [meshes[r].recv_into(2, (0, 1, 0), memoryview(bytearray(4))) for r in (0, 1)]
    meshes[0].lose(2)  # rank 2 died; rank 0 saw its connection break, rank 1 did not
    for received in waiting:
        with pytest.raises(PeerLostError) as info:
            await asyncio.wait_for(received, 1)
        assert info.value.rank == 2 and info.value.host == "memory"
    assert isinstance(faults[1].error(0), PeerLostError)  # through rank 0's ABORT


async def test_a_frame_that_does_not_fit_fails_its_receive_as_the_listener_words_it():
    # The group layer (GroupFaults, the listener) names the group and operation.
    meshes = memory_meshes(2)
    faults = [GroupFaults(mesh) for mesh in meshes]
    other = Fingerprint(Operation.BROADCAST, 1, root=0)
    mismatched = meshes[1].recv_into(0, (7, 1, 0), memoryview(bytearray(4)), SUM)
    wrong_size = meshes[1].recv_into(0, (7, 2, 0), memoryview(bytearray(4)), SUM)
    await meshes[0].send(1, (7, 1, 0), memoryview(bytearray(4)), other)
    await meshes[0].send(1, (7, 2, 0), memoryview(bytearray(8)), SUM)
    meshes[1].peer_left(0, "h0")
    departed = meshes[1].recv_into(0, (7, 3, 0), memoryview(bytearray(4)), SUM)

    with pytest.raises(MismatchError, match="ranks 1 and 0 called operation #1 of group 7 "
                       "differently .*all_reduce on rank 1, broadcast on rank 0"):
        await mismatched
    with pytest.raises(MismatchError, match="rank 0 sent 8 bytes for step 0 of operation #2 "
                       "on group 7; this rank expected 4"):
        await wrong_size
    with pytest.raises(MismatchError, match=r"rank 0 on h0 left the job \(destroy_process_grou"):
        await departed
    assert faults[1].error(7) is None  # the transport only failed the receives


async def test_without_a_listener_the_transport_words_a_plain_error_naming_no_group():
    # A mesh alone (no group layer above it) still fails what does not fit.
    meshes = memory_meshes(2)
    other = Fingerprint(Operation.BROADCAST, 1, root=0)
    mismatched = meshes[1].recv_into(0, (7, 1, 0), memoryview(bytearray(4)), SUM)
    wrong_size = meshes[1].recv_into(0, (7, 2, 0), memoryview(bytearray(4)), SUM)
    await meshes[0].send(1, (7, 1, 0), memoryview(bytearray(4)), other)
    await meshes[0].send(1, (7, 2, 0), memoryview(bytearray(8)), SUM)
    meshes[1].peer_left(0, "h0")
    departed = meshes[1].recv_into(0, (7, 3, 0), memoryview(bytearray(4)), SUM)

    errors = []
    for received in (mismatched, wrong_size, departed):
        with pytest.raises(MismatchError) as info:
            await received
        errors.append(str(info.value))
    assert errors == [
        "rank 0 sent frame (7, 1, 0) with another fingerprint than this receive's (operation: "
        "all_reduce here, broadcast on rank 0; root: -1 here, 0 on rank 0)",
        "rank 0 sent 8 bytes as frame (7, 2, 0); this receive expected 4",
        "rank 0 on h0 left the job while this rank still expected data from it"]


async def test_a_timeout_told_only_by_numbers_names_the_rank_waited_for_in_torchs_words():
    # An arena's control line says only: rank 2 gave up on operation 5 with a
    # timeout of 3 s, waiting for rank 1.
    faults = GroupFaults(memory_meshes(3)[0])
    error = faults.gave_up(0, 5, 2, "timeout", 1, where=" (its shared-memory arena)",
                           waited=3.0)
    assert isinstance(error, CollectiveTimeoutError)
    assert error.waiting_for == (1,) and error.seconds == 3.0
    assert str(error) == ("rank 2 abandoned operation #5 of group 0 (its shared-memory "
                          "arena): it waited 3 s for data from rank 1. Timed out waiting "
                          "3000ms")


async def test_a_timeout_whose_words_came_keeps_them_and_the_rank_waited_for():
    faults = GroupFaults(memory_meshes(3)[0])
    said = ("all_reduce #5 on group 0 (ranks [0, 1, 2]) did not complete within 3 s; still "
            "waiting for data from rank 1. Timed out waiting 3000ms")
    error = faults.gave_up(0, 5, 2, "timeout", 1, said)
    assert isinstance(error, CollectiveTimeoutError) and error.waiting_for == (1,)
    assert str(error) == f"rank 2 abandoned operation #5 of group 0: {said}"


async def test_a_timeout_names_the_peer_its_sends_wait_for_where_no_receive_waits():
    meshes = memory_meshes(2)
    team = Team(meshes[0], (0, 1), 0, 1)
    blocked = asyncio.get_running_loop().create_future()
    meshes[0].send = lambda *args, **kwargs: blocked  # type: ignore[method-assign]
    team.send(1, 0, np.ones(4, dtype=np.uint8))
    assert team.waiting_for() == [1]
    blocked.set_result(None)
    assert team.waiting_for() == []


async def test_a_timeout_relayed_by_a_peer_that_waited_for_this_rank_names_that_peer():
    # Rank 2 timed out waiting for rank 0 (this rank), which still waited for rank 1:
    # rank 0 does not wait for itself; it waits, now in vain, for rank 2.
    faults = GroupFaults(memory_meshes(3)[0])
    said = ("all_reduce #3 on group 0 (ranks [0, 1, 2]) did not complete within 3 s; still "
            "waiting for data from rank 0. Timed out waiting 3000ms")
    error = faults.gave_up(0, 3, 2, "timeout", 0, said)
    assert isinstance(error, CollectiveTimeoutError) and error.waiting_for == (2,)
    assert "rank 2" in str(error)

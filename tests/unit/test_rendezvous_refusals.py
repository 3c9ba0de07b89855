"""A refused peer fails the rest of its rendezvous at once (issue 59), unless its job is
elastic or runs; and which waiting peers are told what they wait for."""

from __future__ import annotations

import pytest

from asyncoll._defaults import PROTOCOL_VERSION, REFUSAL_REMEMBERED_S
from asyncoll._wire.messages import MissingReply, WhoIsMissing

from .test_elastic_state import check, elastic_join, pend, start
from .test_rendezvous_state import JOB, Harness, errors, welcomes

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def h() -> Harness:
    return Harness()


@pytest.mark.parametrize("bad, reason", [
    ({"world_size": 3, "rank": 2}, "world size 3 disagrees with the world size 2"),
    ({"world_size": 2, "rank": 5}, "requested rank 5 is out of range for world size 2"),
    ({"world_size": 2, "rank": 0}, "rank 0 is already taken"),
    ({"world_size": 2, "rank": 1, "version": PROTOCOL_VERSION - 1},
     f"protocol version {PROTOCOL_VERSION - 1}"),
])
def test_a_refused_peer_fails_the_peers_waiting_naming_it_and_the_reason(
        h: Harness, bad: dict[str, int], reason: str) -> None:
    h.join(1, rank=0, world_size=2)

    failed = errors(h.join(7, hostname="node-x", **bad))  # type: ignore[arg-type]

    assert set(failed) == {1, 7}
    assert reason in failed[7].message
    assert failed[1].code == "rendezvous"
    rank = bad["rank"]
    assert failed[1].message.startswith(
        f"the rendezvous of job {JOB!r} failed: the coordinator refused a peer from node-x "
        f"(pid 1007) asking for rank {rank} of world size {bad['world_size']}: ")
    assert reason in failed[1].message
    assert not h.state.job_is_active(JOB)


def test_peers_joining_soon_after_a_refusal_fail_too_then_the_job_id_is_free_again(
        h: Harness) -> None:
    # The refused peer came first: those of the same launch that come after it fail too.
    errors(h.join(7, rank=5, world_size=2, hostname="node-x"))
    h.now = REFUSAL_REMEMBERED_S - 1

    failed = errors(h.join(1, rank=0, world_size=2))

    assert failed[1].code == "rendezvous"
    assert "refused a peer from node-x (pid 1007) asking for rank 5" in failed[1].message
    assert f"{REFUSAL_REMEMBERED_S - 1:.1f} s ago" in failed[1].message
    h.now = REFUSAL_REMEMBERED_S + 1
    assert h.join(1, rank=0, world_size=2) == []
    assert set(welcomes(h.join(2, rank=1, world_size=2))) == {1, 2}


def test_a_refusal_fails_only_its_own_job(h: Harness) -> None:
    h.join(1, rank=0, world_size=2, job="other")
    h.join(2, rank=0, world_size=2)

    failed = errors(h.join(3, rank=3, world_size=2))

    assert set(failed) == {2, 3}
    assert set(welcomes(h.join(4, rank=1, world_size=2, job="other"))) == {1, 4}


def test_an_elastic_rendezvous_waits_on_after_a_refusal_and_completes(h: Harness) -> None:
    h.send(1, elastic_join(1, world_size=2))

    refused = errors(h.send(7, elastic_join(7, world_size=3)))

    assert set(refused) == {7} and "disagrees" in refused[7].message
    assert set(welcomes(h.send(2, elastic_join(2, world_size=2)))) == {1, 2}


def test_a_running_elastic_job_goes_on_when_a_newcomer_is_refused(h: Harness) -> None:
    ranks = start(h, 2, max_size=3)
    pend(h, 20, world_size=2, max_size=3)

    refused = errors(h.send(21, elastic_join(21, world_size=2, max_size=3)))

    assert set(refused) == {21} and "max_size of 3" in refused[21].message
    answers = check(h, list(ranks.values()))
    assert sorted(answers) == sorted(ranks.values())
    assert all(a.changed for a in answers.values())  # the pending process is still there


def test_one_waiting_peer_per_host_is_told_who_is_missing(h: Harness) -> None:
    for conn, host in [(1, "node-a"), (2, "node-a"), (3, "node-b"), (4, "node-b")]:
        h.join(conn, rank=conn - 1, world_size=5, hostname=host)
    h.now = 5.0

    lines = {conn: h.send(conn, WhoIsMissing(job=JOB))[0].message for conn in (1, 2, 3, 4)}

    told = MissingReply(line=f"waiting for 1 of 5 ranks of job {JOB!r}: rank 4 has not "
                             "joined")
    assert lines == {1: told, 2: MissingReply(line=""), 3: told, 4: MissingReply(line="")}
    # Anyone else asking (an operator's tool) is told.
    assert h.send(99, WhoIsMissing(job=JOB))[0].message == told


def test_a_pending_process_is_told_that_it_waits_for_the_members_reconfigure(
        h: Harness) -> None:
    start(h, 2)
    pend(h, 20, world_size=2)

    (reply,) = h.send(20, WhoIsMissing(job=JOB))

    assert reply.message == MissingReply(
        line=f"pending admission to running job {JOB!r} (generation 0, 2 members): it "
             "joins when they next call reconfigure()")

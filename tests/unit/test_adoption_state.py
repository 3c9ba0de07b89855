"""A restarted coordinator taking jobs back from their members, with the fake clock (issue 28).

Connections 101.. are the members' new connections to the restarted
coordinator; rank r re-registers on connection 101 + r unless a test says.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging

import pytest

from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll.cli import table
from asyncoll._wire.compact import pack_runs
from asyncoll._wire.messages import (
    Adopted,
    Barrier,
    CheckMembership,
    GroupCreated,
    GroupRecord,
    Heartbeat,
    Join,
    MemberGone,
    MembershipState,
    MembersPending,
    NewGroup,
    Ok,
    Reconfigure,
    Rejoin,
    Status,
    StatusReply,
    Welcome,
)

from .test_rendezvous_state import JOB, Harness, by_conn, errors, notices

pytestmark = pytest.mark.timeout(60)

GRACE = 10.0


@pytest.fixture
def h() -> Harness:
    return Harness()


def rejoin(rank: int, *, world_size: int = 4, generation: int = 0, elastic: int = 1,
           groups: tuple[GroupRecord, ...] = (), gone: tuple[int, ...] = (),
           new_group_calls: int = 0, checks: int = 0, epoch: int = 0,
           digest: str = "d1", pid: int = 0, job: str = JOB) -> Rejoin:
    """Rank ``rank``'s re-registration; group 0 of every rank is always in it."""
    everyone = GroupRecord(group_id=0, runs=pack_runs(tuple(range(world_size))), barriers=0)
    return Rejoin(job=job, rank=rank, world_size=world_size, generation=generation,
                  version=PROTOCOL_VERSION, host=f"10.0.0.{rank}", port=40000 + rank,
                  hostname=f"node-{rank}", pid=pid or 1000 + rank, heartbeat_timeout=GRACE,
                  elastic=elastic, min_size=0, max_size=0, directory_digest=digest,
                  groups=(everyone, *groups), new_group_calls=new_group_calls, checks=checks,
                  gone=pack_runs(tuple(sorted(gone))), epoch=epoch)


def conn_of(rank: int) -> int:
    return 101 + rank


def send_all(h: Harness, ranks: list[int], **fields: object) -> list:
    replies = []
    for rank in ranks:
        replies += h.send(conn_of(rank), rejoin(rank, **fields))  # type: ignore[arg-type]
    return replies


def adopted(replies: list) -> dict[int, Adopted]:
    return {conn: r.message for conn, r in by_conn(replies).items()
            if isinstance(r.message, Adopted)}


# -- adoption --------------------------------------------------------------------------


@pytest.mark.parametrize("order", list(itertools.permutations(range(4)))[::5])
def test_a_job_is_adopted_once_every_member_re_registered_in_any_order(
        h: Harness, order: tuple[int, ...], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "asyncoll.coordinator")
    for rank in order[:3]:
        assert h.send(conn_of(rank), rejoin(rank, generation=2)) == []
    assert h.state.status(JOB, h.now).jobs[0].state == "adopting"

    replies = h.send(conn_of(order[3]), rejoin(order[3], generation=2))

    answers = adopted(replies)
    assert set(answers) == {conn_of(r) for r in range(4)}
    assert all(a == Adopted(generation=2, members=4) for a in answers.values())
    assert "adopted job 'job-1': 4 members, generation 2" in caplog.text
    status = h.state.status(JOB, h.now).jobs[0]
    assert (status.state, status.generation, status.world_size) == ("running", 2, 4)
    assert [(m.rank, m.host, m.state) for m in status.members] == [
        (r, f"10.0.0.{r}", "running") for r in range(4)]
    assert "job-1  running 4/4 gen 2" in table([status])  # as asyncoll status shows it


def test_with_a_member_missing_the_job_is_adopted_at_the_grace_and_it_is_lost(
        h: Harness) -> None:
    assert send_all(h, [0, 1, 2]) == []
    assert h.tick(GRACE - 0.01) == []

    replies = h.tick(GRACE)

    assert set(adopted(replies)) == {conn_of(r) for r in (0, 1, 2)}
    told = notices(replies)
    for rank in (0, 1, 2):
        (gone,) = told[conn_of(rank)]
        assert isinstance(gone, MemberGone) and gone.rank == 3 and gone.how == "lost"
        assert "did not re-register with the restarted coordinator within 10 s" in gone.reason
    job = h.state.status(JOB, h.now).jobs[0]
    assert [m.state for m in job.members] == ["running"] * 3 + ["left"]


def test_a_rank_a_member_knows_gone_is_not_waited_for_nor_announced(h: Harness) -> None:
    replies = send_all(h, [0, 1]) + h.send(conn_of(2), rejoin(2, gone=(3,)))

    assert set(adopted(replies)) == {conn_of(r) for r in (0, 1, 2)}
    assert notices(replies) == {}
    answer = check_all(h, [0, 1, 2])
    assert all(a.changed == 1 and a.gone == (3,) for a in answer.values())


def test_without_a_majority_the_grace_does_not_adopt(h: Harness) -> None:
    send_all(h, [0, 1])
    assert h.tick(GRACE * 5) == []
    assert h.state.status(JOB, h.now).jobs[0].state == "adopting"
    replies = h.send(conn_of(2), rejoin(2))  # 3 of 4 now: adopted at the next tick
    assert replies == []
    assert set(adopted(h.tick(GRACE * 5 + 0.1))) == {conn_of(r) for r in (0, 1, 2)}


@pytest.mark.parametrize("field, value, words", [
    ("generation", 3, "generation 3, and ranks 0, 1 with 2"),
    ("world_size", 5, "world size 5, and ranks 0, 1 with 4"),
    ("digest", "other", "directory (hash) other, and ranks 0, 1 with d1"),
    ("elastic", 0, "elastic bounds (False, 0, 0), and ranks 0, 1 with (True, 0, 0)"),
])
def test_a_disagreeing_re_registration_is_refused_and_never_merged(
        h: Harness, field: str, value: object, words: str) -> None:
    send_all(h, [0, 1], generation=2)
    fields: dict[str, object] = {"generation": 2, field: value}
    (refusal,) = errors(h.send(conn_of(2), rejoin(2, **fields))).values()  # type: ignore[arg-type]

    assert refusal.code == "rendezvous"
    assert f"rank 2 re-registered job 'job-1' with {words}" in refusal.message
    assert "does not merge them" in refusal.message
    # The others are not affected: the job is adopted without rank 2 at the grace.
    assert h.send(conn_of(3), rejoin(3, generation=2)) == []
    assert set(adopted(h.tick(GRACE))) == {conn_of(0), conn_of(1), conn_of(3)}


def test_groups_with_other_ranks_under_one_id_are_refused(h: Harness) -> None:
    mine = GroupRecord(group_id=1, runs=pack_runs((0, 1)), barriers=0)
    theirs = GroupRecord(group_id=1, runs=pack_runs((1, 0)), barriers=0)
    send_all(h, [0, 1], groups=(mine,))
    (refusal,) = errors(h.send(conn_of(2), rejoin(2, groups=(theirs,)))).values()
    assert refusal.code == "rendezvous"
    assert ("re-registered group 1 of job 'job-1' with ranks [1, 0] (2 ranks), and ranks 0, 1 "
            "with ranks [0, 1] (2 ranks)") in refusal.message


def test_the_same_process_again_replaces_its_first_re_registration(h: Harness) -> None:
    send_all(h, [0, 1, 2])
    h.send(200, rejoin(2))  # rank 2 gave up waiting on conn 103, and came back on 200
    assert h.disconnect(conn_of(2)) == []  # the old connection's end does not count

    answers = adopted(h.send(conn_of(3), rejoin(3)))

    assert set(answers) == {conn_of(0), conn_of(1), 200, conn_of(3)}


def test_a_re_registration_after_adoption_without_it_is_excluded(h: Harness) -> None:
    send_all(h, [0, 1, 2])
    h.tick(GRACE)
    (refusal,) = errors(h.send(conn_of(3), rejoin(3))).values()
    assert refusal.code == "excluded"
    assert "rank 3 of job 'job-1' is gone for the other members" in refusal.message
    assert "join again with init_process_group(elastic=True)" in refusal.message


def test_a_member_reconnecting_to_the_adopted_job_keeps_its_rank(h: Harness) -> None:
    send_all(h, [0, 1, 2, 3])
    (answer,) = adopted(h.send(300, rejoin(1))).values()
    assert answer.generation == 0
    assert h.disconnect(conn_of(1)) == []  # the old connection: nothing departs
    assert by_conn(h.send(300, Barrier(group_id=0, seq=1, timeout=5.0))) == {}


def test_another_job_of_the_same_id_is_refused(h: Harness) -> None:
    send_all(h, [0, 1, 2, 3])
    (refusal,) = errors(h.send(300, rejoin(1, pid=4242))).values()
    assert refusal.code == "rendezvous"
    assert "without this process as rank 1" in refusal.message


def test_a_re_registered_connection_that_closes_is_missing_again(h: Harness) -> None:
    send_all(h, [0, 1, 2])
    h.disconnect(conn_of(2))
    assert h.tick(GRACE) == []  # 2 of 4: no majority
    h.disconnect(conn_of(0))
    h.disconnect(conn_of(1))
    assert not h.state.job_is_active(JOB)


def test_the_rendezvous_deadline_does_not_expire_an_adopting_job(h: Harness) -> None:
    send_all(h, [0, 1])
    assert h.tick(1e6) == []
    assert h.state.job_is_active(JOB)


def test_requests_before_adoption_are_refused(h: Harness) -> None:
    send_all(h, [0])
    (refusal,) = errors(h.send(conn_of(0), NewGroup.of((0, 1), 5.0))).values()
    assert refusal.code == "protocol" and "needs a completed join first" in refusal.message


def test_malformed_or_old_re_registrations_are_refused(h: Harness) -> None:
    bad_version = dataclasses.replace(rejoin(0), version=PROTOCOL_VERSION - 1)
    (refusal,) = errors(h.send(1, bad_version)).values()
    assert refusal.code == "protocol" and "protocol version" in refusal.message
    (refusal,) = errors(h.send(2, rejoin(5))).values()
    assert "malformed re-registration" in refusal.message
    (refusal,) = errors(h.send(3, rejoin(1, gone=(1,)))).values()
    assert "counts itself gone" in refusal.message


# -- what the adopted job remembers ------------------------------------------------------


def check_all(h: Harness, ranks: list[int]) -> dict[int, MembershipState]:
    replies = []
    for rank in ranks:
        replies += h.send(conn_of(rank), CheckMembership(timeout=5.0))
    return {conn: r.message for conn, r in by_conn(replies).items()}  # type: ignore[misc]


def test_the_next_new_group_continues_the_members_count(h: Harness) -> None:
    two = GroupRecord(group_id=2, runs=pack_runs((0, 2)), barriers=0)
    send_all(h, [0, 1, 2, 3], groups=(two,), new_group_calls=3)

    replies = []
    for rank in range(4):
        replies += h.send(conn_of(rank), NewGroup.of((3, 2, 1), 5.0))

    created = {r.message for r in by_conn(replies).values()}
    assert created == {GroupCreated.of(4, (3, 2, 1))}
    status = h.state.status(JOB, h.now).jobs[0]
    assert [(g.group_id, g.ranks) for g in status.groups] == [
        (0, (0, 1, 2, 3)), (2, (0, 2)), (4, (3, 2, 1))]


def test_a_new_group_in_flight_at_the_crash_is_answered_from_the_others(h: Harness) -> None:
    made = GroupRecord(group_id=3, runs=pack_runs((1, 2)), barriers=0)
    # Ranks 0-2 had their answer to call #3; rank 3's request was in flight.
    send_all(h, [0, 1, 2], groups=(made,), new_group_calls=3)
    h.send(conn_of(3), rejoin(3, new_group_calls=2))

    (answer,) = by_conn(h.send(conn_of(3), NewGroup.of((1, 2), 5.0))).values()
    assert answer.message == GroupCreated.of(3, (1, 2))
    # The next call is a new one, which every rank makes.
    assert h.send(conn_of(3), NewGroup.of((0, 1), 5.0)) == []


def test_a_new_group_in_flight_that_failed_for_the_others_fails(h: Harness) -> None:
    send_all(h, [0, 1, 2], new_group_calls=1)  # call #1 timed out for them: no group 1
    h.send(conn_of(3), rejoin(3))
    (refusal,) = errors(h.send(conn_of(3), NewGroup.of((0, 1), 5.0))).values()
    assert refusal.code == "rendezvous"
    assert "new_group call #1 in job 'job-1' failed for the other ranks" in refusal.message


def test_a_new_group_in_flight_with_other_ranks_is_a_mismatch(h: Harness) -> None:
    made = GroupRecord(group_id=1, runs=pack_runs((1, 2)), barriers=0)
    send_all(h, [0, 1, 2], groups=(made,), new_group_calls=1)
    h.send(conn_of(3), rejoin(3))
    (answer,) = errors(h.send(conn_of(3), NewGroup.of((2, 1), 5.0))).values()
    assert answer.code == "mismatch" and "created group 1 of [1, 2]" in answer.message


def test_a_barrier_in_flight_at_the_crash_is_answered_at_once(h: Harness) -> None:
    def everyone(barriers: int) -> tuple[GroupRecord, ...]:
        return (GroupRecord(group_id=0, runs=pack_runs(tuple(range(4))), barriers=barriers),)

    for rank in range(4):
        h.send(conn_of(rank), dataclasses.replace(rejoin(rank),
                                                  groups=everyone(6 if rank else 5)))
    (answer,) = by_conn(h.send(conn_of(0), Barrier(group_id=0, seq=6, timeout=5.0))).values()
    assert answer.message == Ok()
    assert h.send(conn_of(0), Barrier(group_id=0, seq=7, timeout=5.0)) == []  # a new one


def test_a_check_in_flight_at_the_crash_is_answered_at_once(h: Harness) -> None:
    send_all(h, [0, 1, 2], checks=4)
    h.send(conn_of(3), rejoin(3, checks=3))
    (answer,) = by_conn(h.send(conn_of(3), CheckMembership(timeout=5.0))).values()
    assert isinstance(answer.message, MembershipState) and answer.message.changed == 0


def test_the_epoch_continues_above_every_members(h: Harness) -> None:
    send_all(h, [0, 1], epoch=7)
    send_all(h, [2], epoch=9)
    replies = h.tick(GRACE)
    (gone,) = notices(replies)[conn_of(0)]
    assert isinstance(gone, MemberGone) and gone.epoch == 10
    answers = check_all(h, [0, 1, 2])
    assert {(a.changed, a.epoch) for a in answers.values()} == {(1, 10)}


def test_heartbeats_of_an_adopted_member_are_counted_from_the_adoption(h: Harness) -> None:
    h.tick(100.0)
    send_all(h, [0, 1, 2, 3])
    h.tick(100.0 + GRACE - 1)
    for rank in (0, 1, 2):
        h.send(conn_of(rank), Heartbeat(ops=5))
    replies = h.tick(100.0 + GRACE + 0.5)
    assert {n.rank for ns in notices(replies).values() for n in ns
            if isinstance(n, MemberGone)} == {3}


def test_an_adopted_elastic_job_reconfigures_without_its_lost_member(h: Harness) -> None:
    send_all(h, [0, 1, 2], generation=1)
    h.tick(GRACE)
    replies = []
    for rank in (0, 1, 2):
        replies += h.send(conn_of(rank), Reconfigure(timeout=5.0, host="h", port=rank + 1))
    welcomes = {conn: r.message for conn, r in by_conn(replies).items()}
    assert {(w.rank, w.world_size, w.generation) for w in welcomes.values()  # type: ignore[union-attr]
            } == {(0, 3, 2), (1, 3, 2), (2, 3, 2)}
    assert all(isinstance(w, Welcome) for w in welcomes.values())


# -- joins around an adoption ------------------------------------------------------------


def elastic_join(conn: int) -> Join:
    return Join(job=JOB, rank=-1, world_size=4, host=f"10.0.9.{conn}", port=49000 + conn,
                hostname="node-new", pid=9000 + conn, version=PROTOCOL_VERSION,
                timeout=30.0, heartbeat_timeout=GRACE, elastic=1)


@pytest.mark.parametrize("when", ["before", "during"])
def test_an_elastic_join_before_or_during_adoption_is_pending_in_the_adopted_job(
        h: Harness, when: str) -> None:
    if when == "before":
        assert h.send(50, elastic_join(50)) == []  # a replacement reached it first
    send_all(h, [0, 1])
    if when == "during":
        assert h.send(50, elastic_join(50)) == []
    replies = send_all(h, [2], gone=(3,))

    assert set(adopted(replies)) == {conn_of(r) for r in (0, 1, 2)}
    told = notices(replies)
    assert all(isinstance(n[0], MembersPending) for n in told.values()) and len(told) == 3
    replies = []
    for rank in (0, 1, 2):
        replies += h.send(conn_of(rank), Reconfigure(timeout=5.0, host="h", port=rank + 1))
    got = {conn: r.message for conn, r in by_conn(replies).items()}
    assert got[50] == Welcome(rank=3, world_size=4, directory=got[50].directory,  # type: ignore[union-attr]
                              generation=1)


def test_a_plain_join_during_adoption_is_refused(h: Harness) -> None:
    send_all(h, [0, 1])
    join = dataclasses.replace(elastic_join(50), elastic=0)
    (refusal,) = errors(h.send(50, join)).values()
    assert "is being taken back by a restarted coordinator" in refusal.message


def test_a_waiting_rendezvous_of_the_same_id_is_not_taken_over(h: Harness) -> None:
    h.join(50, world_size=4)  # a new, non-elastic job of the same id
    (refusal,) = errors(h.send(conn_of(0), rejoin(0))).values()
    assert "has a new rendezvous of 1 peer(s) waiting" in refusal.message


def test_two_jobs_are_adopted_apart_and_status_says_adopting(h: Harness) -> None:
    send_all(h, [0, 1], job="a", world_size=2)
    h.send(300, rejoin(0, job="b", world_size=3))
    reply = h.state.status("", h.now)
    assert isinstance(reply, StatusReply)
    assert {(j.job, j.state) for j in reply.jobs} == {("a", "running"), ("b", "adopting")}
    assert isinstance(h.send(999, Status(job="b")), list)

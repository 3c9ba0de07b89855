"""Elastic jobs in the coordinator's state machine, with the fake clock (issue 15).

Every membership outcome is decided here: pending joins, membership
checks, reconfigures (deaths during them, late members, newcomers, bounds).
"""

from __future__ import annotations

import pytest

from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll.cli import table
from asyncoll._wire.messages import (
    Barrier,
    CheckMembership,
    Error,
    Join,
    MemberGone,
    MembershipState,
    MembersPending,
    Reconfigure,
    Welcome,
)

from .test_rendezvous_state import JOB, Harness, by_conn, errors, welcomes

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def h() -> Harness:
    return Harness()


def elastic_join(conn: int, *, world_size: int = 4, min_size: int = 0, max_size: int = 0,
                 timeout: float = 30.0, elastic: int = 1, heartbeat_timeout: float = 1e9
                 ) -> Join:
    """A join to the elastic job JOB; heartbeats never expire unless a test asks."""
    return Join(job=JOB, rank=-1, world_size=world_size, host=f"10.0.0.{conn}",
                port=40000 + conn, hostname=f"node-{conn}", pid=1000 + conn,
                version=PROTOCOL_VERSION, timeout=timeout,
                heartbeat_timeout=heartbeat_timeout, elastic=elastic, min_size=min_size,
                max_size=max_size)


def start(h: Harness, size: int = 4, **bounds: int) -> dict[int, int]:
    """An elastic job on connections 1..size; {rank: conn}."""
    replies = []
    for conn in range(1, size + 1):
        replies = h.send(conn, elastic_join(conn, world_size=size, **bounds))
    return {w.rank: conn for conn, w in welcomes(replies).items()}


def pend(h: Harness, conn: int, **join: float) -> list[MembersPending]:
    """Join as a pending process; the only replies are notices to the live members."""
    replies = h.send(conn, elastic_join(conn, **join))  # type: ignore[arg-type]
    assert all(r.request_id == 0 and r.conn != conn and isinstance(r.message, MembersPending)
               for r in replies), replies
    return [r.message for r in replies]


def check(h: Harness, conns: list[int]) -> dict[int, MembershipState]:
    replies = []
    for conn in conns:
        replies += h.send(conn, CheckMembership(timeout=30.0))
    answers = {}
    for conn, reply in by_conn(replies).items():
        assert isinstance(reply.message, MembershipState), reply
        answers[conn] = reply.message
    return answers


def reconfigure(h: Harness, conns: list[int], timeout: float = 30.0) -> list:
    replies = []
    for conn in conns:
        replies += h.send(conn, Reconfigure(timeout=timeout, host=f"10.0.1.{conn}",
                                            port=50000 + conn))
    return replies


def test_survivors_of_a_lost_member_agree_it_changed_and_renumber_in_order(h):
    ranks = start(h)
    h.disconnect(ranks[2])  # kill -9
    survivors = [ranks[0], ranks[1], ranks[3]]
    answers = check(h, survivors)
    assert set(answers) == set(survivors)
    assert {(a.changed, a.gone, a.generation) for a in answers.values()} == {(1, (2,), 0)}

    new = welcomes(reconfigure(h, survivors))
    assert {conn: w.rank for conn, w in new.items()} == {ranks[0]: 0, ranks[1]: 1, ranks[3]: 2}
    assert {(w.world_size, w.generation) for w in new.values()} == {(3, 1)}
    directory = next(iter(new.values())).peers
    assert [p.hostname for p in directory] == ["node-1", "node-2", "node-4"]
    assert [p.rank for p in directory] == [0, 1, 2]
    # Each generation has connections of its own: the addresses given to reconfigure.
    assert [p.port for p in directory] == [50000 + c for c in survivors]
    # The new world works: a barrier of its default group, and nothing changed since.
    assert {r.conn for r in h.send(ranks[0], Barrier(group_id=0, seq=1, timeout=5.0))
            + h.send(ranks[1], Barrier(group_id=0, seq=1, timeout=5.0))
            + h.send(ranks[3], Barrier(group_id=0, seq=1, timeout=5.0))} == set(survivors)
    assert {a.changed for a in check(h, survivors).values()} == {0}


def test_a_check_spanning_a_death_gives_every_asker_the_same_answer(h):
    ranks = start(h, 3)
    first = h.send(ranks[0], CheckMembership(timeout=30.0))  # before it hears of anything
    assert first == []
    h.disconnect(ranks[2])
    rest = h.send(ranks[1], CheckMembership(timeout=30.0))
    answers = {r.conn: r.message for r in rest if r.request_id}
    assert set(answers) == {ranks[0], ranks[1]}
    assert {(a.changed, a.gone) for a in answers.values()} == {(1, (2,))}


def test_a_pending_process_is_admitted_by_the_next_reconfigure_after_the_survivors(h):
    ranks = start(h)
    h.disconnect(ranks[1])
    pend(h, 20)  # pending: no answer yet
    members = [ranks[0], ranks[2], ranks[3]]
    assert {(a.changed, a.pending) for a in check(h, members).values()} == {(1, 1)}
    new = welcomes(reconfigure(h, members))
    assert {conn: w.rank for conn, w in new.items()} == {ranks[0]: 0, ranks[2]: 1,
                                                         ranks[3]: 2, 20: 3}
    assert {w.world_size for w in new.values()} == {4}
    status = h.state.status(JOB, h.now).jobs[0]
    assert (status.generation, status.world_size, len(status.members)) == (1, 4, 4)
    assert "running 4/4 gen 1" in table([status])


def test_status_lists_pending_processes(h):
    start(h, 2)
    h.send(20, elastic_join(20))
    lines = table(h.state.status(JOB, h.now).jobs).splitlines()
    assert [line.split()[-6:-4] for line in lines[1:]] == [["1001", "running"],
                                                          ["1002", "running"],
                                                          ["1020", "pending"]]
    assert all("running 3/2 gen 0" in line for line in lines[1:])


def test_two_pending_processes_arriving_together_join_in_the_order_they_came(h):
    ranks = start(h, 2)
    h.send(31, elastic_join(31))
    h.send(30, elastic_join(30))
    states = {m.state for m in h.state.status(JOB, h.now).jobs[0].members}
    assert states == {"running", "pending"}
    # No member was lost: the pending processes alone are a change.
    assert {(a.changed, a.gone, a.pending) for a in check(h, [ranks[0], ranks[1]]).values()
            } == {(1, (), 2)}
    new = welcomes(reconfigure(h, [ranks[0], ranks[1]]))
    assert {conn: w.rank for conn, w in new.items()} == {ranks[0]: 0, ranks[1]: 1, 31: 2, 30: 3}


def test_a_second_member_killed_during_the_reconfigure_is_left_out_and_it_completes(h):
    ranks = start(h)
    h.disconnect(ranks[3])
    assert reconfigure(h, [ranks[0], ranks[1]]) == []  # waits for rank 2
    replies = h.disconnect(ranks[2])  # dies before calling it
    new = welcomes([r for r in replies if r.request_id])
    assert {conn: w.rank for conn, w in new.items()} == {ranks[0]: 0, ranks[1]: 1}
    # One that called it and then died is left out too.
    h2 = Harness()
    ranks = start(h2, 3)
    reconfigure(h2, [ranks[0], ranks[2]])
    h2.disconnect(ranks[2])
    new = welcomes(reconfigure(h2, [ranks[1]]))
    assert {conn: w.rank for conn, w in new.items()} == {ranks[0]: 0, ranks[1]: 1}


def test_a_member_that_does_not_reconfigure_in_time_is_excluded_with_a_clear_error(h):
    ranks = start(h, 3)
    assert reconfigure(h, [ranks[0], ranks[1]], timeout=5.0) == []
    replies = h.tick(5.0)
    new = welcomes(replies)
    assert {conn: w.rank for conn, w in new.items()} == {ranks[0]: 0, ranks[1]: 1}
    told = [r for r in replies if r.conn == ranks[2]]  # at once, unasked (request 0)
    assert [(r.request_id, r.message.code) for r in told] == [(0, "excluded")]
    refused = errors(h.send(ranks[2], Barrier(group_id=0, seq=1, timeout=5.0)))[ranks[2]]
    assert refused.code == "excluded"
    assert "did not call reconfigure() within 5 s" in refused.message


def test_a_pending_process_that_gives_up_leaves_no_trace(h):
    ranks = start(h, 2)
    pend(h, 20, timeout=3.0)
    gave_up = errors(h.tick(3.0))[20]
    assert gave_up.code == "rendezvous_timeout" and "not admit" in gave_up.message
    assert {a.changed for a in check(h, [ranks[0], ranks[1]]).values()} == {0}
    assert len(h.state.status(JOB, h.now).jobs[0].members) == 2


def test_max_size_refuses_extra_processes_clearly(h):
    ranks = start(h, 2, max_size=3)
    pend(h, 20, world_size=2, max_size=3)
    refused = errors(h.send(21, elastic_join(21, world_size=2, max_size=3)))[21]
    assert refused.code == "rendezvous" and "max_size of 3" in refused.message
    new = welcomes(reconfigure(h, [ranks[0], ranks[1]]))
    assert sorted(w.rank for w in new.values()) == [0, 1, 2]


def test_below_min_size_a_reconfigure_waits_for_a_newcomer_then_completes(h):
    ranks = start(h, 3, min_size=3)
    h.disconnect(ranks[2])
    assert reconfigure(h, [ranks[0], ranks[1]]) == []  # 2 < 3: waits
    new = welcomes(h.send(20, elastic_join(20, world_size=3, min_size=3)))
    assert {conn: w.rank for conn, w in new.items()} == {ranks[0]: 0, ranks[1]: 1, 20: 2}


def test_below_min_size_a_reconfigure_fails_clearly_at_its_deadline(h):
    ranks = start(h, 3, min_size=3)
    h.disconnect(ranks[2])
    reconfigure(h, [ranks[0], ranks[1]], timeout=4.0)
    failed = errors(h.tick(4.0))
    assert set(failed) == {ranks[0], ranks[1]}
    assert all("below the job's min_size of 3" in e.message for e in failed.values())


def test_reconfigure_of_a_job_that_is_not_elastic_is_refused(h):
    ranks = h.start_job(2)
    refused = errors(h.send(ranks[0], Reconfigure(timeout=5.0, host="h", port=1)))[ranks[0]]
    assert refused.code == "configuration" and "not elastic" in refused.message


def test_a_plain_join_to_a_running_elastic_job_is_refused_and_bounds_are_checked(h):
    start(h, 2)
    refused = errors(h.send(20, elastic_join(20, elastic=0)))[20]
    assert "elastic=True" in refused.message
    bad = errors(Harness().send(1, elastic_join(1, world_size=2, min_size=3)))[1]
    assert bad.code == "configuration" and "min_size <= world_size" in bad.message


def test_agreements_of_the_old_membership_end_with_the_reconfigure(h):
    ranks = start(h, 3)
    barrier = h.send(ranks[0], Barrier(group_id=0, seq=1, timeout=30.0))
    assert barrier == []
    h.disconnect(ranks[2])  # the barrier fails: rank 2 left before calling it
    new = reconfigure(h, [ranks[0], ranks[1]])
    assert sorted(w.rank for w in welcomes(new).values()) == [0, 1]
    assert all(isinstance(r.message, (Welcome, Error)) for r in new)


def test_a_frozen_member_declared_lost_is_excluded_when_it_wakes(h):
    replies = []
    for conn in (1, 2):
        replies = h.send(conn, elastic_join(conn, world_size=2, heartbeat_timeout=5.0))
    ranks = {w.rank: conn for conn, w in welcomes(replies).items()}
    h.tick(6.0)  # neither beat: both are declared lost
    refused = errors(h.send(ranks[1], CheckMembership(timeout=5.0)))[ranks[1]]
    assert refused.code == "excluded" and "declared lost" in refused.message


def test_notices_and_answers_are_dated_so_members_know_without_asking(h):
    # A member compares the newest epoch its notices told of with the last
    # "unchanged" answer's: newer means ask the coordinator; else nothing changed.
    ranks = start(h, 3)
    calm = check(h, list(ranks.values()))
    assert {(a.changed, a.epoch) for a in calm.values()} == {(0, 0)}
    notices = pend(h, 20, world_size=3, timeout=2.0)
    assert len(notices) == 3 and {(n.pending, n.epoch) for n in notices} == {(1, 1)}
    assert {a.changed for a in check(h, list(ranks.values())).values()} == {1}
    h.tick(2.0)  # it gives up: an event too, told by no notice
    after = check(h, list(ranks.values()))
    assert {(a.changed, a.epoch) for a in after.values()} == {(0, 2)}
    gone = [r.message for r in h.disconnect(ranks[2]) if isinstance(r.message, MemberGone)]
    assert {(g.rank, g.epoch) for g in gone} == {(2, 3)} and len(gone) == 2


def test_members_parted_at_a_check_meet_again_when_one_reconfigures(h):
    # One member met a loss inside the check's all_reduce and asks the
    # coordinator; another completed it and went straight to reconfigure().
    ranks = start(h, 3)
    h.disconnect(ranks[2])
    assert h.send(ranks[0], CheckMembership(timeout=30.0)) == []  # waits for rank 1
    replies = reconfigure(h, [ranks[1]])
    answer = by_conn(replies)[ranks[0]].message
    assert isinstance(answer, MembershipState) and answer.changed == 1
    new = welcomes(reconfigure(h, [ranks[0]]))
    assert {conn: w.rank for conn, w in new.items()} == {ranks[0]: 0, ranks[1]: 1}

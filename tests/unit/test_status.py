"""The coordinator's status answer, the waiting peer's line, and the status table."""

from __future__ import annotations

import pytest

from asyncoll._rendezvous.state import RendezvousState
from asyncoll._rendezvous.waiting import missing_text
from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._wire.messages import (
    GroupStatus,
    Heartbeat,
    Join,
    JobStatus,
    Leave,
    MemberStatus,
    MissingReply,
    NewGroup,
    Status,
    StatusReply,
    WhoIsMissing,
)
from asyncoll.cli import table

pytestmark = pytest.mark.timeout(30)


def join(conn: int, rank: int, world_size: int = 3, job: str = "j") -> Join:
    return Join(job=job, rank=rank, world_size=world_size, host="10.0.0.1", port=1000 + conn,
                hostname=f"node{conn}", pid=100 + conn, version=PROTOCOL_VERSION, timeout=60.0)


def member(rank: int) -> MemberStatus:
    return MemberStatus(rank, "10.0.0.1", 1, "n", 1, "waiting", -1, -1.0)


def test_status_needs_no_join_and_describes_waiting_and_running_jobs():
    state = RendezvousState()
    state.handle(1, 1, join(1, rank=2), now=0.0)
    for conn in (11, 12):
        state.handle(conn, 1, join(conn, rank=conn - 11, world_size=2, job="k"), now=1.0)
    for conn in (11, 12):
        state.handle(conn, 2, NewGroup.of(ranks=(1,), timeout=5.0), now=1.5)
    state.handle(12, 3, Leave(), now=2.0)

    (reply,) = state.handle(99, 7, Status(job=""), now=3.0)
    assert isinstance(reply.message, StatusReply) and reply.conn == 99
    waiting, running = sorted(reply.message.jobs, key=lambda j: j.job)
    assert (waiting.state, waiting.world_size, waiting.age_s) == ("waiting", 3, 3.0)
    assert [(m.rank, m.state, m.hostname) for m in waiting.members] == [(2, "waiting", "node1")]
    assert running.state == "running"
    assert [(m.rank, m.state) for m in running.members] == [(0, "running"), (1, "left")]
    assert running.groups == (GroupStatus(0, (0, 1)), GroupStatus(1, (1,)))
    only = state.handle(99, 8, Status(job="k"), now=3.0)[0].message
    assert [j.job for j in only.jobs] == ["k"]  # type: ignore[union-attr]


@pytest.mark.parametrize("ranks, expected", [
    ([0, 1, 3], "waiting for 1 of 4 ranks of job 'j': rank 2 has not joined"),
    ([3], "waiting for 3 of 4 ranks of job 'j': ranks 0-2 have not joined"),
    ([2, 3], "waiting for 2 of 4 ranks of job 'j': ranks 0, 1 have not joined"),
    ([0, -1], "waiting for 2 of 4 ranks of job 'j': ranks 0 and 1 peer(s) without a "
              "requested rank have joined"),
    ([-1, -1], "waiting for 2 of 4 ranks of job 'j': 2 peer(s) without a requested rank "
               "have joined"),
])
def test_waiting_line_names_the_missing_ranks_when_it_can(ranks, expected):
    requested = {r for r in ranks if r >= 0}
    assert missing_text("j", 4, requested, len(ranks) - len(requested)) == expected


def test_a_waiting_line_stays_short_in_a_large_job():
    line = missing_text("big", 4096, set(range(0, 4096, 2)), 0)

    assert line.startswith("waiting for 2048 of 4096 ranks of job 'big': ranks 1, 3, 5, ")
    assert line.endswith(", and 2032 more have not joined")


def test_a_waiting_peer_is_told_who_is_missing_without_the_job_s_member_list():
    state = RendezvousState()
    state.handle(1, 1, join(1, rank=2), now=0.0)
    state.handle(2, 1, join(2, rank=0), now=0.0)

    (reply,) = state.handle(1, 2, WhoIsMissing(job="j"), now=5.0)
    assert reply.message == MissingReply(line="waiting for 1 of 3 ranks of job 'j': rank 1 "
                                              "has not joined")
    state.handle(3, 1, join(3, rank=1), now=5.5)
    assert state.handle(1, 3, WhoIsMissing(job="j"), now=6.0)[0].message == MissingReply(
        line="")  # the job runs now
    assert state.handle(1, 4, WhoIsMissing(job="other"), now=6.0)[0].message == MissingReply(
        line="")


def test_table_has_a_row_per_member_with_its_groups():
    job = JobStatus("train", "running", 2, 12.0,
                    (MemberStatus(0, "10.0.0.1", 4000, "a", 11, "running", 42, 0.5),
                     MemberStatus(1, "10.0.0.2", 4001, "b", 12, "left", -1, -1.0)),
                    (GroupStatus(0, (0, 1)), GroupStatus(1, (1,))))
    lines = table([job]).splitlines()
    assert lines[0].split() == ["JOB", "STATE", "RANK", "HOST", "DATA", "ADDRESS", "PID",
                                "MEMBER", "GROUPS", "OPS", "HEARTBEAT", "OPERATION"]
    assert lines[1].split() == ["train", "running", "2/2", "gen", "0", "12s", "0", "a",
                                "10.0.0.1:4000", "11", "running", "0", "42", "0.5s", "ago", "-"]
    assert lines[2].split()[-6:] == ["12", "left", "0,1", "-", "-", "-"]
    assert table([]).splitlines()[-1] == "(no jobs)"


def test_heartbeats_are_unanswered_and_show_in_status_with_their_age():
    state = RendezvousState()
    for conn in (1, 2):
        state.handle(conn, 1, join(conn, rank=conn - 1, world_size=2), now=0.0)
    assert state.handle(1, 0, Heartbeat(ops=7), now=10.0) == []
    members = state.status("j", now=12.5).jobs[0].members
    assert [(m.ops, m.heartbeat_age_s) for m in members] == [(7, 2.5), (-1, -1.0)]

"""Telling a running job's members who left: at once in a small job, at most once an
interval in a large one (see :data:`TOLD_AT_ONCE_UP_TO`).

Each leave is answered only once the others are told, so that nothing the
leaver does next (closing its links) can reach them first.
"""

from __future__ import annotations

from asyncoll._rendezvous.records import Job, Reply
from asyncoll._wire.compact import pack_runs
from asyncoll._wire.messages import MembersLeft, Ok

#: A job of up to this many members is told of each leave at once.
TOLD_AT_ONCE_UP_TO = 64
#: A larger job is told of leaves at most once an interval: this many seconds
#: per member (what telling each member costs the daemon, about 10 us, ten
#: times over, so that leaves take at most a tenth of its time however they
#: come), within the bounds below.
LEAVE_NOTICE_S_PER_MEMBER = 100e-6
LEAVE_NOTICE_INTERVAL_S = (0.1, 2.0)


def leave_notice_interval(job: Job) -> float:
    """The least time between two notices of leaves to a large job's members."""
    low, high = LEAVE_NOTICE_INTERVAL_S
    return min(max(job.world_size * LEAVE_NOTICE_S_PER_MEMBER, low), high)


def held(job: Job, now: float) -> bool:
    """Whether a leave from ``job`` at ``now`` waits for the next notice (a large job is
    told at most once an interval)."""
    return job.world_size > TOLD_AT_ONCE_UP_TO and (
        bool(job.unannounced) or now < job.left_told_at + leave_notice_interval(job))


def answer_leaves(job: Job) -> list[Reply]:
    """Answer the leaves held for the next notice (their notice is sent, or not needed)."""
    ok = Ok()
    replies = [Reply(conn, leave, ok) for _, conn, leave, _ in job.unannounced]
    job.unannounced.clear()
    return replies


def announce_leaves(job: Job, now: float) -> list[Reply]:
    """Tell the members still there, in one notice each, who left since the last notice;
    then answer those leaves."""
    if not job.unannounced:
        return []
    notice = MembersLeft(runs=pack_runs(sorted(rank for rank, *_ in job.unannounced)),
                         epoch=max(epoch for *_, epoch in job.unannounced))
    job.left_told_at = now
    return [Reply(member.conn, 0, notice) for rank, member in job.members.items()
            if rank not in job.departed] + answer_leaves(job)

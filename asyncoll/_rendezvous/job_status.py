"""What a status request shows of a job: its members, groups, stuck ranks and stragglers."""

from __future__ import annotations

from asyncoll._rendezvous.heartbeats import stuck
from asyncoll._rendezvous.records import Job, Member
from asyncoll._wire.messages import (
    GroupStatus,
    JobStatus,
    MemberStatus,
    StragglerStatus,
)


def describe(job: Job, now: float) -> JobStatus:
    """Job ``job`` as a status reply shows it, at ``now``."""
    if job.running:
        members = tuple(
            _member_status(r, m, "left" if r in job.departed else "running", now)
            for r, m in sorted(job.members.items())) + tuple(
            MemberStatus(rank=-1, host=w.join.host, port=w.join.port,
                         hostname=w.join.hostname, pid=w.join.pid, state="pending",
                         ops=-1, heartbeat_age_s=-1.0)
            for w in sorted(job.pending.values(), key=lambda w: w.order))
    elif job.adopting:
        members = tuple(_member_status(r, e.member, "adopting", now)
                        for r, e in sorted(job.rejoins.items()))
    else:
        members = tuple(
            MemberStatus(rank=w.join.rank, host=w.join.host, port=w.join.port,
                         hostname=w.join.hostname, pid=w.join.pid, state="waiting",
                         ops=-1, heartbeat_age_s=-1.0)
            for w in sorted(job.waiting.values(), key=lambda w: w.order))
    groups = tuple(GroupStatus(group_id=g, ranks=ranks)
                   for g, ranks in sorted(job.groups.items()))
    state = "running" if job.running else "adopting" if job.adopting else "waiting"
    return JobStatus(job=job.name, state=state,
                     world_size=job.world_size, age_s=round(now - job.started, 3),
                     members=members, groups=groups, generation=job.generation,
                     elastic=int(job.elastic), min_size=job.min_size,
                     max_size=job.max_size, stuck=tuple(stuck(job, now)) if job.running
                     else (), stragglers=tuple(
                         StragglerStatus(s.group_id, s.rank, s.last, s.operations,
                                         round(s.median_late_us / 1e6, 6))
                         for s in job.arrivals.stragglers()))


def _member_status(rank: int, m: Member, state: str, now: float) -> MemberStatus:
    return MemberStatus(rank=rank, host=m.info.host, port=m.info.port,
                        hostname=m.info.hostname, pid=m.pid, state=state, ops=m.ops,
                        heartbeat_age_s=-1.0 if m.last_heartbeat is None else
                        round(now - m.last_heartbeat, 3), operation=operation_words(m, now))


def operation_words(member: Member, now: float) -> str:
    """What ``member``'s last heartbeat said it was doing, in words."""
    op = member.doing
    if op is None:
        return ""
    how = "running for" if op.running else "done, started"
    tail = "" if op.running else " ago"
    return f"{op.collective} #{op.seq} of group {op.group_id}, {how} {now - op.since:.0f} s{tail}"

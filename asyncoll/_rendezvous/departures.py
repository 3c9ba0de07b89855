"""Members leaving a running job: leaves, losses, and silent heartbeats.

A departure fails or settles the agreements that waited on the member, and
is told to the others: at once in a small job, at most once an interval in
a large one (see :data:`TOLD_AT_ONCE_UP_TO`).
"""

from __future__ import annotations

import logging

from asyncoll._rendezvous.base import log, member_level
from asyncoll._rendezvous.elastic import ElasticMembership
from asyncoll._rendezvous.records import Job, Reply, error
from asyncoll._wire.compact import pack_runs
from asyncoll._wire.messages import MemberGone, MembersLeft, Ok

#: A job of up to this many members is told of each leave at once.
TOLD_AT_ONCE_UP_TO = 64
#: A larger job is told of leaves at most once an interval: this many seconds
#: per member (what telling each member costs the daemon, about 10 us, ten
#: times over, so that leaves take at most a tenth of its time however they
#: come), within the bounds below.
LEAVE_NOTICE_S_PER_MEMBER = 100e-6
LEAVE_NOTICE_INTERVAL_S = (0.1, 2.0)


# On ElasticMembership: a departure settles the membership check and reconfigure
# that wait on the member.
class Departures(ElasticMembership):
    """Leaves, lost members and the heartbeats that find them."""

    def _check_heartbeats(self, job: Job, now: float) -> list[Reply]:
        replies: list[Reply] = []
        # Heartbeats only move a member's deadline later: the earliest one
        # found now is the first moment another scan can find anyone silent.
        due = now + job.heartbeat_timeout
        for rank, member in list(job.members.items()):
            if rank in job.departed:
                continue
            last = (member.last_heartbeat if member.last_heartbeat is not None
                    else job.running_since)
            silent = now - last
            if silent <= job.heartbeat_timeout:
                due = min(due, last + job.heartbeat_timeout)
                continue
            reason = (f"no heartbeat for {silent:.1f} s (the job allows "
                      f"{job.heartbeat_timeout:g} s)")
            # Tell the silent peer too, in case it is only stopped: it must not go on.
            replies.append(error(member.conn, 0, "peer_lost",
                                  f"the coordinator declared this rank ({rank}) lost: {reason}"))
            replies += self._depart(job, rank, member.conn, f"was lost: {reason}", now)
            if job.elastic:
                # It may only be stopped: if it wakes, the job has gone on without it.
                self._excluded[member.conn] = (
                    f"rank {rank} of job {job.name!r} was declared lost ({reason}) and the "
                    "job went on without it; this process is no longer a member: leave, and "
                    "join again with init_process_group(elastic=True)")
        # The deadline itself is not overdue (silent <= timeout): look just after it.
        job.heartbeats_due = due + 1e-6
        return replies

    def _depart(self, job: Job, rank: int, conn: int, how: str, now: float,
                leave: int = 0) -> list[Reply]:
        """Rank ``rank`` is gone (``how``; request ``leave`` on ``conn`` if it left)."""
        member = job.members[rank]
        job.departed.add(rank)
        job.epoch += 1
        self._conn_job.pop(conn, None)
        job.conn_rank.pop(conn, None)
        level = member_level(job) if how == "left" else logging.WARNING
        self.tally.members_lost += how != "left"
        log.log(level, "job %r: rank %d on %s (pid %d) %s; %d of %d ranks remain", job.name,
                rank, member.info.hostname, member.pid, how,
                job.world_size - len(job.departed), job.world_size)
        replies: list[Reply] = []
        for key, gathering in list(job.gatherings.items()):
            if key[0] == "check":
                replies += self._settle_check(job, key, gathering)
            elif key[0] == "reconfigure":
                replies += self._settle_reconfigure(job, now)
            elif rank in gathering.expected and rank not in gathering.arrivals:
                del job.gatherings[key]
                text = (f"{gathering.what} in job {job.name!r} cannot complete: rank {rank} "
                        f"on {member.info.hostname} {how} before calling it")
                replies += [error(c, r, "peer_lost", text)
                            for c, r, _ in gathering.arrivals.values()]
        gone = MemberGone(rank=rank, host=member.info.host, hostname=member.info.hostname,
                          how="left" if how == "left" else "lost", reason=how,
                          epoch=job.epoch)
        if how == "left" and job.world_size > TOLD_AT_ONCE_UP_TO and (
                job.unannounced or now < job.left_told_at + leave_notice_interval(job)):
            # A large job is told of leaves at most once an interval: the
            # others wait for the tick after it, and go in one notice.
            job.unannounced.append((rank, conn, leave, job.epoch))
        else:
            if how == "left":
                job.left_told_at = now
                replies.append(Reply(conn, leave, Ok()))
            replies += [Reply(other.conn, 0, gone) for r, other in job.members.items()
                        if r not in job.departed]
        if len(job.departed) == job.world_size:
            replies += self._answer_leaves(job)  # nobody is left to tell
            log.info("job %r: every rank has left; job closed", job.name)
            replies += [error(w.conn, w.request_id, "rendezvous",
                              f"job {job.name!r} ended before admitting this process: every "
                              "member left") for w in job.pending.values()]
            for conn in job.pending:
                self._conn_job.pop(conn, None)
            job.pending.clear()
            self._forget(job)
        return replies

    def _announce_departures(self, job: Job, now: float) -> list[Reply]:
        """Tell the members still there, in one notice each, who left since the last
        notice; then answer those leaves."""
        if not job.unannounced:
            return []
        notice = MembersLeft(runs=pack_runs(sorted(rank for rank, *_ in job.unannounced)),
                             epoch=max(epoch for *_, epoch in job.unannounced))
        job.left_told_at = now
        return [Reply(member.conn, 0, notice) for rank, member in job.members.items()
                if rank not in job.departed] + self._answer_leaves(job)


def leave_notice_interval(job: Job) -> float:
    """The least time between two notices of leaves to a large job's members."""
    low, high = LEAVE_NOTICE_INTERVAL_S
    return min(max(job.world_size * LEAVE_NOTICE_S_PER_MEMBER, low), high)

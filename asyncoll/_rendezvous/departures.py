"""Members leaving a running job: leaves, losses, and silent heartbeats.

A departure fails or settles the agreements that waited on the member, and
is told to the others (see :mod:`asyncoll._rendezvous.leaves`).
"""

from __future__ import annotations

import logging

from asyncoll._rendezvous.agreements import Agreements
from asyncoll._rendezvous.elastic import Elasticity
from asyncoll._rendezvous.leaves import answer_leaves, held
from asyncoll._rendezvous.records import Job, Reply, error
from asyncoll._rendezvous.registry import Registry
from asyncoll._rendezvous.tally import Tally
from asyncoll._rendezvous.words import log, member_level
from asyncoll._wire.messages import MemberGone, Ok


class Departures:
    """Leaves, lost members and the heartbeats that find them.

    Args:
        registry: the coordinator's jobs and connections.
        elasticity: settles the membership checks and reconfigures a departure ends.
        agreements: fails the agreements a departure leaves incomplete.
        tally: where lost members are counted.
    """

    def __init__(self, registry: Registry, elasticity: Elasticity, agreements: Agreements,
                 tally: Tally) -> None:
        self._registry = registry
        self._elasticity = elasticity
        self._agreements = agreements
        self._tally = tally

    def check_heartbeats(self, job: Job, now: float) -> list[Reply]:
        """Declare lost every member of ``job`` whose heartbeats stopped for too long."""
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
            replies += self.depart(job, rank, member.conn, f"was lost: {reason}", now)
            if job.elastic:
                # It may only be stopped: if it wakes, the job has gone on without it.
                self._registry.exclude(member.conn, (
                    f"rank {rank} of job {job.name!r} was declared lost ({reason}) and the "
                    "job went on without it; this process is no longer a member: leave, and "
                    "join again with init_process_group(elastic=True)"))
        # The deadline itself is not overdue (silent <= timeout): look just after it.
        job.heartbeats_due = due + 1e-6
        return replies

    def depart(self, job: Job, rank: int, conn: int, how: str, now: float,
               leave: int = 0) -> list[Reply]:
        """Rank ``rank`` is gone (``how``; request ``leave`` on ``conn`` if it left)."""
        member = job.members[rank]
        job.departed.add(rank)
        job.epoch += 1
        self._registry.detach(conn)
        job.conn_rank.pop(conn, None)
        level = member_level(job) if how == "left" else logging.WARNING
        self._tally.members_lost += how != "left"
        log.log(level, "job %r: rank %d on %s (pid %d) %s; %d of %d ranks remain", job.name,
                rank, member.info.hostname, member.pid, how,
                job.world_size - len(job.departed), job.world_size)
        replies: list[Reply] = []
        for key, gathering in list(job.gatherings.items()):
            if key[0] == "check":
                replies += self._elasticity.settle_check(job, key, gathering)
            elif key[0] == "reconfigure":
                replies += self._elasticity.settle_reconfigure(job, now)
            else:
                replies += self._agreements.broken_by(job, key, gathering, rank,
                                                      member.info.hostname, how)
        gone = MemberGone(rank=rank, host=member.info.host, hostname=member.info.hostname,
                          how="left" if how == "left" else "lost", reason=how,
                          epoch=job.epoch)
        if how == "left" and held(job, now):
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
            replies += answer_leaves(job)  # nobody is left to tell
            log.info("job %r: every rank has left; job closed", job.name)
            replies += [error(w.conn, w.request_id, "rendezvous",
                              f"job {job.name!r} ended before admitting this process: every "
                              "member left") for w in job.pending.values()]
            for conn in job.pending:
                self._registry.detach(conn)
            job.pending.clear()
            self._registry.forget(job)
        return replies

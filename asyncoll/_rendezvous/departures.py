"""Members leaving a running job: leaves, losses, and silent heartbeats.

A departure is recorded here, then settles the agreements that waited on the
member (:class:`asyncoll._rendezvous.state.RendezvousState` asks their
parts), then is told to the others (see :mod:`asyncoll._rendezvous.leaves`).
"""

from __future__ import annotations

import logging

from asyncoll._rendezvous.leaves import answer_leaves, held
from asyncoll._rendezvous.records import Job, Member, Reply, error
from asyncoll._rendezvous.registry import Registry
from asyncoll._rendezvous.words import LOST, log, member_level
from asyncoll._wire.messages import MemberGone, Ok


class Departures:
    """Leaves, lost members and the heartbeats that find them.

    Args:
        registry: the coordinator's jobs and connections; a departed member's connection
            leaves it, and a silent elastic member's is excluded there.
    """

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def silent(self, job: Job, now: float) -> list[tuple[int, str]]:
        """The members of ``job`` whose heartbeats stopped for too long, with why, in rank
        order; schedules the next scan."""
        found: list[tuple[int, str]] = []
        # Heartbeats only move a member's deadline later: the earliest one
        # found now is the first moment another scan can find anyone silent.
        due = now + job.heartbeat_timeout
        for rank, member in job.members.items():
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
            found.append((rank, reason))
        # The deadline itself is not overdue (silent <= timeout): look just after it.
        job.heartbeats_due = due + 1e-6
        return found

    def declare_lost(self, job: Job, rank: int, reason: str) -> Reply:
        """Silent rank ``rank`` is lost (``reason``): what it is told, in case it is only
        stopped, since it must not go on; an elastic job's refuses it from now on."""
        conn = job.members[rank].conn
        if job.elastic:
            # It may only be stopped: if it wakes, the job has gone on without it.
            self._registry.exclude(conn, (
                f"rank {rank} of job {job.name!r} was declared lost ({reason}) and the "
                "job went on without it; this process is no longer a member: leave, and "
                "join again with init_process_group(elastic=True)"))
        return error(conn, 0, "peer_lost",
                     f"the coordinator declared this rank ({rank}) lost: {reason}")

    def record(self, job: Job, rank: int, conn: int, how: str) -> Member:
        """Rank ``rank``, on connection ``conn``, is gone (``how``): the member it was."""
        member = job.members[rank]
        job.departed.add(rank)
        job.epoch += 1
        self._registry.detach(conn)
        job.conn_rank.pop(conn, None)
        level = member_level(job) if how == "left" else logging.WARNING
        log.log(level, "job %r: rank %d on %s (pid %d) %s; %d of %d ranks remain", job.name,
                rank, member.info.hostname, member.pid, how,
                job.world_size - len(job.departed), job.world_size)
        return member

    def tell(self, job: Job, rank: int, member: Member, conn: int, how: str, now: float,
             leave: int = 0) -> list[Reply]:
        """Tell the others that recorded departure ``member`` (``how``; request ``leave`` on
        ``conn`` if it left) is gone, and close ``job`` if nobody is left."""
        replies: list[Reply] = []
        gone = MemberGone(rank=rank, host=member.info.host, hostname=member.info.hostname,
                          how="left" if how == "left" else "lost",
                          reason=how.removeprefix(LOST),
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
            if how != "left" and leave:
                replies.append(Reply(conn, leave, Ok()))  # lost on its way out, and told so
        if len(job.departed) == job.world_size:
            replies += answer_leaves(job)  # nobody is left to tell
            log.info("job %r: every rank has left; job closed", job.name)
            self._registry.timeline.record(now, job.name, "ended", "every rank has left")
            replies += [error(w.conn, w.request_id, "rendezvous",
                              f"job {job.name!r} ended before admitting this process: every "
                              "member left") for w in job.pending.values()]
            for conn in job.pending:
                self._registry.detach(conn)
            job.pending.clear()
            self._registry.forget(job)
        return replies

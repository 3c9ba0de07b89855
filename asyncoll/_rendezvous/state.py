"""The coordinator's decisions, as a pure state machine.

:class:`RendezvousState` takes each request a connection makes, with the
current time passed in, and returns the replies to send. It opens no socket
and reads no clock, so tests drive it with a fake one; the daemon
(asyncoll.coordinator) is the I/O shell around it.

A job is keyed by its id. It starts *waiting* at its first join and becomes
*running* when ``world_size`` peers have joined; ranks requested by peers are
honoured and the rest assigned, peers of one host given adjacent ranks.
Agreements that need every rank (new_group, barrier) are *gatherings*: they
complete when every expected rank has arrived, and fail on every waiting rank
at their deadline or when an expected rank leaves.

An *elastic* job goes on after members are lost (issue 15). A join to it
while it runs makes the peer *pending*. Two gatherings decide its
membership, over the members still live: a membership check, which every
asker gets the same answer to (changed: a member gone or a peer pending),
and a reconfigure, which completes once every live member has called it,
and at least ``min_size`` members (pending ones included) would remain,
or at its deadline with those that called it (the others are *excluded*:
their next request is refused). Members that die meanwhile drop out of both
instead of failing them. The reconfigure starts the job's next generation:
survivors keep their order and are numbered from 0, the pending peers
follow in the order they joined (up to ``max_size``), and every one of them
gets a Welcome with the new directory.

Each part of the decisions has a module of its own: joins (the
rendezvous), agreements (new_group, barrier), elastic (membership checks,
reconfigures) and departures (leaves, losses, heartbeats).
"""

from __future__ import annotations

from asyncoll._rendezvous.adoption import Adoption
from asyncoll._rendezvous.agreements import Agreements
from asyncoll._rendezvous.base import log, member_level
from asyncoll._rendezvous.directory import answer_lookup
from asyncoll._rendezvous.departures import (
    LEAVE_NOTICE_INTERVAL_S,
    LEAVE_NOTICE_S_PER_MEMBER,
    TOLD_AT_ONCE_UP_TO,
    leave_notice_interval,
)
from asyncoll._rendezvous.heartbeats import heard, stuck
from asyncoll._rendezvous.joins import MISSING_LINE_EVERY_S, Joins
from asyncoll._rendezvous.records import Job, Member, Reply, error, ranks_text
from asyncoll._wire.messages import (
    Barrier,
    CheckMembership,
    DumpTrace,
    GroupStatus,
    Heartbeat,
    Lookup,
    Join,
    JobStatus,
    Leave,
    MemberStatus,
    MissingReply,
    Message,
    NewGroup,
    Reconfigure,
    Rejoin,
    Status,
    StatusReply,
    StragglerStatus,
    WhoIsMissing,
)
from asyncoll.errors import timed_out_words

# The constants are defined in the modules that read them (patch them there), and
# named here too.
__all__ = ["LEAVE_NOTICE_INTERVAL_S", "LEAVE_NOTICE_S_PER_MEMBER", "MISSING_LINE_EVERY_S",
           "TOLD_AT_ONCE_UP_TO", "RendezvousState", "Reply"]


class RendezvousState(Joins, Agreements, Adoption):
    """Every job the coordinator serves, and the decisions about them."""

    # -- queries ---------------------------------------------------------------

    def job_names(self) -> list[str]:
        """The ids of the jobs that have at least one peer waiting or running."""
        return sorted({job.name for job in self._live()})

    def jobs(self) -> list[Job]:
        """Every job waiting, adopting or running: read them, do not change them."""
        return self._live()

    def job_is_active(self, name: str) -> bool:
        """Whether job ``name`` still has peers waiting or members that have not left."""
        return any(job.name == name for job in self._live())

    def status(self, job: str, now: float) -> StatusReply:
        """Every live job named ``job`` (every job for ""), for operators and waiting peers."""
        return StatusReply(jobs=tuple(self._describe(j, now) for j in self._live()
                                      if not job or j.name == job))

    @staticmethod
    def _describe(job: Job, now: float) -> JobStatus:
        if job.running:
            members = tuple(
                MemberStatus(rank=r, host=m.info.host, port=m.info.port,
                             hostname=m.info.hostname, pid=m.pid,
                             state="left" if r in job.departed else "running", ops=m.ops,
                             heartbeat_age_s=-1.0 if m.last_heartbeat is None else
                             round(now - m.last_heartbeat, 3), operation=_operation(m, now))
                for r, m in sorted(job.members.items())) + tuple(
                MemberStatus(rank=-1, host=w.join.host, port=w.join.port,
                             hostname=w.join.hostname, pid=w.join.pid, state="pending",
                             ops=-1, heartbeat_age_s=-1.0)
                for w in sorted(job.pending.values(), key=lambda w: w.order))
        elif job.adopting:
            members = tuple(
                MemberStatus(rank=r, host=e.rejoin.host, port=e.rejoin.port,
                             hostname=e.rejoin.hostname, pid=e.rejoin.pid, state="adopting",
                             ops=-1, heartbeat_age_s=-1.0)
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

    # -- requests --------------------------------------------------------------

    def handle(self, conn: int, request_id: int, message: Message, now: float) -> list[Reply]:
        """Decide what to answer to ``message``, received on connection ``conn``."""
        if isinstance(message, Join):
            return self._join(conn, request_id, message, now)
        if isinstance(message, Rejoin):
            return self._rejoin(conn, request_id, message, now)
        if isinstance(message, Status):
            return [Reply(conn, request_id, self.status(message.job, now))]
        if isinstance(message, DumpTrace):
            return self._dump_traces(conn, request_id, message.job, now)
        if isinstance(message, WhoIsMissing):
            return [Reply(conn, request_id, MissingReply(line=self._missing(message.job, now)))]
        excluded = self._excluded.get(conn)
        if excluded is not None:
            return [error(conn, request_id, "excluded", excluded)]
        job = self._conn_job.get(conn)
        member = self._member_rank(job, conn)
        if job is None or member is None:
            return [error(conn, request_id, "protocol",
                           f"a {message.TYPE} request needs a completed join first on this "
                           "connection")]
        if isinstance(message, NewGroup):
            return self._new_group(job, member, conn, request_id, message, now)
        if isinstance(message, Barrier):
            return self._barrier(job, member, conn, request_id, message, now)
        if isinstance(message, CheckMembership):
            return self._check_membership(job, member, conn, request_id, message, now)
        if isinstance(message, Reconfigure):
            return self._reconfigure(job, member, conn, request_id, message, now)
        if isinstance(message, Lookup):
            return [answer_lookup(job, conn, request_id, message)]
        if isinstance(message, Heartbeat):
            # Recorded for status; declaring silent members lost is the
            # failure detector's job, which reads the same timestamps.
            heard(job, member, message, now)
            self.tally.heartbeats += 1
            return []
        if isinstance(message, Leave):
            return self._depart(job, member, conn, "left", now, request_id)
        return [error(conn, request_id, "protocol",
                       f"the coordinator does not accept {message.TYPE} messages")]

    def _dump_traces(self, conn: int, request_id: int, job: str, now: float) -> list[Reply]:
        """Ask the running members of ``job`` ("" every job) to write out their flight
        recorders; answer with the jobs' status."""
        notices = [Reply(member.conn, 0, DumpTrace(job=j.name)) for j in self._live()
                   if j.running and (not job or j.name == job)
                   for rank, member in sorted(j.members.items()) if rank not in j.departed]
        log.info("asking %d members to write out their flight recorders", len(notices))
        return notices + [Reply(conn, request_id, self.status(job, now))]

    def disconnect(self, conn: int, now: float) -> list[Reply]:
        """Connection ``conn`` closed: forget its peer, failing what waits on it."""
        self._excluded.pop(conn, None)
        job = self._conn_job.pop(conn, None)
        if job is None:
            return []
        if job.adopting:
            self._drop_rejoin(job, conn)
            return []
        if not job.running:
            waiter = job.waiting.pop(conn, None)
            if waiter is not None:
                job.requested.pop(waiter.join.rank, None)
                log.log(member_level(job), "job %r: a peer from %s (pid %d) disconnected "
                        "during rendezvous; %d of %d peers still waiting", job.name,
                        waiter.join.hostname, waiter.join.pid, len(job.waiting), job.world_size)
            if not job.waiting:
                self._forget(job)
            return []
        pending = job.pending.pop(conn, None)
        if pending is not None:
            log.log(member_level(job), "job %r: pending peer from %s (pid %d) disconnected; it "
                    "leaves no trace", job.name, pending.join.hostname, pending.join.pid)
            return []
        rank = self._member_rank(job, conn)
        if rank is None:
            return []
        return self._depart(job, rank, conn, "disconnected without leaving", now)

    def tick(self, now: float) -> list[Reply]:
        """Fail every rendezvous and gathering whose deadline has passed, and declare
        lost every member whose heartbeats stopped for longer than its job allows."""
        replies: list[Reply] = []
        for job in self._live():
            if job.adopting:
                replies += self._expire_pending(job, now) + self._adoption_due(job, now)
                continue
            if not job.running and now >= job.deadline:
                replies += self._expire_rendezvous(job, now)
                continue
            if job.running and now >= job.left_told_at + leave_notice_interval(job):
                replies += self._announce_departures(job, now)
            if job.running:
                if now >= job.heartbeats_due:
                    replies += self._check_heartbeats(job, now)
                replies += self._expire_pending(job, now)
            for key, gathering in list(job.gatherings.items()):
                if key[0] == "reconfigure" and now >= gathering.deadline:
                    replies += self._settle_reconfigure(job, now, final=True)
                elif now >= gathering.deadline:
                    del job.gatherings[key]
                    missing = gathering.expected - gathering.arrivals.keys()
                    text = (f"{gathering.what} in job {job.name!r} timed out after "
                            f"{now - gathering.started:.1f} s: ranks {ranks_text(missing)} "
                            f"did not arrive (ranks {ranks_text(gathering.arrivals)} did). "
                            f"{timed_out_words(gathering.deadline - gathering.started)}")
                    log.warning("%s", text)
                    replies += [error(c, r, gathering.timeout_code, text)
                                for c, r, _ in gathering.arrivals.values()]
        return replies


def _operation(member: Member, now: float) -> str:
    """What ``member``'s last heartbeat said it was doing, in words."""
    op = member.doing
    if op is None:
        return ""
    how = "running for" if op.running else "done, started"
    tail = "" if op.running else " ago"
    return f"{op.collective} #{op.seq} of group {op.group_id}, {how} {now - op.since:.0f} s{tail}"

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

The state is composed of parts, each an object of its own module that keeps
its own data:
:class:`~asyncoll._rendezvous.registry.Registry` (the jobs, and which
connection belongs to which), :class:`~asyncoll._rendezvous.joins.Rendezvous`
(joins), :class:`~asyncoll._rendezvous.agreements.Agreements` (new_group,
barrier), :class:`~asyncoll._rendezvous.elastic.Elasticity` (pending peers,
membership checks, reconfigures),
:class:`~asyncoll._rendezvous.departures.Departures` (leaves, losses,
heartbeats) and :class:`~asyncoll._rendezvous.adoption.Adoption` (a restarted
coordinator taking jobs back). Each job's data is a plain
:class:`~asyncoll._rendezvous.records.Job`. This class routes each request,
tick and disconnect to the part that decides it, and carries what one part's
decision means for the others: a departure settles the agreements of
:class:`Agreements` and :class:`Elasticity`, and an adoption loses the ranks
that did not come back. Departures and adoptions are counted here. A tick
that :class:`~asyncoll._rendezvous.stalls.Stalls` finds came after the daemon
did not run decides nothing.
"""

from __future__ import annotations

from asyncoll._rendezvous.adoption import Adoption
from asyncoll._rendezvous.agreements import Agreements
from asyncoll._rendezvous.departures import Departures
from asyncoll._rendezvous.directory import PORTS_IN_WELCOME_UP_TO, answer_lookup
from asyncoll._rendezvous.elastic import Elasticity
from asyncoll._rendezvous.heartbeats import heard
from asyncoll._rendezvous.job_status import describe
from asyncoll._rendezvous.joins import MISSING_LINE_EVERY_S, Rendezvous
from asyncoll._rendezvous.leaves import (
    LEAVE_NOTICE_INTERVAL_S,
    LEAVE_NOTICE_S_PER_MEMBER,
    TOLD_AT_ONCE_UP_TO,
    announce_leaves,
    leave_notice_interval,
)
from asyncoll._rendezvous.records import Job, Reply, error
from asyncoll._rendezvous.registry import Registry, member_rank
from asyncoll._rendezvous.stalls import STALL_AFTER_S, Stalls
from asyncoll._rendezvous.tally import Tally
from asyncoll._rendezvous.timeline import Timeline
from asyncoll._rendezvous.words import LOST, log
from asyncoll._wire import messages as wire

# The constants are defined in the modules that read them (patch them there), and
# named here too.
__all__ = ["LEAVE_NOTICE_INTERVAL_S", "LEAVE_NOTICE_S_PER_MEMBER", "MISSING_LINE_EVERY_S",
           "STALL_AFTER_S", "TOLD_AT_ONCE_UP_TO", "RendezvousState", "Reply"]


class RendezvousState:
    """Every job the coordinator serves, and the decisions about them.

    Args:
        ports_in_welcome_up_to: the largest membership whose Welcome lists every rank's
            port.
        stall_after_s: a tick this long after the one before decides nothing (see
            asyncoll._rendezvous.stalls); math.inf for a fake clock that jumps.
    """

    def __init__(self, ports_in_welcome_up_to: int = PORTS_IN_WELCOME_UP_TO,
                 stall_after_s: float = STALL_AFTER_S) -> None:
        #: The largest membership whose Welcome lists every rank's port.
        self.ports_in_welcome_up_to = ports_in_welcome_up_to
        #: What the daemon's metrics report.
        self.tally = Tally()
        self._registry = Registry()
        self._agreements = Agreements(self.tally)
        self._elasticity = Elasticity(self._registry, ports_in_welcome_up_to)
        self._rendezvous = Rendezvous(self._registry, self._elasticity, self.tally,
                                      ports_in_welcome_up_to)
        self._departures = Departures(self._registry)
        self._adoption = Adoption(self._registry)
        self._stalls = Stalls(stall_after_s)

    # -- queries ---------------------------------------------------------------

    def job_names(self) -> list[str]:
        """The ids of the jobs that have at least one peer waiting or running."""
        return sorted({job.name for job in self._registry.live()})

    def jobs(self) -> list[Job]:
        """Every job waiting, adopting or running: read them, do not change them."""
        return self._registry.live()

    @property
    def timeline(self) -> Timeline:
        """The jobs' recent events (read them, do not add to them)."""
        return self._registry.timeline

    def job_is_active(self, name: str | None) -> bool:
        """Whether job ``name`` (None: any job) still has peers waiting or members that have
        not left."""
        return any(name is None or job.name == name for job in self._registry.live())

    def status(self, job: str, now: float) -> wire.StatusReply:
        """Every live job named ``job`` (every job for ""), for operators and waiting peers."""
        return wire.StatusReply(jobs=tuple(describe(j, now) for j in self._registry.live()
                                        if not job or j.name == job))

    # -- requests --------------------------------------------------------------

    def handle(self, conn: int, request_id: int, message: wire.Message,
               now: float) -> list[Reply]:
        """Decide what to answer to ``message``, received on connection ``conn``."""
        if isinstance(message, wire.Join):
            return self._rendezvous.join(conn, request_id, message, now)
        if isinstance(message, wire.Rejoin):
            replies = self._adoption.rejoin(conn, request_id, message, now)
            job = self._registry.job_of(conn)
            if job is not None and job.adopting and self._adoption.complete(job):
                replies += self._adopt(job, now)
            return replies
        if isinstance(message, wire.Status):
            return [Reply(conn, request_id, self.status(message.job, now))]
        if isinstance(message, wire.DumpTrace):
            return self._dump_traces(conn, request_id, message.job, now)
        if isinstance(message, wire.WhoIsMissing):
            return [Reply(conn, request_id,
                          wire.MissingReply(line=self._rendezvous.missing(message.job, conn,
                                                                            now)))]
        excluded = self._registry.exclusion(conn)
        if excluded is not None:
            return [error(conn, request_id, "excluded", excluded)]
        job = self._registry.job_of(conn)
        member = member_rank(job, conn)
        if job is None or member is None:
            return [error(conn, request_id, "protocol",
                          f"a {message.TYPE} request needs a completed join first on this "
                          "connection")]
        if isinstance(message, wire.NewGroup):
            return self._agreements.new_group(job, member, conn, request_id, message, now)
        if isinstance(message, wire.Barrier):
            return self._agreements.barrier(job, member, conn, request_id, message, now)
        if isinstance(message, wire.CheckMembership):
            return self._elasticity.check_membership(job, member, conn, request_id, message,
                                                     now)
        if isinstance(message, wire.Reconfigure):
            return self._elasticity.reconfigure(job, member, conn, request_id, message, now)
        if isinstance(message, wire.Lookup):
            return [answer_lookup(job, conn, request_id, message)]
        if isinstance(message, wire.Heartbeat):
            # Recorded for status; declaring silent members lost is the
            # failure detector's job, which reads the same timestamps.
            heard(job, member, message, now)
            self.tally.heartbeats += 1
            return []
        if isinstance(message, wire.Leave):
            # A process ending on an exception leaves on its way out: for the
            # others it is lost, as if killed, not gone in order.
            how = f"{LOST}{message.ended}" if message.ended else "left"
            return self._depart(job, member, conn, how, now, request_id)
        return [error(conn, request_id, "protocol",
                      f"the coordinator does not accept {message.TYPE} messages")]

    def _dump_traces(self, conn: int, request_id: int, job: str, now: float) -> list[Reply]:
        """Ask the running members of ``job`` ("" every job) to write out their flight
        recorders; answer with the jobs' status."""
        notices = [Reply(member.conn, 0, wire.DumpTrace(job=j.name))
                   for j in self._registry.live() if j.running and (not job or j.name == job)
                   for rank, member in sorted(j.members.items()) if rank not in j.departed]
        log.info("asking %d members to write out their flight recorders", len(notices))
        return notices + [Reply(conn, request_id, self.status(job, now))]

    def disconnect(self, conn: int, now: float) -> list[Reply]:
        """Connection ``conn`` closed: forget its peer, failing what waits on it."""
        job = self._registry.disconnect(conn)
        if job is None:
            return []
        if job.adopting:
            self._adoption.drop_rejoin(job, conn)
            return []
        if not job.running:
            self._rendezvous.drop_waiter(job, conn)
            return []
        if self._elasticity.drop_pending(job, conn):
            return []
        rank = member_rank(job, conn)
        if rank is None:
            return []
        return self._depart(job, rank, conn, f"{LOST}disconnected without leaving", now)

    def tick(self, now: float) -> list[Reply]:
        """Fail every rendezvous and gathering whose deadline has passed, and declare
        lost every member whose heartbeats stopped for longer than its job allows; on
        the first tick after the coordinator did not run for a while, nothing."""
        if self._stalls.hold(now):
            # What the members sent meanwhile is still queued: read it first.
            self.tally.stalls += 1
            return []
        replies: list[Reply] = []
        for job in self._registry.live():
            if job.adopting:
                replies += self._elasticity.expire_pending(job, now)
                if self._adoption.due(job, now):
                    replies += self._adopt(job, now)
                continue
            if not job.running and now >= job.deadline:
                replies += self._rendezvous.expire(job, now)
                continue
            if job.running and now >= job.left_told_at + leave_notice_interval(job):
                replies += announce_leaves(job, now)
            if job.running:
                if now >= job.heartbeats_due:
                    for rank, reason in self._departures.silent(job, now):
                        replies.append(self._departures.declare_lost(job, rank, reason))
                        replies += self._depart(job, rank, job.members[rank].conn,
                                                f"{LOST}{reason}", now)
                replies += self._elasticity.expire_pending(job, now)
            for key, gathering in list(job.gatherings.items()):
                if key[0] == "reconfigure" and now >= gathering.deadline:
                    replies += self._elasticity.settle_reconfigure(job, now, final=True)
                elif now >= gathering.deadline:
                    replies += self._agreements.time_out(job, key, gathering, now)
        return replies

    # -- what one part's decision means for the others --------------------------

    def _depart(self, job: Job, rank: int, conn: int, how: str, now: float,
                leave: int = 0) -> list[Reply]:
        """Rank ``rank`` is gone (``how``; request ``leave`` on ``conn`` if it left): the
        agreements waiting on it settle before the others are told."""
        member = self._departures.record(job, rank, conn, how)
        self.tally.members_lost += how != "left"
        self._registry.timeline.record(now, job.name, "left" if how == "left" else "lost",
                                       f"rank {rank} on {member.info.hostname} "
                                       f"(pid {member.pid}) {how}")
        replies: list[Reply] = []
        for key, gathering in list(job.gatherings.items()):
            if key[0] == "check":
                replies += self._elasticity.settle_check(job, key, gathering)
            elif key[0] == "reconfigure":
                replies += self._elasticity.settle_reconfigure(job, now)
            else:
                replies += self._agreements.broken_by(job, key, gathering, rank,
                                                      member.info.hostname, how)
        return replies + self._departures.tell(job, rank, member, conn, how, now, leave)

    def _adopt(self, job: Job, now: float) -> list[Reply]:
        """Adopt ``job``: its ranks that did not come back are lost, and its members are
        told of the processes pending."""
        replies, lost = self._adoption.adopt(job, now)
        if not job.running:
            return replies  # every one that came back was gone for the others
        self.tally.jobs_adopted += 1
        self._registry.timeline.record(now, job.name, "adopted", f"taken back after a "
                                       f"coordinator restart, {len(job.live())} ranks running")
        for rank, how in lost:
            replies += self._depart(job, rank, -1, how, now)
        if job.pending:
            replies += self._elasticity.tell_pending(job)
        return replies

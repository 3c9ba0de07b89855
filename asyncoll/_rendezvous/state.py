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
"""

from __future__ import annotations

import logging
from functools import lru_cache

from asyncoll._settings import PROTOCOL_VERSION
from asyncoll._wire.compact import pack_directory, pack_runs, runs_count, unpack_runs
from asyncoll.errors import ProtocolError, timed_out_words
from asyncoll._wire.messages import (
    Barrier,
    CheckMembership,
    GroupCreated,
    GroupStatus,
    Heartbeat,
    Join,
    JobStatus,
    Leave,
    MemberGone,
    MembersLeft,
    MembershipState,
    MembersPending,
    MemberStatus,
    MissingReply,
    Message,
    NewGroup,
    Ok,
    PeerInfo,
    Reconfigure,
    Status,
    StatusReply,
    Welcome,
    WhoIsMissing,
)

from asyncoll._rendezvous.waiting import missing_text
from asyncoll._rendezvous.records import (
    MEMBER_LINES_UP_TO,
    Gathering,
    Job,
    Member,
    Reply,
    Waiter,
    error,
    members_text,
    ranks_text,
)

__all__ = ["RendezvousState", "Reply"]

#: A job of up to this many members is told of each leave at once.
TOLD_AT_ONCE_UP_TO = 64
#: A larger job is told of leaves at most once an interval: this many seconds
#: per member (what telling each member costs the daemon, about 10 us, ten
#: times over, so that leaves take at most a tenth of its time however they
#: come), within the bounds below.
LEAVE_NOTICE_S_PER_MEMBER = 100e-6
LEAVE_NOTICE_INTERVAL_S = (0.1, 2.0)
#: How stale the line on who is missing from a rendezvous may be, in seconds.
MISSING_LINE_EVERY_S = 1.0

log = logging.getLogger("asyncoll.coordinator")


class RendezvousState:
    """Every job the coordinator serves, and the decisions about them."""

    def __init__(self) -> None:
        # The newest generation of each job id: the one that takes joins.
        self._jobs: dict[str, Job] = {}
        # Running jobs whose members began leaving while a new generation of
        # the same id formed (destroy_process_group, then init_process_group).
        self._retired: list[Job] = []
        self._conn_job: dict[int, Job] = {}
        # Connections of members an elastic job went on without: why, for their next request.
        self._excluded: dict[int, str] = {}
        self._joins = 0

    # -- queries ---------------------------------------------------------------

    def job_names(self) -> list[str]:
        """The ids of the jobs that have at least one peer waiting or running."""
        return sorted({job.name for job in self._live()})

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
                             round(now - m.last_heartbeat, 3))
                for r, m in sorted(job.members.items())) + tuple(
                MemberStatus(rank=-1, host=w.join.host, port=w.join.port,
                             hostname=w.join.hostname, pid=w.join.pid, state="pending",
                             ops=-1, heartbeat_age_s=-1.0)
                for w in sorted(job.pending.values(), key=lambda w: w.order))
        else:
            members = tuple(
                MemberStatus(rank=w.join.rank, host=w.join.host, port=w.join.port,
                             hostname=w.join.hostname, pid=w.join.pid, state="waiting",
                             ops=-1, heartbeat_age_s=-1.0)
                for w in sorted(job.waiting.values(), key=lambda w: w.order))
        groups = tuple(GroupStatus(group_id=g, ranks=ranks)
                       for g, ranks in sorted(job.groups.items()))
        return JobStatus(job=job.name, state="running" if job.running else "waiting",
                         world_size=job.world_size, age_s=round(now - job.started, 3),
                         members=members, groups=groups, generation=job.generation,
                         elastic=int(job.elastic), min_size=job.min_size,
                         max_size=job.max_size)

    # -- requests --------------------------------------------------------------

    def handle(self, conn: int, request_id: int, message: Message, now: float) -> list[Reply]:
        """Decide what to answer to ``message``, received on connection ``conn``."""
        if isinstance(message, Join):
            return self._join(conn, request_id, message, now)
        if isinstance(message, Status):
            return [Reply(conn, request_id, self.status(message.job, now))]
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
        if isinstance(message, Heartbeat):
            # Recorded for status; declaring silent members lost is the
            # failure detector's job, which reads the same timestamps.
            record = job.members[member]
            record.ops, record.last_heartbeat = message.ops, now
            return []
        if isinstance(message, Leave):
            return self._depart(job, member, conn, "left", now, request_id)
        return [error(conn, request_id, "protocol",
                       f"the coordinator does not accept {message.TYPE} messages")]

    def disconnect(self, conn: int, now: float) -> list[Reply]:
        """Connection ``conn`` closed: forget its peer, failing what waits on it."""
        self._excluded.pop(conn, None)
        job = self._conn_job.pop(conn, None)
        if job is None:
            return []
        if not job.running:
            waiter = job.waiting.pop(conn, None)
            if waiter is not None:
                job.requested.pop(waiter.join.rank, None)
                log.log(_member_level(job), "job %r: a peer from %s (pid %d) disconnected "
                        "during rendezvous; %d of %d peers still waiting", job.name,
                        waiter.join.hostname, waiter.join.pid, len(job.waiting), job.world_size)
            if not job.waiting:
                self._forget(job)
            return []
        pending = job.pending.pop(conn, None)
        if pending is not None:
            log.log(_member_level(job), "job %r: pending peer from %s (pid %d) disconnected; it "
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
            if not job.running and now >= job.deadline:
                replies += self._expire_rendezvous(job, now)
                continue
            if job.running and now >= job.left_told_at + _leave_notice_interval(job):
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

    # -- rendezvous --------------------------------------------------------------

    def _join(self, conn: int, request_id: int, join: Join, now: float) -> list[Reply]:
        refusal = self._refuse_join(conn, join)
        if refusal is not None:
            log.warning("job %r: refused a peer from %s (pid %d): %s", join.job, join.hostname,
                        join.pid, refusal[1])
            return [error(conn, request_id, *refusal)]
        job = self._jobs.get(join.job)
        if job is not None and job.running and job.elastic:
            return self._join_pending(job, conn, request_id, join, now)
        if job is not None and job.running:
            # Its members have begun to leave (or _refuse_join would have said
            # no): this join starts the job's next generation.
            self._retired.append(job)
            job = None
        if job is None:
            job = Job(join.job, join.world_size, now + join.timeout, now,
                      join.heartbeat_timeout, elastic=bool(join.elastic),
                      min_size=join.min_size, max_size=join.max_size)
            self._jobs[join.job] = job
        self._joins += 1
        job.waiting[conn] = waiter = Waiter(conn, request_id, join, self._joins)
        if join.rank >= 0:
            job.requested[join.rank] = waiter
        self._conn_job[conn] = job
        wanted = "any rank" if join.rank < 0 else f"rank {join.rank}"
        log.log(_member_level(job), "job %r: peer from %s (pid %d) joined asking for %s; "
                "%d of %d present", job.name, join.hostname, join.pid, wanted,
                len(job.waiting), job.world_size)
        if len(job.waiting) < job.world_size:
            return []
        return self._complete(job, now)

    def _refuse_join(self, conn: int, join: Join) -> tuple[str, str] | None:
        if join.version != PROTOCOL_VERSION:
            return ("protocol", f"the peer speaks protocol version {join.version} and the "
                                f"coordinator {PROTOCOL_VERSION}: run the same asyncoll "
                                "version everywhere")
        if conn in self._conn_job:
            return ("protocol", "this connection has already joined a job")
        if join.world_size < 1:
            return ("configuration", f"world size must be at least 1, got {join.world_size}")
        if join.rank >= join.world_size or join.rank < -1:
            return ("configuration", f"requested rank {join.rank} is out of range for world "
                                     f"size {join.world_size}: use 0 to {join.world_size - 1}")
        if not join.job:
            return ("configuration", "the job id must not be empty")
        if join.elastic and (min(join.min_size, join.max_size) < 0 or join.min_size >
                             join.world_size or 0 < join.max_size < join.world_size):
            return ("configuration", f"an elastic job needs 0 <= min_size <= world_size <= "
                                     f"max_size (0: no bound), got min_size {join.min_size}, "
                                     f"world_size {join.world_size}, max_size {join.max_size}")
        job = self._jobs.get(join.job)
        if job is None:
            return None
        if job.running and job.elastic:
            if not join.elastic:
                return ("rendezvous", f"job {join.job!r} is elastic and running: join it with "
                                      "init_process_group(elastic=True) (or ASYNCOLL_ELASTIC=1) "
                                      "to be admitted at its next reconfigure")
            if job.max_size and len(job.live()) + len(job.pending) >= job.max_size:
                return ("rendezvous", f"job {join.job!r} already has its max_size of "
                                      f"{job.max_size} ({len(job.live())} running, "
                                      f"{len(job.pending)} pending); this process cannot join "
                                      "unless a member leaves")
            return None
        if job.running and not job.departed:
            return ("rendezvous", f"job {join.job!r} is already running with all "
                                  f"{job.world_size} ranks; wait for it to finish or use "
                                  "another job id (ASYNCOLL_JOB_ID)")
        if job.running:
            return None  # the next generation of a job whose members are leaving
        if join.world_size != job.world_size:
            return ("configuration", f"world size {join.world_size} disagrees with the world "
                                     f"size {job.world_size} of the peers already in job "
                                     f"{join.job!r}; every process must use the same "
                                     "WORLD_SIZE")
        other = job.requested.get(join.rank) if join.rank >= 0 else None
        if other is not None:
            return ("configuration",
                    f"rank {join.rank} is already taken in job {join.job!r} by pid "
                    f"{other.join.pid} on host {other.join.hostname}; each process "
                    "needs a distinct RANK")
        return None

    def _complete(self, job: Job, now: float) -> list[Reply]:
        taken = {w.join.rank for w in job.waiting.values() if w.join.rank >= 0}
        free = iter(sorted(set(range(job.world_size)) - taken))
        unassigned = sorted((w for w in job.waiting.values() if w.join.rank < 0),
                            key=lambda w: (w.join.hostname, w.order))
        ranks = {w.conn: w.join.rank for w in job.waiting.values() if w.join.rank >= 0}
        ranks.update({w.conn: next(free) for w in unassigned})
        for waiter in job.waiting.values():
            rank = ranks[waiter.conn]
            j = waiter.join
            job.members[rank] = Member(waiter.conn, PeerInfo(rank, j.host, j.port, j.hostname),
                                        j.pid)
            job.conn_rank[waiter.conn] = rank
        everyone = [job.members[r] for r in range(job.world_size)]
        directory = _directory(everyone)
        replies = [Reply(w.conn, w.request_id, Welcome(rank=ranks[w.conn],
                                                       world_size=job.world_size,
                                                       directory=directory))
                   for w in job.waiting.values()]
        job.waiting.clear()
        job.requested.clear()
        job.running = True
        job.running_since = job.heartbeats_due = now
        job.groups[0] = tuple(range(job.world_size))
        log.info("job %r: rendezvous complete with %d ranks: %s", job.name, job.world_size,
                 members_text(everyone))
        return replies

    def _missing(self, name: str, now: float) -> str:
        """Who job ``name`` waits for, in a line; made anew at most once a second."""
        job = self._jobs.get(name)
        if job is None or job.running:
            return ""
        made_of, made_at, line = job.missing
        # (joins so far, peers waiting) changes whenever the waiting peers do.
        now_of = (self._joins, len(job.waiting))
        if made_of != now_of and (now - made_at >= MISSING_LINE_EVERY_S or not line):
            requested = {w.join.rank for w in job.waiting.values() if w.join.rank >= 0}
            unranked = sum(1 for w in job.waiting.values() if w.join.rank < 0)
            line = missing_text(job.name, job.world_size, requested, unranked)
            job.missing = (now_of, now, line)
        return line

    def _expire_rendezvous(self, job: Job, now: float) -> list[Reply]:
        requested = sorted(w.join.rank for w in job.waiting.values() if w.join.rank >= 0)
        unranked = sum(1 for w in job.waiting.values() if w.join.rank < 0)
        missing = job.world_size - len(job.waiting)
        present = f"ranks {ranks_text(requested)} present"
        if unranked:
            present += f" and {unranked} peer(s) without a requested rank"
        text = (f"rendezvous of job {job.name!r} timed out after {now - job.started:.1f} s: "
                f"{len(job.waiting)} of {job.world_size} peers joined ({present}); "
                f"{missing} missing")
        log.warning("%s", text)
        replies = [error(w.conn, w.request_id, "rendezvous_timeout", text)
                   for w in job.waiting.values()]
        for conn in job.waiting:
            self._conn_job.pop(conn, None)
        self._forget(job)
        return replies

    # -- agreements among running members -----------------------------------------

    def _new_group(self, job: Job, rank: int, conn: int, request_id: int, msg: NewGroup,
                   now: float) -> list[Reply]:
        refusal = _group_refusal(msg.runs, job.world_size)
        if refusal is not None:
            return [error(conn, request_id, "configuration", refusal)]
        call = job.new_group_calls.get(rank, 0)
        job.new_group_calls[rank] = call + 1
        key = ("new_group", call)
        gathering = job.gatherings.get(key)
        if gathering is None:
            gathering = Gathering(f"new_group call #{call + 1}",
                                   frozenset(range(job.world_size)), now + msg.timeout, now,
                                   "rendezvous_timeout")
            job.gatherings[key] = gathering
        gathering.arrivals[rank] = (conn, request_id, msg.runs)
        if not gathering.complete():
            return self._fail_if_departed(job, key, gathering)
        del job.gatherings[key]
        proposals: dict[tuple[int, ...], list[int]] = {}
        for r, (_, _, runs) in sorted(gathering.arrivals.items()):
            proposals.setdefault(runs, []).append(r)  # type: ignore[arg-type]
        if len(proposals) > 1:
            detail = "; ".join(f"ranks {ranks_text(who)} passed {_ranks_words(runs)}"
                               for runs, who in proposals.items())
            text = (f"new_group call #{call + 1} in job {job.name!r}: ranks disagree on the "
                    f"members ({detail}); every rank must call new_group with the same ranks "
                    "in the same order")
            log.warning("%s", text)
            return [error(c, r, "mismatch", text) for c, r, _ in gathering.arrivals.values()]
        (runs,) = proposals
        group_id = call + 1
        job.groups[group_id] = unpack_runs(runs)
        log.info("job %r: group %d created with ranks %s", job.name, group_id,
                 _ranks_words(runs))
        created = GroupCreated(group_id=group_id, runs=runs)
        return [Reply(c, r, created) for c, r, _ in gathering.arrivals.values()]

    def _barrier(self, job: Job, rank: int, conn: int, request_id: int, msg: Barrier,
                 now: float) -> list[Reply]:
        key = ("barrier", msg.group_id, msg.seq)
        gathering = job.gatherings.get(key)
        # The gathering's set answers "a member?" in O(1); the group's tuple
        # is read once per barrier, by its first arrival.
        members = gathering.expected if gathering is not None else frozenset(
            job.groups.get(msg.group_id, ()))
        if rank not in members:
            return [error(conn, request_id, "configuration",
                           f"rank {rank} called barrier on group {msg.group_id}, which "
                           "does not exist or does not contain it")]
        if gathering is None:
            gathering = Gathering(f"barrier #{msg.seq} of group {msg.group_id}",
                                   members, now + msg.timeout, now, "timeout")
            job.gatherings[key] = gathering
        gathering.arrivals[rank] = (conn, request_id, None)
        if not gathering.complete():
            return self._fail_if_departed(job, key, gathering)
        del job.gatherings[key]
        ok = Ok()
        return [Reply(c, r, ok) for c, r, _ in gathering.arrivals.values()]

    def _fail_if_departed(self, job: Job, key: tuple[object, ...],
                          gathering: Gathering) -> list[Reply]:
        # A gathering that expects a rank which has already gone can never complete.
        gone = sorted(gathering.expected & job.departed)
        if not gone:
            return []
        del job.gatherings[key]
        who = ", ".join(f"rank {r} on {job.members[r].info.hostname}" for r in gone)
        text = f"{gathering.what} in job {job.name!r} cannot complete: {who} already left the job"

        return [error(c, r, "peer_lost", text) for c, r, _ in gathering.arrivals.values()]

    # -- elastic membership ---------------------------------------------------------

    def _join_pending(self, job: Job, conn: int, request_id: int, join: Join,
                      now: float) -> list[Reply]:
        self._joins += 1
        job.pending[conn] = Waiter(conn, request_id, join, self._joins, now + join.timeout)
        self._conn_job[conn] = job
        log.log(_member_level(job), "job %r: peer from %s (pid %d) is pending, to be admitted "
                "at the next reconfigure; %d pending", job.name, join.hostname, join.pid,
                len(job.pending))
        job.epoch += 1
        notice = MembersPending(pending=len(job.pending), epoch=job.epoch)
        return [Reply(job.members[r].conn, 0, notice) for r in job.live()
                ] + self._settle_reconfigure(job, now)

    def _expire_pending(self, job: Job, now: float) -> list[Reply]:
        replies = []
        for conn, waiter in list(job.pending.items()):
            if now < waiter.deadline:
                continue
            del job.pending[conn]
            job.epoch += 1
            self._conn_job.pop(conn, None)
            text = (f"job {job.name!r} did not admit this process within "
                    f"{waiter.join.timeout:g} s: its members did not call reconfigure() "
                    "(it leaves no trace in the job; try again later)")
            log.info("job %r: pending peer from %s (pid %d) gave up: not admitted within %g s",
                     job.name, waiter.join.hostname, waiter.join.pid, waiter.join.timeout)
            replies.append(error(conn, waiter.request_id, "rendezvous_timeout", text))
        return replies

    def _check_membership(self, job: Job, rank: int, conn: int, request_id: int,
                          msg: CheckMembership, now: float) -> list[Reply]:
        call = job.checks.get(rank, 0)
        job.checks[rank] = call + 1
        key = ("check", job.generation, call)
        gathering = job.gatherings.get(key)
        if gathering is None:
            gathering = Gathering(f"membership check #{call + 1}", frozenset(job.live()),
                                  now + msg.timeout, now, "timeout")
            job.gatherings[key] = gathering
        gathering.arrivals[rank] = (conn, request_id, None)
        return self._settle_check(job, key, gathering)

    def _settle_check(self, job: Job, key: tuple[object, ...],
                      gathering: Gathering) -> list[Reply]:
        # A member that has begun to reconfigure answered for itself: members
        # can part at a check when one met a loss in it that another did not
        # (it went on, and meets the loss next), and all must meet again.
        reconfiguring = job.gatherings.get(("reconfigure", job.generation))
        # Counted first: the sets are compared only once enough have answered,
        # so that each arrival costs O(1), not O(members).
        if (len(gathering.arrivals) + (len(reconfiguring.arrivals) if reconfiguring else 0)
                < gathering.still_expected(job.departed)):
            return []
        answered = gathering.arrivals.keys() | (reconfiguring.arrivals.keys()
                                                if reconfiguring else set())
        if not (gathering.expected - job.departed) <= answered:
            return []
        del job.gatherings[key]
        # Decided once, for every asker: the same answer even to members that
        # heard of a loss at different moments.
        changed = bool(job.departed or job.pending or reconfiguring)
        answer = MembershipState(changed=int(changed), generation=job.generation,
                                 gone=tuple(sorted(job.departed)), pending=len(job.pending),
                                 epoch=job.epoch)
        return [Reply(c, r, answer) for rank, (c, r, _) in gathering.arrivals.items()
                if rank not in job.departed]

    def _reconfigure(self, job: Job, rank: int, conn: int, request_id: int, msg: Reconfigure,
                     now: float) -> list[Reply]:
        if not job.elastic:
            return [error(conn, request_id, "configuration",
                          f"job {job.name!r} is not elastic: start every process with "
                          "init_process_group(elastic=True) (or ASYNCOLL_ELASTIC=1) to "
                          "reconfigure it")]
        key = ("reconfigure", job.generation)
        gathering = job.gatherings.get(key)
        if gathering is None:
            gathering = Gathering(f"reconfigure of generation {job.generation}",
                                  frozenset(job.live()), now + msg.timeout, now,
                                  "rendezvous_timeout")
            job.gatherings[key] = gathering
        gathering.arrivals[rank] = (conn, request_id, (msg.host, msg.port))
        if log.isEnabledFor(_member_level(job)):
            log.log(_member_level(job), "job %r: rank %d calls reconfigure (%d of %d live "
                    "members)", job.name, rank, len(gathering.arrivals.keys() & set(job.live())),
                    len(job.live()))
        replies = []
        for check_key, check in list(job.gatherings.items()):
            if check_key[0] == "check":
                replies += self._settle_check(job, check_key, check)
        return replies + self._settle_reconfigure(job, now)

    def _settle_reconfigure(self, job: Job, now: float, final: bool = False) -> list[Reply]:
        """Complete the reconfigure if it can (at its deadline, ``final``, if it ever can)."""
        key = ("reconfigure", job.generation)
        gathering = job.gatherings.get(key)
        if gathering is None:
            return []
        if not final and len(gathering.arrivals) < gathering.still_expected(job.departed):
            return []  # counted first, as in _settle_check
        live = set(job.live())
        if not final and not (gathering.expected & live) <= gathering.arrivals.keys():
            return []
        members = sorted(gathering.arrivals.keys() & live)
        room = job.max_size - len(members) if job.max_size else len(job.pending)
        newcomers = sorted(job.pending.values(), key=lambda w: w.order)[:max(room, 0)]
        size = len(members) + len(newcomers)
        if size >= max(job.min_size, 1):
            del job.gatherings[key]
            return self._next_generation(job, gathering, members, newcomers, now)
        if not final:
            return []  # below the minimum: wait for newcomers, up to the deadline
        del job.gatherings[key]
        text = (f"reconfigure of job {job.name!r} timed out after "
                f"{now - gathering.started:.1f} s: {size} members and pending processes, "
                f"below the job's min_size of {job.min_size}; start more processes with "
                "init_process_group(elastic=True), or lower min_size")
        log.warning("%s", text)
        return [error(c, r, "rendezvous_timeout", text)
                for rank, (c, r, _) in gathering.arrivals.items() if rank in live]

    def _next_generation(self, job: Job, gathering: Gathering, members: list[int],
                         newcomers: list[Waiter], now: float) -> list[Reply]:
        old = job.generation
        staying = set(members)
        late = [r for r in job.live() if r not in staying]
        replies: list[Reply] = []
        for rank in late:
            member = job.members[rank]
            text = (f"rank {rank} of job {job.name!r} did not call reconfigure() within "
                    f"{gathering.deadline - gathering.started:g} s, and the job went on "
                    f"without it (generation {old + 1}); this process is no longer a member: "
                    "leave, and join again with init_process_group(elastic=True)")
            self._excluded[member.conn] = text
            self._conn_job.pop(member.conn, None)
            # Told at once, so that its next call of any kind fails with this,
            # not only its next request to the coordinator.
            replies.append(error(member.conn, 0, "excluded", text))
        for waiter in newcomers:
            del job.pending[waiter.conn]
        joined = [Member(w.conn, PeerInfo(0, w.join.host, w.join.port, w.join.hostname),
                         w.join.pid, last_heartbeat=now) for w in newcomers]
        everyone = [job.members[r] for r in members] + joined
        # Each member's address for the new generation: what it gave reconfigure
        # (a survivor), or its join (a newcomer).
        addresses: list[tuple[str, int]] = [
            gathering.arrivals[r][2] for r in members]  # type: ignore[misc]
        addresses += [(w.join.host, w.join.port) for w in newcomers]
        for new_rank, member in enumerate(everyone):
            host, port = addresses[new_rank]
            member.info = PeerInfo(new_rank, host, port, member.info.hostname)
        gone = sorted(set(job.members) - set(members))
        job.members = dict(enumerate(everyone))
        job.conn_rank = {m.conn: r for r, m in job.members.items()}
        job.world_size, job.generation = len(everyone), old + 1
        job.departed.clear()
        job.groups = {0: tuple(range(job.world_size))}
        job.new_group_calls.clear()
        job.checks.clear()
        for key, other in list(job.gatherings.items()):  # agreements of the old membership
            del job.gatherings[key]
            replies += [error(c, r, "group_broken", f"{other.what} in job {job.name!r} was "
                              f"ended by the reconfigure to generation {job.generation}")
                        for c, r, _ in other.arrivals.values()]
        changes = [f"ranks {ranks_text(gone)} of generation {old} gone" if gone else "",
                   f"ranks {ranks_text(late)} excluded for not calling reconfigure"
                   if late else "", f"{len(joined)} joined" if joined else ""]
        log.info("job %r: generation %d: %d members (%s): %s", job.name, job.generation,
                 job.world_size, "; ".join(c for c in changes if c) or "no change",
                 members_text(everyone))
        directory = _directory(everyone)
        replies += self._answer_leaves(job)  # the Welcome tells the new membership
        answers = {job.members[new].conn: gathering.arrivals[old_rank][1]
                   for new, old_rank in enumerate(members)}
        answers.update({w.conn: w.request_id for w in newcomers})
        return replies + [Reply(conn, request_id, Welcome(
            rank=job.conn_rank[conn], world_size=job.world_size, directory=directory,
            generation=job.generation)) for conn, request_id in answers.items()]

    # -- departures ----------------------------------------------------------------

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
        level = _member_level(job) if how == "left" else logging.WARNING
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
                job.unannounced or now < job.left_told_at + _leave_notice_interval(job)):
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

    @staticmethod
    def _answer_leaves(job: Job) -> list[Reply]:
        ok = Ok()
        replies = [Reply(conn, leave, ok) for _, conn, leave, _ in job.unannounced]
        job.unannounced.clear()
        return replies

    def _live(self) -> list[Job]:
        return [*self._jobs.values(), *self._retired]

    def _forget(self, job: Job) -> None:
        if self._jobs.get(job.name) is job:
            del self._jobs[job.name]
        elif job in self._retired:
            self._retired.remove(job)

    @staticmethod
    def _member_rank(job: Job | None, conn: int) -> int | None:
        if job is None or not job.running:
            return None
        return job.conn_rank.get(conn)


def _leave_notice_interval(job: Job) -> float:
    """The least time between two notices of leaves to a large job's members."""
    low, high = LEAVE_NOTICE_INTERVAL_S
    return min(max(job.world_size * LEAVE_NOTICE_S_PER_MEMBER, low), high)


def _member_level(job: Job) -> int:
    """The level of a line about one member: debug in a job too large to log each."""
    return logging.INFO if job.world_size <= MEMBER_LINES_UP_TO else logging.DEBUG


def _directory(members: list[Member]) -> bytes:
    """The packed directory of ``members``, in rank order: once per membership."""
    return pack_directory([(m.info.host, m.info.port, m.info.hostname) for m in members])


def _ranks_words(runs: tuple[int, ...]) -> str:
    """A group's ranks in words, short however large the group."""
    count = runs_count(runs)
    return str(list(unpack_runs(runs))) if count <= 16 else (
        f"a list of {count} ranks in {len(runs) // 3} runs, from rank {runs[0]}")


@lru_cache(maxsize=64)
def _group_refusal(runs: tuple[int, ...], world_size: int) -> str | None:
    """Why new_group cannot have the ranks ``runs`` stands for, or None.

    Cached: every member of a job sends the same runs, and checking them
    expands the whole list.
    """
    what = "the empty list"
    try:
        count = runs_count(runs)
        if count <= world_size:
            ranks = unpack_runs(runs)
            what = str(list(ranks)) if count <= 16 else f"a list of {count} ranks"
            if ranks and len(set(ranks)) == count and min(ranks) >= 0 and max(
                    ranks) < world_size:
                return None
        else:
            what = f"a list of {count} ranks"
    except ProtocolError as exc:
        what = f"malformed runs ({exc})"
    return (f"new_group ranks {what} must be distinct ranks between 0 and "
            f"{world_size - 1}, at least one")

"""A restarted coordinator taking running jobs back from their members (issue 28).

A coordinator keeps nothing on disk: a restarted one knows no job. The
members know everything about their own: each one whose connection broke
reconnects and sends a Rejoin (its rank, the job's size, generation and
directory, its groups and counters, the ranks it knows are gone). The first
one makes the job *adopting*. It is adopted, running again as before:

- once every rank that no member knows gone has re-registered; or
- at the end of a grace period (the job's heartbeat timeout, counted from
  the first re-registration), with more than half of those ranks. The
  others are lost, with the usual notices. A majority, so that two
  coordinators which the members reach at different moments cannot both
  adopt a part of one job.

Re-registrations that disagree with the first (another generation, world
size, directory or elastic bounds, or other ranks for one group id) are
refused with both views named, never merged.

Elastic joins that reach the restarted coordinator before or while the job
is adopted (a replacement process, say) are held as pending, as they would
be in the running job.
"""

from __future__ import annotations

from functools import lru_cache

from asyncoll._rendezvous.records import Job, Member, Rejoining, Reply, error
from asyncoll._rendezvous.registry import Registry
from asyncoll._rendezvous.words import LOST, log, member_level, ranks_text
from asyncoll._wire.compact import unpack_runs
from asyncoll._wire.messages import Adopted, PeerInfo, Rejoin
from asyncoll.errors import ProtocolError


class Adoption:
    """Re-registrations with a restarted coordinator, and the adoption they complete.

    Adopting a job makes it run again; losing the ranks that did not come back
    is the departures' part (see :meth:`adopt`).

    Args:
        registry: the coordinator's jobs and connections, where a re-registered member's
            connection joins its job.
    """

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def rejoin(self, conn: int, request_id: int, msg: Rejoin, now: float) -> list[Reply]:
        """A member of a job re-registers: refused, or waiting for adoption (see
        :meth:`complete` and :meth:`due`), or welcomed back into the job running here."""
        refusal = self._refuse_rejoin(conn, msg)
        job = self._registry.newest(msg.job)
        if refusal is None and job is not None and job.running:
            return self._rejoin_running(job, conn, request_id, msg)
        if refusal is None and (job is None or not job.adopting):
            refusal = self._refuse_adopting(job, msg)
        if refusal is None:
            job = self._adopting_job(job, msg, now)
            refusal = _disagreement(job, msg)
        if refusal is not None:
            log.warning("job %r: refused the re-registration of rank %d from %s (pid %d): %s",
                        msg.job, msg.rank, msg.hostname, msg.pid, refusal[1])
            return [error(conn, request_id, *refusal)]
        assert job is not None
        earlier = job.rejoins.get(msg.rank)
        if earlier is not None:
            # The same process again, on a new connection (it gave up waiting
            # on the old one): the old connection's end must not count.
            self._registry.detach(earlier.member.conn)
            job.conn_rank.pop(earlier.member.conn, None)
        member = Member(conn, PeerInfo(msg.rank, msg.host, msg.port, msg.hostname), msg.pid,
                        token=msg.token)
        job.rejoins[msg.rank] = Rejoining(member, request_id)
        # What it had completed: the calls it sends again once adopted are answered from
        # these (see Job.adopted_new_groups).
        job.new_group_calls[msg.rank] = msg.new_group_calls
        job.checks[msg.rank] = msg.checks
        job.conn_rank[conn] = msg.rank
        self._registry.attach(conn, job)
        gone = _unpacked(msg.gone)
        job.known_gone.update(gone)
        for group in msg.groups:
            job.groups.setdefault(group.group_id, _unpacked(group.runs))
            done = job.adopted_barriers.get(group.group_id, 0)
            job.adopted_barriers[group.group_id] = max(done, group.barriers)
        job.adopted_new_groups = max(job.adopted_new_groups, msg.new_group_calls)
        job.adopted_checks = max(job.adopted_checks, msg.checks)
        job.epoch = max(job.epoch, msg.epoch)
        log.log(member_level(job), "job %r: rank %d on %s (pid %d) re-registered; %d of %d",
                job.name, msg.rank, msg.hostname, msg.pid, len(job.rejoins),
                job.world_size - len(job.known_gone))
        return []

    def _refuse_rejoin(self, conn: int, msg: Rejoin) -> tuple[str, str] | None:
        refusal = self._registry.refuse_first(conn, msg.version)
        if refusal is not None:
            return refusal
        if not msg.job or msg.world_size < 1 or not 0 <= msg.rank < msg.world_size or min(
                msg.generation, msg.new_group_calls, msg.checks, msg.epoch) < 0:
            return ("protocol", f"malformed re-registration: job {msg.job!r}, rank {msg.rank} "
                                f"of {msg.world_size}, generation {msg.generation}")
        try:
            gone = _unpacked(msg.gone)
            for group in msg.groups:
                _unpacked(group.runs)
        except ProtocolError as exc:
            return ("protocol", f"malformed re-registration of rank {msg.rank}: {exc}")
        if msg.rank in gone:
            return ("protocol", f"rank {msg.rank} re-registered and counts itself gone")
        return None

    def _refuse_adopting(self, job: Job | None, msg: Rejoin) -> tuple[str, str] | None:
        """Why job ``msg.job`` cannot start being adopted (None: it can)."""
        if job is None or all(w.join.elastic for w in job.waiting.values()):
            return None
        return ("rendezvous", f"job {msg.job!r} has a new rendezvous of {len(job.waiting)} "
                              "peer(s) waiting on this coordinator, so a running job of that "
                              "id cannot be taken back here; give each job its own id "
                              "(ASYNCOLL_JOB_ID)")

    def _adopting_job(self, job: Job | None, msg: Rejoin, now: float) -> Job:
        """Job ``msg.job`` being adopted, made from ``msg`` if it is not yet."""
        if job is not None and job.adopting:
            return job
        adopting = Job(msg.job, msg.world_size, float("inf"), now, msg.heartbeat_timeout,
                       elastic=bool(msg.elastic), min_size=msg.min_size,
                       max_size=msg.max_size, generation=msg.generation, adopting=True,
                       directory_digest=msg.directory_digest)
        adopting.groups[0] = tuple(range(msg.world_size))
        adopting.adopt_by = now + msg.heartbeat_timeout
        self._registry.add(adopting)
        log.warning("job %r: rank %d re-registered with this coordinator: taking the job "
                    "back (%d ranks, generation %d), for up to %g s", msg.job, msg.rank,
                    msg.world_size, msg.generation, msg.heartbeat_timeout)
        if job is not None:
            # Elastic joins that came first (a replacement, say) wait for the
            # running job's next reconfigure, as they would have before.
            for waiter in job.waiting.values():
                waiter.deadline = now + waiter.join.timeout
                adopting.pending[waiter.conn] = waiter
                self._registry.attach(waiter.conn, adopting)
        return adopting

    @staticmethod
    def _expected_missing(job: Job) -> int:
        """How many ranks that no member knows gone have not re-registered."""
        rejoined_gone = sum(1 for rank in job.known_gone if rank in job.rejoins)
        return job.world_size - len(job.known_gone) - (len(job.rejoins) - rejoined_gone)

    def complete(self, job: Job) -> bool:
        """Whether every rank of adopting ``job`` that no member knows gone re-registered."""
        return self._expected_missing(job) == 0

    def due(self, job: Job, now: float) -> bool:
        """Whether adopting ``job``'s grace is over with a majority of its expected ranks
        re-registered (without one it waits; the members' own deadlines end it)."""
        expected = job.world_size - len(job.known_gone)
        return now >= job.adopt_by and 2 * (expected - self._expected_missing(job)) > expected

    def adopt(self, job: Job, now: float) -> tuple[list[Reply], list[tuple[int, str]]]:
        """Adopt ``job``, running again with the members that re-registered: the replies,
        and the ranks lost for not coming back, with how (for the departures to tell)."""
        replies: list[Reply] = []
        for rank in sorted(job.known_gone & job.rejoins.keys()):
            entry = job.rejoins.pop(rank)
            self._registry.detach(entry.member.conn)
            job.conn_rank.pop(entry.member.conn, None)
            job.new_group_calls.pop(rank, None)
            job.checks.pop(rank, None)
            replies.append(error(entry.member.conn, entry.request_id, "excluded",
                                 _gone_text(job, rank)))
        if not job.rejoins:
            self._registry.forget(job)
            return replies, []
        for rank, entry in job.rejoins.items():
            entry.member.last_heartbeat = now
            job.members[rank] = entry.member
        absent = [rank for rank in range(job.world_size) if rank not in job.rejoins]
        for rank in absent:
            # Its address is the members' to know; the coordinator needs only its rank.
            job.members[rank] = Member(-1, PeerInfo(rank, "", 0, ""), 0)
        job.adopting, job.running = False, True
        job.running_since = job.heartbeats_due = now
        adopted = Adopted(generation=job.generation, members=len(job.rejoins))
        replies += [Reply(e.member.conn, e.request_id, adopted) for e in job.rejoins.values()]
        job.rejoins.clear()
        log.info("adopted job %r: %d members, generation %d", job.name, adopted.members,
                 job.generation)
        job.departed.update(rank for rank in absent if rank in job.known_gone)
        how = (f"{LOST}it did not re-register with the restarted coordinator within "
               f"{job.heartbeat_timeout:g} s")
        return replies, [(rank, how) for rank in absent if rank not in job.known_gone]

    def _rejoin_running(self, job: Job, conn: int, request_id: int,
                        msg: Rejoin) -> list[Reply]:
        """A re-registration after the job was adopted (or to a job running here)."""
        if msg.rank in job.departed and msg.generation == job.generation:
            return [error(conn, request_id, "excluded", _gone_text(job, msg.rank))]
        member = job.members.get(msg.rank)
        if (member is None or member.pid != msg.pid or member.info.hostname != msg.hostname
                or msg.generation != job.generation):
            text = (f"job {job.name!r} runs on this coordinator (generation {job.generation}"
                    f", {job.world_size} ranks) without this process as rank {msg.rank}: it "
                    "cannot be taken back here; give each job its own id (ASYNCOLL_JOB_ID)")
            return [error(conn, request_id, "rendezvous", text)]
        # The same member again, on a new connection: the old one's end must not count.
        self._registry.detach(member.conn)
        job.conn_rank.pop(member.conn, None)
        member.conn = conn
        job.conn_rank[conn] = msg.rank
        self._registry.attach(conn, job)
        return [Reply(conn, request_id, Adopted(generation=job.generation,
                                                members=len(job.live())))]

    def drop_rejoin(self, job: Job, conn: int) -> None:
        """Re-registered connection ``conn`` closed before adoption: its rank is missing again."""
        rank = job.conn_rank.pop(conn, None)
        if rank is not None and job.rejoins.get(rank, None) is not None:
            del job.rejoins[rank]
            job.new_group_calls.pop(rank, None)
            job.checks.pop(rank, None)
        job.pending.pop(conn, None)
        if not job.rejoins:
            for waiter in job.pending.values():
                self._registry.detach(waiter.conn)
            self._registry.forget(job)


def _disagreement(job: Job, msg: Rejoin) -> tuple[str, str] | None:
    """Why ``msg`` disagrees with the re-registrations of ``job`` so far (None: it agrees)."""
    mine = (msg.world_size, msg.generation, msg.directory_digest,
            (bool(msg.elastic), msg.min_size, msg.max_size))
    theirs = (job.world_size, job.generation, job.directory_digest,
              (job.elastic, job.min_size, job.max_size))
    names = ("world size", "generation", "directory (hash)", "elastic bounds")
    for name, a, b in zip(names, mine, theirs, strict=True):
        if a != b:
            return ("rendezvous", f"rank {msg.rank} re-registered job {job.name!r} with "
                                  f"{name} {a}, and {_others(job)} with {b}: they are not one "
                                  "membership, and the coordinator does not merge them")
    for group in msg.groups:
        known = job.groups.get(group.group_id)
        ranks = _unpacked(group.runs)
        if known is not None and known is not ranks and known != ranks:
            return ("rendezvous", f"rank {msg.rank} re-registered group {group.group_id} of "
                                  f"job {job.name!r} with ranks "
                                  f"{_in_order(ranks)}, and {_others(job)} with "
                                  f"ranks {_in_order(known)}: the coordinator does not "
                                  "merge them")
    return None


def _others(job: Job) -> str:
    """Who re-registered ``job`` so far, in words: made only for a refusal, since it is
    O(members)."""
    return f"ranks {ranks_text(job.rejoins)}" if job.rejoins else "the job"


@lru_cache(maxsize=64)
def _unpacked(runs: tuple[int, ...]) -> tuple[int, ...]:
    """The ranks of ``runs`` (see unpack_runs), cached: every member of a job sends the
    same groups, and unpacking a group of N ranks for each of N members is O(N^2).

    Raises:
        ProtocolError: the runs are malformed (not cached).
    """
    return unpack_runs(runs)


def _in_order(ranks: tuple[int, ...]) -> str:
    """A group's ranks in their order (a group's order matters), cut short if long."""
    shown = ", ".join(map(str, ranks[:16]))
    return f"[{shown}{', ...' if len(ranks) > 16 else ''}] ({len(ranks)} ranks)"


def _gone_text(job: Job, rank: int) -> str:
    how = ("join again with init_process_group(elastic=True)" if job.elastic
           else "restart the job")
    return (f"rank {rank} of job {job.name!r} is gone for the other members (they re-registered "
            "with the restarted coordinator without it), and the job went on without it; this "
            f"process is no longer a member: leave, and {how}")

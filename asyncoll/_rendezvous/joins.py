"""A job's rendezvous: its joins, until every rank has joined and is welcomed.

A join is refused, waits for the rendezvous, or (to a running elastic job)
becomes pending; a rendezvous that is not complete by its deadline fails.
"""

from __future__ import annotations

from asyncoll._defaults import PROTOCOL_VERSION, REFUSAL_REMEMBERED_S
from asyncoll._rendezvous.directory import directory_of
from asyncoll._rendezvous.elastic import Elasticity
from asyncoll._rendezvous.records import Job, Member, Reply, Waiter, error
from asyncoll._rendezvous.registry import Registry
from asyncoll._rendezvous.tally import Tally
from asyncoll._rendezvous.waiting import missing_text
from asyncoll._rendezvous.words import log, member_level, members_text, ranks_text
from asyncoll._wire.messages import Join, PeerInfo

#: How stale the line on who is missing from a rendezvous may be, in seconds.
MISSING_LINE_EVERY_S = 1.0


class Rendezvous:
    """Joins, and the rendezvous they make up.

    Args:
        registry: the coordinator's jobs and connections.
        elasticity: holds a join to a running elastic job as pending.
        tally: where completed rendezvous are timed.
        ports_up_to: the largest membership whose Welcome lists every port.
    """

    def __init__(self, registry: Registry, elasticity: Elasticity, tally: Tally,
                 ports_up_to: int) -> None:
        self._registry = registry
        self._elasticity = elasticity
        self._tally = tally
        self._ports_up_to = ports_up_to
        # Joins so far: each waiting or pending peer's order.
        self._joins = 0
        # Why each job's rendezvous failed lately, for a peer's refusal, and when
        # (oldest first).
        self._refused: dict[str, tuple[str, float]] = {}

    def join(self, conn: int, request_id: int, join: Join, now: float) -> list[Reply]:
        """A peer on connection ``conn`` joins: refused, waiting, welcomed or pending."""
        refusal = self._refuse_join(conn, join, now)
        if refusal is not None:
            log.warning("job %r: refused a peer from %s (pid %d): %s", join.job, join.hostname,
                        join.pid, refusal[1])
            return [error(conn, request_id, *refusal), *self._fail_for(join, *refusal, now)]
        job = self._registry.newest(join.job)
        if job is not None and (job.running or job.adopting) and job.elastic:
            self._joins += 1
            return self._elasticity.admit_pending(job, conn, request_id, join, self._joins,
                                                  now)
        if job is not None and job.running:
            # Its members have begun to leave (or _refuse_join would have said
            # no): this join starts the job's next generation.
            self._registry.retire(job)
            job = None
        if job is None:
            job = Job(join.job, join.world_size, now + join.timeout, now,
                      join.heartbeat_timeout, elastic=bool(join.elastic),
                      min_size=join.min_size, max_size=join.max_size)
            self._registry.add(job)
        self._joins += 1
        job.waiting[conn] = waiter = Waiter(conn, request_id, join, self._joins)
        if join.rank >= 0:
            job.requested[join.rank] = waiter
        self._registry.attach(conn, job)
        wanted = "any rank" if join.rank < 0 else f"rank {join.rank}"
        log.log(member_level(job), "job %r: peer from %s (pid %d) joined asking for %s; "
                "%d of %d present", job.name, join.hostname, join.pid, wanted,
                len(job.waiting), job.world_size)
        if len(job.waiting) < job.world_size:
            return []
        return self._complete(job, now)

    def _fail_for(self, join: Join, code: str, reason: str, now: float) -> list[Reply]:
        """The refused ``join`` dooms its job's rendezvous unless the job is elastic (it
        may be joined by another process) or runs: fail the peers waiting in it, and for
        REFUSAL_REMEMBERED_S the peers that join it next."""
        if join.elastic or (code != "configuration" and join.version == PROTOCOL_VERSION):
            return []
        job = self._registry.newest(join.job)
        if job is not None and (job.running or job.adopting or job.elastic):
            return []
        wanted = "any rank" if join.rank < 0 else f"rank {join.rank}"
        why = (f"the rendezvous of job {join.job!r} failed: the coordinator refused a peer "
               f"from {join.hostname} (pid {join.pid}) asking for {wanted} of world size "
               f"{join.world_size}: {reason}")
        self._refused.pop(join.job, None)
        self._refused[join.job] = (why, now)
        while now - next(iter(self._refused.values()))[1] > REFUSAL_REMEMBERED_S:
            del self._refused[next(iter(self._refused))]
        if job is None:
            return []
        log.warning("%s; failing the %d peer(s) waiting", why, len(job.waiting))
        return self._end(job, "rendezvous", f"{why}; fix that process and start the job again")

    def _remembered(self, name: str, now: float) -> tuple[str, str] | None:
        """The refusal that failed job ``name``'s rendezvous lately, if any."""
        why, at = self._refused.get(name, ("", float("-inf")))
        if now - at > REFUSAL_REMEMBERED_S:
            return None
        return ("rendezvous", f"{why} ({now - at:.1f} s ago; for {REFUSAL_REMEMBERED_S:g} s "
                              "after such a refusal the coordinator fails new joins to the "
                              "job, so that a whole launch fails together): fix that process "
                              "and start the job again, or use another job id")

    def _refuse_join(self, conn: int, join: Join, now: float) -> tuple[str, str] | None:
        refusal = self._registry.refuse_first(conn, join.version)
        if refusal is not None:
            return refusal
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
        job = self._registry.newest(join.job)
        if job is None:
            return None if join.elastic else self._remembered(join.job, now)
        if job.adopting and not (job.elastic and join.elastic):
            return ("rendezvous", f"job {join.job!r} is being taken back by a restarted "
                                  "coordinator from its members; only an elastic job admits "
                                  "new processes (at its next reconfigure): use another job "
                                  "id (ASYNCOLL_JOB_ID), or wait for it to end")
        if (job.running or job.adopting) and job.elastic:
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
                                        j.pid, token=j.token)
            job.conn_rank[waiter.conn] = rank
        everyone = [job.members[r] for r in range(job.world_size)]
        directory = directory_of(job, self._ports_up_to)
        replies = [Reply(w.conn, w.request_id, directory.welcome(ranks[w.conn]))
                   for w in job.waiting.values()]
        job.waiting.clear()
        job.requested.clear()
        job.running = True
        job.running_since = job.heartbeats_due = now
        job.groups[0] = tuple(range(job.world_size))
        self._tally.rendezvous(now - job.started)
        self._registry.timeline.record(now, job.name, "started", f"rendezvous complete with "
                                       f"{job.world_size} ranks")
        log.info("job %r: rendezvous complete with %d ranks: %s", job.name, job.world_size,
                 members_text(everyone))
        return replies

    def missing(self, name: str, conn: int, now: float) -> str:
        """Who job ``name`` waits for, in a line, made anew at most once a second; empty
        for a waiting peer on connection ``conn`` that is not the first on its host. A
        process pending admission to the running job is told what it waits for."""
        job = self._registry.newest(name)
        if job is not None and conn in job.pending:
            return (f"pending admission to running job {name!r} (generation "
                    f"{job.generation}, {len(job.members) - len(job.departed)} members): "
                    "it joins when they next call reconfigure()")
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
            first: dict[str, int] = {}
            for waiter in job.waiting.values():  # in the order they joined
                first.setdefault(waiter.join.hostname, waiter.conn)
            job.speakers = frozenset(first.values())
        return "" if conn in job.waiting and conn not in job.speakers else line

    def expire(self, job: Job, now: float) -> list[Reply]:
        """Fail waiting ``job``'s rendezvous: its deadline has passed."""
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
        return self._end(job, "rendezvous_timeout", text)

    def _end(self, job: Job, code: str, text: str) -> list[Reply]:
        """Fail every peer waiting in ``job``'s rendezvous with ``text``; forget the job."""
        replies = [error(w.conn, w.request_id, code, text) for w in job.waiting.values()]
        for conn in job.waiting:
            self._registry.detach(conn)
        self._registry.forget(job)
        return replies

    def drop_waiter(self, job: Job, conn: int) -> None:
        """Connection ``conn``, waiting in ``job``'s rendezvous, closed."""
        waiter = job.waiting.pop(conn, None)
        if waiter is not None:
            job.requested.pop(waiter.join.rank, None)
            log.log(member_level(job), "job %r: a peer from %s (pid %d) disconnected "
                    "during rendezvous; %d of %d peers still waiting", job.name,
                    waiter.join.hostname, waiter.join.pid, len(job.waiting), job.world_size)
        if not job.waiting:
            self._registry.forget(job)

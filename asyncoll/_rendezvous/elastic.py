"""An elastic job's membership: pending peers, membership checks, reconfigures.

A reconfigure starts the job's next generation: survivors keep their order
and are numbered from 0, the pending peers follow, and every one of them
gets a Welcome with the new directory (see :mod:`asyncoll._rendezvous.state`).
"""

from __future__ import annotations

from asyncoll._rendezvous.directory import directory_of
from asyncoll._rendezvous.leaves import answer_leaves
from asyncoll._rendezvous.records import Gathering, Job, Member, Reply, Waiter, error
from asyncoll._rendezvous.registry import Registry
from asyncoll._rendezvous.stragglers import Arrivals
from asyncoll._rendezvous.words import log, member_level, members_text, ranks_text
from asyncoll._wire.messages import (
    CheckMembership,
    Join,
    MembershipState,
    MembersPending,
    PeerInfo,
    Reconfigure,
)


class Elasticity:
    """Pending joins, membership checks and reconfigures of elastic jobs.

    Args:
        registry: the coordinator's jobs and connections; members a reconfigure goes on
            without are excluded there.
        ports_up_to: the largest membership whose Welcome lists every port.
    """

    def __init__(self, registry: Registry, ports_up_to: int) -> None:
        self._registry = registry
        self._ports_up_to = ports_up_to

    def admit_pending(self, job: Job, conn: int, request_id: int, join: Join, order: int,
                      now: float) -> list[Reply]:
        """Hold ``join`` (the ``order``-th) to running elastic ``job`` for its next
        reconfigure, and tell the members."""
        job.pending[conn] = Waiter(conn, request_id, join, order, now + join.timeout)
        self._registry.attach(conn, job)
        log.log(member_level(job), "job %r: peer from %s (pid %d) is pending, to be "
                "admitted at the next reconfigure; %d pending", job.name, join.hostname,
                join.pid, len(job.pending))
        return self.tell_pending(job) + self.settle_reconfigure(job, now)

    @staticmethod
    def tell_pending(job: Job) -> list[Reply]:
        """Tell ``job``'s live members how many processes are pending now."""
        job.epoch += 1
        notice = MembersPending(pending=len(job.pending), epoch=job.epoch)
        return [Reply(job.members[r].conn, 0, notice) for r in job.live()]

    @staticmethod
    def drop_pending(job: Job, conn: int) -> bool:
        """Pending connection ``conn`` closed: whether it was pending in ``job``."""
        pending = job.pending.pop(conn, None)
        if pending is None:
            return False
        log.log(member_level(job), "job %r: pending peer from %s (pid %d) "
                "disconnected; it leaves no trace", job.name, pending.join.hostname,
                pending.join.pid)
        return True

    def expire_pending(self, job: Job, now: float) -> list[Reply]:
        """Refuse the pending peers of ``job`` whose own deadline has passed."""
        replies = []
        for conn, waiter in list(job.pending.items()):
            if now < waiter.deadline:
                continue
            del job.pending[conn]
            job.epoch += 1
            self._registry.detach(conn)
            text = (f"job {job.name!r} did not admit this process within "
                    f"{waiter.join.timeout:g} s: its members did not call reconfigure() "
                    "(it leaves no trace in the job; try again later)")
            log.info("job %r: pending peer from %s (pid %d) gave up: not admitted within %g s",
                     job.name, waiter.join.hostname, waiter.join.pid, waiter.join.timeout)
            replies.append(error(conn, waiter.request_id, "rendezvous_timeout", text))
        return replies

    def check_membership(self, job: Job, rank: int, conn: int, request_id: int,
                         msg: CheckMembership, now: float) -> list[Reply]:
        """Rank ``rank`` asks whether the membership changed; answered once all live
        members asked."""
        call = job.checks.get(rank, 0)
        job.checks[rank] = call + 1
        if call < job.adopted_checks:
            # Sent again after an adoption: the other members had their answer.
            return [Reply(conn, request_id, _membership(job, bool(job.departed or job.pending)))]
        key = ("check", job.generation, call)
        gathering = job.gatherings.get(key)
        if gathering is None:
            gathering = Gathering(f"membership check #{call + 1}", frozenset(job.live()),
                                  now + msg.timeout, now, "timeout")
            job.gatherings[key] = gathering
        gathering.arrivals[rank] = (conn, request_id, None)
        return self.settle_check(job, key, gathering)

    def settle_check(self, job: Job, key: tuple[object, ...],
                     gathering: Gathering) -> list[Reply]:
        """Answer membership check ``gathering`` if every live member has answered."""
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
        answer = _membership(job, bool(job.departed or job.pending or reconfiguring))
        return [Reply(c, r, answer) for rank, (c, r, _) in gathering.arrivals.items()
                if rank not in job.departed]

    def reconfigure(self, job: Job, rank: int, conn: int, request_id: int, msg: Reconfigure,
                    now: float) -> list[Reply]:
        """Rank ``rank`` calls reconfigure, which starts the next generation once it can."""
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
        if log.isEnabledFor(member_level(job)):
            log.log(member_level(job), "job %r: rank %d calls reconfigure (%d of %d live "
                    "members)", job.name, rank, len(gathering.arrivals.keys() & set(job.live())),
                    len(job.live()))
        replies = []
        for check_key, check in list(job.gatherings.items()):
            if check_key[0] == "check":
                replies += self.settle_check(job, check_key, check)
        return replies + self.settle_reconfigure(job, now)

    def settle_reconfigure(self, job: Job, now: float, final: bool = False) -> list[Reply]:
        """Complete the reconfigure if it can (at its deadline, ``final``, if it ever can)."""
        key = ("reconfigure", job.generation)
        gathering = job.gatherings.get(key)
        if gathering is None:
            return []
        if not final and len(gathering.arrivals) < gathering.still_expected(job.departed):
            return []  # counted first, as in settle_check
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
            self._registry.exclude(member.conn, text)
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
        job.adopted_new_groups = job.adopted_checks = 0
        job.adopted_barriers.clear()
        job.arrivals = Arrivals()  # of the old ranks and groups
        for member in everyone:
            member.doing = None
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
        directory = directory_of(job, self._ports_up_to)
        replies += answer_leaves(job)  # the Welcome tells the new membership
        answers = {job.members[new].conn: gathering.arrivals[old_rank][1]
                   for new, old_rank in enumerate(members)}
        answers.update({w.conn: w.request_id for w in newcomers})
        return replies + [Reply(conn, request_id, directory.welcome(job.conn_rank[conn]))
                          for conn, request_id in answers.items()]


def _membership(job: Job, changed: bool) -> MembershipState:
    return MembershipState(changed=int(changed), generation=job.generation,
                           gone=tuple(sorted(job.departed)), pending=len(job.pending),
                           epoch=job.epoch)

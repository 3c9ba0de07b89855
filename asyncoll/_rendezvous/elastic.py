"""An elastic job's membership: pending peers, membership checks, reconfigures.

A reconfigure starts the job's next generation: survivors keep their order
and are numbered from 0, the pending peers follow, and every one of them
gets a Welcome with the new directory (see :mod:`asyncoll._rendezvous.state`).
"""

from __future__ import annotations

from dataclasses import dataclass

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
        self._registry.timeline.record(now, job.name, "pending", f"a process from "
                                       f"{join.hostname} (pid {join.pid}) is pending")
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
        terms = Terms.of(msg)
        refusal = terms.refusal(job, rank) if terms is not None else None
        if refusal is not None:
            return [error(conn, request_id, "configuration", refusal)]
        key = ("reconfigure", job.generation)
        gathering = job.gatherings.get(key)
        if gathering is None:
            expected = frozenset(job.live()) if terms is None else terms.expected(job)
            gathering = Gathering(f"reconfigure of generation {job.generation}",
                                  expected, now + msg.timeout, now, "rendezvous_timeout",
                                  terms=terms)
            job.gatherings[key] = gathering
        elif gathering.terms != terms:
            return [error(conn, request_id, "mismatch", (
                f"rank {rank} called reconfigure of job {job.name!r} with "
                f"{Terms.words(terms)}, but ranks {ranks_text(sorted(gathering.arrivals))} "
                f"called it with {Terms.words(gathering.terms)}: every member must pass the "
                "same membership"))]
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
        if isinstance(gathering.terms, Terms):
            return self._settle_on_terms(job, gathering, gathering.terms, now, final)
        live = set(job.live())
        if not final and not (gathering.expected & live) <= gathering.arrivals.keys():
            return []
        members = sorted(gathering.arrivals.keys() & live)
        room = job.max_size - len(members) if job.max_size else len(job.pending)
        newcomers = sorted(job.pending.values(), key=lambda w: w.order)[:max(room, 0)]
        size = len(members) + len(newcomers)
        if size >= max(job.min_size, 1):
            del job.gatherings[key]
            return self._next_generation(job, gathering, [*members, *newcomers], now,
                                         "did not call reconfigure() within "
                                         f"{gathering.deadline - gathering.started:g} s")
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

    def _settle_on_terms(self, job: Job, gathering: Gathering, terms: Terms, now: float,
                         final: bool) -> list[Reply]:
        """Complete a reconfigure to a given membership once every process in it is there:
        its members have called, and the pending processes it names have joined."""
        key = ("reconfigure", job.generation)
        gone = sorted(gathering.expected & job.departed)
        if gone:
            text = (f"reconfigure of job {job.name!r} to {Terms.words(terms)} cannot "
                    f"complete: ranks {ranks_text(gone)}, which it keeps, are gone; "
                    "reconfigure again without them")
        elif not final and not gathering.expected <= gathering.arrivals.keys():
            return []
        else:
            chosen = terms.chosen(job, gathering.expected)
            if isinstance(chosen, list) and gathering.expected <= gathering.arrivals.keys():
                del job.gatherings[key]
                left_out = ("was not named by the reconfigure's handles" if terms.named else
                            "was left out by the shrink")
                return self._next_generation(job, gathering, chosen, now, left_out)
            if not final:
                return []  # a named process has not joined yet
            absent = sorted(gathering.expected - gathering.arrivals.keys())
            text = (f"reconfigure of job {job.name!r} timed out after "
                    f"{now - gathering.started:.1f} s: " + (
                        chosen if isinstance(chosen, str) else
                        f"ranks {ranks_text(absent)} did not call it"))
        del job.gatherings[key]
        log.warning("%s", text)
        return [error(c, r, "rendezvous_timeout", text)
                for rank, (c, r, _) in gathering.arrivals.items() if rank not in job.departed]

    def _next_generation(self, job: Job, gathering: Gathering, chosen: list[int | Waiter],
                         now: float, left_out: str) -> list[Reply]:
        """Start generation ``job.generation + 1`` of ``chosen`` (survivors by their rank,
        newcomers by their pending join), in their new rank order; the live members not
        chosen are excluded (each told that it ``left_out``)."""
        old = job.generation
        members = [c for c in chosen if isinstance(c, int)]
        newcomers = [c for c in chosen if not isinstance(c, int)]
        staying = set(members)
        late = [r for r in job.live() if r not in staying]
        replies: list[Reply] = []
        for rank in late:
            member = job.members[rank]
            text = (f"rank {rank} of job {job.name!r} {left_out}, and the job went on "
                    f"without it (generation {old + 1}); this process is no longer a member: "
                    "leave, and join again with init_process_group(elastic=True)")
            self._registry.exclude(member.conn, text)
            # Told at once, so that its next call of any kind fails with this,
            # not only its next request to the coordinator.
            replies.append(error(member.conn, 0, "excluded", text))
        for waiter in newcomers:
            del job.pending[waiter.conn]
        everyone = [job.members[c] if isinstance(c, int) else
                    Member(c.conn, PeerInfo(0, c.join.host, c.join.port, c.join.hostname),
                           c.join.pid, last_heartbeat=now, token=c.join.token)
                    for c in chosen]
        # Each member's address for the new generation: what it gave reconfigure
        # (a survivor), or its join (a newcomer).
        addresses: list[tuple[str, int]] = [
            gathering.arrivals[c][2] if isinstance(c, int)  # type: ignore[misc]
            else (c.join.host, c.join.port) for c in chosen]
        for new_rank, member in enumerate(everyone):
            host, port = addresses[new_rank]
            member.info = PeerInfo(new_rank, host, port, member.info.hostname)
        gone = sorted(set(job.members) - staying)
        answers = {member.conn: gathering.arrivals[c][1] if isinstance(c, int)
                   else c.request_id for c, member in zip(chosen, everyone)}
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
                   f"ranks {ranks_text(late)} excluded: each {left_out}"
                   if late else "", f"{len(newcomers)} joined" if newcomers else ""]
        said = "; ".join(c for c in changes if c) or "no change"
        log.info("job %r: generation %d: %d members (%s): %s", job.name, job.generation,
                 job.world_size, said, members_text(everyone))
        self._registry.timeline.record(now, job.name, "reconfigured", f"generation "
                                       f"{job.generation}: {job.world_size} members ({said})")
        directory = directory_of(job, self._ports_up_to)
        replies += answer_leaves(job)  # the Welcome tells the new membership
        return replies + [Reply(conn, request_id, directory.welcome(job.conn_rank[conn]))
                          for conn, request_id in answers.items()]


@dataclass(frozen=True, slots=True)
class Terms:
    """The membership a reconfigure was asked for, which every caller must agree on.

    ``named``: exactly these processes (members' and pending peers' tokens),
    ranked in this order when ``ordered``, else survivors in their old order
    and then newcomers; or, when ``named`` is empty, the live members but the
    ranks in ``without``.
    """

    named: tuple[str, ...]
    ordered: bool
    without: frozenset[int]
    uuid: int

    @classmethod
    def of(cls, msg: Reconfigure) -> Terms | None:
        """The terms ``msg`` asks for; None for a plain reconfigure (every caller, and
        the pending peers)."""
        if not msg.named and not msg.without:
            return None
        # A set's order is each caller's own: only a list's is part of the terms.
        named = msg.named if msg.ordered else tuple(sorted(msg.named))
        return cls(named, bool(msg.ordered), frozenset(msg.without), msg.uuid)

    @staticmethod
    def words(terms: object) -> str:
        """The terms, for a message."""
        if not isinstance(terms, Terms):
            return "no membership given (every member that calls, and the pending processes)"
        if terms.named:
            return (f"{len(terms.named)} handles ({'a list' if terms.ordered else 'a set'}, "
                    f"uuid {terms.uuid})")
        return f"ranks {ranks_text(sorted(terms.without))} left out (uuid {terms.uuid})"

    def refusal(self, job: Job, rank: int) -> str | None:
        """Why rank ``rank`` of ``job`` may not call a reconfigure on these terms, if so."""
        if self.named:
            if len(set(self.named)) != len(self.named):
                return (f"the reconfigure of job {job.name!r} names a process twice: "
                        "each handle must be given once")
            if job.members[rank].token not in self.named:
                return (f"rank {rank} of job {job.name!r} called a reconfigure whose handles "
                        "do not name it: only the processes named take part")
            return None
        if rank in self.without:
            return (f"rank {rank} of job {job.name!r} called a shrink that leaves it out: "
                    "only the ranks that stay call it")
        if not self.without <= set(range(job.world_size)):
            return (f"a shrink of job {job.name!r} leaves out ranks "
                    f"{ranks_text(sorted(self.without - set(range(job.world_size))))}, which "
                    f"are not ranks of its {job.world_size}")
        return None

    def expected(self, job: Job) -> frozenset[int]:
        """The members of ``job`` that must call: those the new membership keeps."""
        if self.named:
            named = set(self.named)
            return frozenset(r for r in job.live() if job.members[r].token in named)
        return frozenset(r for r in job.live() if r not in self.without)

    def chosen(self, job: Job, staying: frozenset[int]) -> list[int | Waiter] | str:
        """The new membership in rank order (survivors by rank, newcomers by pending
        join), or why it cannot be formed yet (a named process has not joined)."""
        kept: list[int | Waiter] = [*sorted(staying)]
        if not self.named:
            return kept
        by_token: dict[str, int | Waiter] = {job.members[r].token: r for r in staying}
        pending = {w.join.token: w for w in job.pending.values() if w.join.token}
        missing = [t for t in self.named if t not in by_token and t not in pending]
        if missing:
            return (f"{len(missing)} of its handles name no member or pending process of "
                    f"the job (the first: {missing[0]!r}); each process must call "
                    "reconfigure, a new one from init_process_group first")
        newcomers = sorted((pending[t] for t in self.named if t not in by_token),
                           key=lambda w: w.order)
        if not self.ordered:
            return kept + newcomers
        by_token.update({w.join.token: w for w in newcomers})
        return [by_token[t] for t in self.named]

def _membership(job: Job, changed: bool) -> MembershipState:
    return MembershipState(changed=int(changed), generation=job.generation,
                           gone=tuple(sorted(job.departed)), pending=len(job.pending),
                           epoch=job.epoch)

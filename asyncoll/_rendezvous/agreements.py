"""Agreements among a running job's members: new_group calls and barriers.

Each is a :class:`asyncoll._rendezvous.records.Gathering` that completes when
every expected rank has arrived, and fails when an expected rank has left.
"""

from __future__ import annotations

from functools import lru_cache

from asyncoll._rendezvous.records import Gathering, Job, Reply, error
from asyncoll._rendezvous.tally import Tally
from asyncoll._rendezvous.words import log, ranks_text
from asyncoll._wire.compact import pack_runs, runs_count, unpack_runs
from asyncoll._wire.messages import Barrier, GroupCreated, NewGroup, Ok
from asyncoll.errors import ProtocolError, timed_out_words


class Agreements:
    """new_group and barrier requests, and the end of agreements that cannot complete.

    Args:
        tally: where created groups and disagreements are counted.
    """

    def __init__(self, tally: Tally) -> None:
        self._tally = tally

    def new_group(self, job: Job, rank: int, conn: int, request_id: int, msg: NewGroup,
                  now: float) -> list[Reply]:
        """Rank ``rank``'s new_group call; the group is created once every rank called it."""
        refusal = _group_refusal(msg.runs, job.world_size)
        if refusal is not None:
            return [error(conn, request_id, "configuration", refusal)]
        call = job.new_group_calls.get(rank, 0)
        job.new_group_calls[rank] = call + 1
        if call < job.adopted_new_groups:
            return [self._new_group_before_adoption(job, call, conn, request_id, msg)]
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
            self._tally.desyncs += 1
            return [error(c, r, "mismatch", text) for c, r, _ in gathering.arrivals.values()]
        (runs,) = proposals
        group_id = call + 1
        job.groups[group_id] = unpack_runs(runs)
        self._tally.new_group(now - gathering.started)
        log.info("job %r: group %d created with ranks %s", job.name, group_id,
                 _ranks_words(runs))
        created = GroupCreated(group_id=group_id, runs=runs)
        return [Reply(c, r, created) for c, r, _ in gathering.arrivals.values()]

    def barrier(self, job: Job, rank: int, conn: int, request_id: int, msg: Barrier,
                now: float) -> list[Reply]:
        """Rank ``rank`` arrives at a barrier; all pass once every member of its group has."""
        done = job.adopted_barriers.get(msg.group_id)
        if done is not None and msg.seq <= done:
            # Sent again after an adoption: the other members completed it then.
            return [Reply(conn, request_id, Ok())]
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

    @staticmethod
    def _new_group_before_adoption(job: Job, call: int, conn: int, request_id: int,
                                   msg: NewGroup) -> Reply:
        """The answer to new_group call ``call``, which other members completed before the
        job was adopted (this member's request was in flight when the coordinator died)."""
        ranks = job.groups.get(call + 1)
        if ranks is None:
            return error(conn, request_id, "rendezvous",
                         f"new_group call #{call + 1} in job {job.name!r} failed for the "
                         "other ranks while the coordinator restarted; call new_group again")
        if unpack_runs(msg.runs) != ranks:
            return error(conn, request_id, "mismatch",
                         f"new_group call #{call + 1} in job {job.name!r}: this rank passed "
                         f"{_ranks_words(msg.runs)}, and the others created group "
                         f"{call + 1} of {_ranks_words(pack_runs(ranks))}; every rank must "
                         "call new_group with the same ranks in the same order")
        return Reply(conn, request_id, GroupCreated(group_id=call + 1, runs=msg.runs))

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

    @staticmethod
    def broken_by(job: Job, key: tuple[object, ...], gathering: Gathering, rank: int,
                  hostname: str, how: str) -> list[Reply]:
        """Rank ``rank``, on ``hostname``, went (``how``): fail ``gathering`` if it still
        waits for it."""
        if rank not in gathering.expected or rank in gathering.arrivals:
            return []
        del job.gatherings[key]
        text = (f"{gathering.what} in job {job.name!r} cannot complete: rank {rank} "
                f"on {hostname} {how} before calling it")
        return [error(c, r, "peer_lost", text) for c, r, _ in gathering.arrivals.values()]

    @staticmethod
    def time_out(job: Job, key: tuple[object, ...], gathering: Gathering,
                 now: float) -> list[Reply]:
        """``gathering``'s deadline passed: fail it on every rank that arrived."""
        del job.gatherings[key]
        missing = gathering.expected - gathering.arrivals.keys()
        text = (f"{gathering.what} in job {job.name!r} timed out after "
                f"{now - gathering.started:.1f} s: ranks {ranks_text(missing)} "
                f"did not arrive (ranks {ranks_text(gathering.arrivals)} did). "
                f"{timed_out_words(gathering.deadline - gathering.started)}")
        log.warning("%s", text)
        return [error(c, r, gathering.timeout_code, text)
                for c, r, _ in gathering.arrivals.values()]


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

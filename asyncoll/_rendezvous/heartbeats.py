"""What members' heartbeats tell the coordinator, beyond being alive (issue 29).

Each heartbeat says what its rank is doing (its oldest unfinished
operation, or else its last one) and brings its sampled arrival times
(asyncoll._rendezvous.stragglers). A status then names the ranks that
others have waited on for seconds, and each group's straggler.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from asyncoll._rendezvous.records import Job
from asyncoll._rendezvous.stragglers import SAMPLES_PER_HEARTBEAT, Doing
from asyncoll._rendezvous.words import ranks_text
from asyncoll._wire.messages import Heartbeat

#: A rank that waits this long in an operation others are behind on is shown.
STUCK_AFTER_S = 5.0


def heard(job: Job, rank: int, beat: Heartbeat, now: float) -> None:
    """Record rank ``rank``'s heartbeat ``beat``, received at ``now``."""
    member = job.members[rank]
    if member.last_heartbeat is not None and member.ops >= 0 and now > member.last_heartbeat:
        member.ops_rate = (beat.ops - member.ops) / (now - member.last_heartbeat)
    member.ops, member.last_heartbeat = beat.ops, now
    if beat.clock_us <= 0:
        return  # says nothing of its operations
    if beat.group_id >= 0:
        member.doing = Doing(beat.group_id, beat.seq, beat.collective, bool(beat.running),
                             now - beat.age_us / 1e6)
    offset = member.clock.heard(now, beat.clock_us)
    samples = beat.samples[-3 * SAMPLES_PER_HEARTBEAT:]
    for i in range(0, len(samples) - 2, 3):
        group_id, seq, entered_us = samples[i:i + 3]
        ranks = job.groups.get(group_id)
        if ranks is not None:
            job.arrivals.arrived(group_id, seq, rank, entered_us + offset, len(ranks))


def job_rate(rates: Sequence[float]) -> float:
    """A running job's operations per second, from its live members' ``rates``: the
    median member's. Every member of a group counts each of the group's collectives, so
    a sum would count a collective once per rank (3 ranks at 10/s are 10/s, not 30)."""
    return statistics.median(rates) if rates else 0.0


def stuck(job: Job, now: float) -> list[str]:
    """Lines naming, per group, the ranks that others have waited on for over
    :data:`STUCK_AFTER_S`, such as "rank 2 is at all_reduce #812 of group 0; ranks 0,
    1, 3 wait in #813 for 14 s"."""
    by_group: dict[int, dict[int, Doing]] = {}
    for rank in job.live():
        op = job.members[rank].doing
        if op is not None:
            by_group.setdefault(op.group_id, {})[rank] = op
    lines = []
    for group_id, ops in sorted(by_group.items()):
        newest = max(op.seq for op in ops.values())
        waiting = {r: op for r, op in ops.items()
                   if op.seq == newest and op.running and now - op.since > STUCK_AFTER_S}
        behind = {r: op for r, op in ops.items() if op.seq < newest}
        if not waiting or not behind:
            continue
        oldest = min(op.seq for op in behind.values())
        laggards = sorted(r for r, op in behind.items() if op.seq == oldest)
        op = behind[laggards[0]]
        who = f"rank {laggards[0]} is" if len(laggards) == 1 else \
            f"ranks {ranks_text(laggards)} are"
        waited = now - min(w.since for w in waiting.values())
        others = f"rank {next(iter(waiting))} waits" if len(waiting) == 1 else \
            f"ranks {ranks_text(waiting)} wait"
        lines.append(f"{who} at {op.collective} #{oldest} of group {group_id}; {others} "
                     f"in #{newest} for {waited:.0f} s")
    return lines

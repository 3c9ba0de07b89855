"""What a peer waiting in rendezvous says about who is missing."""

from __future__ import annotations

from asyncoll._wire.messages import JobStatus


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def missing_text(job: JobStatus) -> str:
    """One line naming who has not joined ``job`` yet, such as
    "waiting for 1 of 4 ranks of job 'j': rank 2 has not joined".

    Ranks can be named only when every peer present asked for one; otherwise
    the line counts the peers that will be given ranks.
    """
    present = [m.rank for m in job.members if m.rank >= 0]
    unranked = sum(1 for m in job.members if m.rank < 0)
    missing = job.world_size - len(job.members)
    head = f"waiting for {missing} of {job.world_size} ranks of job {job.job!r}"
    if unranked == 0:
        absent = sorted(set(range(job.world_size)) - set(present))
        verb = "has" if len(absent) == 1 else "have"
        return f"{head}: rank{'s' if len(absent) > 1 else ''} {_ranks(absent)} {verb} not joined"
    joined = f"ranks {_ranks(sorted(present))} and " if present else ""
    return f"{head}: {joined}{unranked} peer(s) without a requested rank have joined"

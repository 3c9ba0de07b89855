"""What a peer waiting in rendezvous is told about who is missing."""

from __future__ import annotations

from collections.abc import Collection

from asyncoll._rendezvous.words import ranks_text


def missing_text(job: str, world_size: int, requested: Collection[int], unranked: int) -> str:
    """One line naming who has not joined ``job`` yet, such as
    "waiting for 1 of 4 ranks of job 'j': rank 2 has not joined".

    ``requested`` are the ranks the peers present asked for, ``unranked`` how
    many present peers asked for none. Ranks can be named only when every
    peer present asked for one; otherwise the line counts the peers that
    will be given ranks.
    """
    missing = world_size - len(requested) - unranked
    head = f"waiting for {missing} of {world_size} ranks of job {job!r}"
    if unranked == 0:
        absent = [r for r in range(world_size) if r not in requested]
        verb = "has" if len(absent) == 1 else "have"
        return (f"{head}: rank{'s' if len(absent) > 1 else ''} {ranks_text(absent)} {verb} "
                "not joined")
    joined = f"ranks {ranks_text(requested)} and " if requested else ""
    return f"{head}: {joined}{unranked} peer(s) without a requested rank have joined"

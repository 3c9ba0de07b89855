"""What a rank waiting for its coordinator, or in rendezvous for the rest of its job, says,
and when."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from asyncoll._defaults import WAITING_FIRST_REPORT_S, WAITING_REPORT_CAP_S
from asyncoll._rendezvous.words import ranks_text


def report_gaps(first: float = WAITING_FIRST_REPORT_S,
                cap: float = WAITING_REPORT_CAP_S) -> Iterator[float]:
    """The seconds between a waiting rank's lines: ``first``, then doubling up to ``cap``."""
    gap = first
    while True:
        yield gap
        gap = min(2 * gap, cap)


def deadline_text(left: float, timeout: float) -> str:
    """When a waiting rank gives up, and how to change that."""
    return (f"this rank gives up in {max(0.0, left):.0f} s, at its join's timeout of "
            f"{timeout:g} s (init_process_group(timeout=...) sets it)")


def unreachable_text(waits_for: str, where: str, waited: float, last: BaseException | None,
                     left: float, timeout: float) -> str:
    """One line saying that this rank has waited ``waited`` seconds for ``waits_for`` (the
    coordinator, rank 0 hosting it) at ``where``, why the last try failed, and when it
    gives up."""
    why = f"the last try failed: {last}" if last is not None else "no answer yet"
    return (f"still waiting for {waits_for} at {where} after {waited:.0f} s ({why}); "
            f"{deadline_text(left, timeout)}")


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

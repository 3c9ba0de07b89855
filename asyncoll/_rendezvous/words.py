"""How the coordinator writes ranks and members, in its messages and its log lines."""

from __future__ import annotations

import logging

from asyncoll._rendezvous.records import Job, Member

#: Jobs up to this size log a line per member's join, leave or reconfigure;
#: larger ones at debug level, and one line per rendezvous or generation.
MEMBER_LINES_UP_TO = 64
#: Most ranges a list of ranks is written out with in a message or a log line.
RANGES_SHOWN = 16

log = logging.getLogger("asyncoll.coordinator")

#: How the coordinator's lines say a member went that did not leave, before why:
#: "rank 1 on node-b (pid 7) was lost: no heartbeat for 11.0 s ...". Its notice
#: to the others carries only the why, since their errors say "was lost: " too.
LOST = "was lost: "


def member_level(job: Job) -> int:
    """The level of a line about one member: debug in a job too large to log each."""
    return logging.INFO if job.world_size <= MEMBER_LINES_UP_TO else logging.DEBUG


def ranks_text(ranks: object) -> str:
    """``ranks`` in words, consecutive ones as ranges: "0, 2, 4-9" (or "none")."""
    items: list[int] = sorted(ranks)  # type: ignore[call-overload]
    ranges: list[tuple[int, int]] = []
    for rank in items:
        if ranges and rank == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], rank)
        else:
            ranges.append((rank, rank))
    words = [str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}-{b}"
             for a, b in ranges[:RANGES_SHOWN]]
    if len(ranges) > RANGES_SHOWN:
        rest = sum(b - a + 1 for a, b in ranges[RANGES_SHOWN:])
        words.append(f"and {rest} more")
    return ", ".join(words) if words else "none"


def members_text(members: list[Member]) -> str:
    """Where ``members`` run, by host: "node-a 0-3, node-b 4-7" (at most RANGES_SHOWN hosts)."""
    by_host: dict[str, list[int]] = {}
    for member in members:
        by_host.setdefault(member.info.hostname, []).append(member.info.rank)
    words = [f"{host} {ranks_text(ranks)}" for host, ranks in
             list(by_host.items())[:RANGES_SHOWN]]
    if len(by_host) > RANGES_SHOWN:
        words.append(f"and {len(by_host) - RANGES_SHOWN} more hosts")
    return "; ".join(words)

"""Which algorithm runs a collective, by message size and group size.

The thresholds below come from ``benchmarks/algorithms.py`` on a 2-vCPU
machine over loopback TCP, 2026-11-30 (median microseconds of one float32
SUM, max over ranks; the machine is noisy, so read the trend, not the digits):

    all_reduce     2 ranks: ring / doubling   3 ranks            4 ranks
       4 KiB          385 /   436            1367 /   749       2176 /   989
      64 KiB          422 /   468            1334 /   840       2665 /  1371
     256 KiB          533 /   377            1846 /  1094       3321 /  1843
     512 KiB          596 /   520            2311 /  1414       3405 /  2575
       1 MiB          849 /  1126            3512 /  2822       5391 /  5421
       4 MiB         4009 /  4571           10603 / 10380      16434 / 22744
       8 MiB         7064 /  9192           19660 / 23210      26655 / 37746

    broadcast      2 ranks: chain / tree      4 ranks
       1 MiB          724 /   566            1958 /  1835
       4 MiB         2016 /  2697            6838 /  9217
      16 MiB         6542 / 11980           22092 / 28124
      64 MiB        22741 / 57500           73499 / 95684
    reduce: chain 666 / tree 695 us at 1 MiB and 35 / 87 ms at 64 MiB (2 ranks)

On 2 cores every extra step of the ring costs a context switch, so
recursive doubling (log2 n steps, whole array each) wins up to about 1 MiB,
and up to about 4 MiB where n is not a power of two (the fold adds two
steps). A chain only pipelines once the array spans several segments, and
wins clearly from 4 MiB. On machines with a core per rank the ring's
crossover should come earlier: re-measure there (world sizes 8 and 16 were
not measured), e.g.

    python benchmarks/algorithms.py --world-sizes 2,3,4,8 \
        --sizes 4K,64K,256K,1M,4M,16M,64M
    python benchmarks/algorithms.py --collective broadcast --world-sizes 2,4

and update the table and the constants together. The segment size was
chosen the same way (anchor benchmark at 1, 16 and 64 MiB, 2 ranks, with
64 KiB, 256 KiB, 1 MiB, 4 MiB and unsegmented): 64 KiB segments cost up to
1.6x at 64 MiB in per-frame overhead; 4 MiB was the steadiest.

The calling-thread paths (issue 13) were measured the same way, 2026-12-01,
float32 SUM all_reduce, median microseconds (max over ranks), forced against
the default of the loop's algorithms:

    arena (same host)   2 ranks: arena / loop    4 ranks: arena / loop
       1 MiB                 306 / 267                785 / 779
       2 MiB                 681 / 1239              1466 / 4562
       4 MiB                1341 / 1470              2782 / 7635
       8 MiB                2502 / 1939              5796 / 11767
    links (2 namespace hosts, unlimited veth): links / loop
      16 KiB      70 / 116         1 MiB     480 / 722
     256 KiB     143 / 299         4 MiB    1721 / 2699

and again 2026-12-02 on another 2-vCPU machine, every algorithm forced
(``benchmarks/algorithms.py``, ``--hosts`` for the namespace hosts; slots
and links raised to 8-16 MiB to time them past their defaults; a forced
call takes the full path, about 25 us more than a repeat):

    all_reduce, one host   ring / doubling / arena     (2 ranks; 4 ranks)
       1 MiB       762 /   528 /  141       7151 /  5304 /   616
       2 MiB       813 /  2126 /  702       7485 / 12745 /  2468
       4 MiB      1946 /  2261 / 1194      10518 / 18091 /  4194
       8 MiB      4406 /  5046 / 2708      18346 / 40664 / 11959
    all_reduce, namespace hosts   ring / doubling / links  (2 hosts; 4 hosts)
       1 MiB      1258 /  1316 /   604      6835 /  6324 /  6793
       2 MiB      1472 /  2603 /  1402
       4 MiB      6017 /  8414 /  4006     20691 / 26405 / 17430
       8 MiB     11147 / 13872 /  8125     30732 / 47980 / 29993
      16 MiB     20990 / 31993 / 19763     61692 / 91445 / 65399
    one host, arena against the best over sockets (2 ranks; 4 ranks)
      broadcast 8 MiB    1911 / 2610             5631 / 12892
      reduce 8 MiB       3879 / 4307             8778 / 11720
      all_gather 8 MiB   3334 / 4397             7108 / 13438   (output bytes)
      reduce_scatter 1 MiB 318 / 612, 4 MiB 1572 / 1205 (2 ranks; 4 ranks:
                         the arena wins to 8 MiB)

So recursive doubling wins at 1 MiB and the ring from 2 MiB in every
setting measured that day (the 2026-11-30 table had them level at 1 MiB):
the ring starts at 2 MiB. The arena wins every collective to 8 MiB, but
reduce_scatter, which it copies whole into each slot (the ring moves half
on 2 ranks), past 1 MiB. Its slots (two per member) are reserved in
/dev/shm, whose docker default is 64 MB, so a slot is 8 MiB only where
/dev/shm has room for it (asyncoll._group.arena_path.slot_for), down to
1 MiB; an operation chosen for the arena that its slot cannot hold runs
the socket algorithm below instead.
Direct links run the loop's own algorithm for the size, so they move the
same bytes and only skip the loop's thread: all_reduce takes them to 8 MiB
(level with the ring at 8 MiB on 4 hosts, behind it at 16 MiB), which is
their default capacity; broadcast on 2 hosts was level with the chain at
4 MiB, so the other collectives keep 1 MiB (not measured on more hosts).

``ASYNCOLL_ALGORITHM`` forces a choice, for tests and benchmarks: a comma-
separated list of ``collective=algorithm`` pairs or bare algorithm names
(a bare name applies to every collective that has it), e.g.
``ASYNCOLL_ALGORITHM=ring`` or ``all_reduce=recursive_doubling,broadcast=chain``;
``arena`` and ``links`` force the calling-thread paths.
"""

from __future__ import annotations

from asyncoll.errors import ConfigurationError

#: The algorithms each collective can run.
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "recursive_doubling", "arena", "links"),
    "broadcast": ("chain", "tree", "arena", "links"),
    "reduce": ("chain", "tree", "arena", "links"),
    "all_gather": ("ring", "arena", "links"),
    "reduce_scatter": ("ring", "arena"),
    "barrier": ("recursive_doubling", "arena", "links"),
}

#: The algorithm that runs in the calling thread through a shared-memory arena
#: (asyncoll._algorithms.arena), for groups whose members share a host ...
ARENA = "arena"
#: ... and the one that runs the transport's algorithms in the calling thread
#: over a group's own TCP connections (asyncoll._transport.direct), for others.
LINKS = "links"
#: The fast paths: in the calling thread, no hop to the event loop's thread.
FAST_PATHS = (ARENA, LINKS)
#: Each collective takes its group's fast path up to this many bytes (its
#: measure, see GroupCore), where the group has one.
UP_TO_BYTES: dict[str, dict[str, int]] = {
    ARENA: {"all_reduce": 8 << 20, "broadcast": 8 << 20, "reduce": 8 << 20,
            "all_gather": 8 << 20, "reduce_scatter": 1 << 20, "barrier": 0},
    LINKS: {"all_reduce": 8 << 20, "broadcast": 1 << 20, "reduce": 1 << 20,
            "all_gather": 1 << 20, "barrier": 0},
}
#: The arena's all-reduce splits the reduction among the members from this size.
ARENA_SPLIT_FROM_BYTES = 32 << 10

#: all_reduce runs recursive doubling below this many bytes, the ring from it ...
ALL_REDUCE_RING_FROM_BYTES = 2 << 20
#: ... or from this many where the group size is not a power of two.
ALL_REDUCE_RING_FROM_BYTES_UNEVEN = 4 << 20
#: broadcast and reduce use the binomial tree below this many bytes, the chain from it.
CHAIN_FROM_BYTES = 4 << 20
#: Pipelining segment of the ring and the chains.
SEGMENT_BYTES = 4 << 20


def parse_forced(spec: str) -> dict[str, str]:
    """{collective: algorithm} from an ASYNCOLL_ALGORITHM value.

    Raises:
        ConfigurationError: an unknown collective or algorithm.
    """
    forced: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        collective, _, name = item.rpartition("=")
        collective, name = collective.strip(), name.strip()
        if collective:
            if name not in ALGORITHMS.get(collective, ()):
                raise ConfigurationError(
                    f"ASYNCOLL_ALGORITHM names {item!r}, but {collective!r} has no algorithm "
                    f"{name!r}; choose from {_choices()}")
            forced[collective] = name
            continue
        takers = [c for c, names in ALGORITHMS.items() if name in names]
        if not takers:
            raise ConfigurationError(f"ASYNCOLL_ALGORITHM names {name!r}, which is no "
                                     f"algorithm; choose from {_choices()}")
        for taker in takers:
            forced.setdefault(taker, name)
    return forced


def choose(collective: str, nbytes: int, group_size: int, forced: str | None = None,
           path: str = "", capacity: int = 0) -> str:
    """The algorithm for ``collective`` on ``nbytes`` per member among ``group_size``.

    Args:
        path: the group's fast path, "arena" or "links" ("" for none).
        capacity: the largest operation it takes, in bytes (0: the group has none).

    Raises:
        ConfigurationError: ``forced`` is not an algorithm of ``collective``, or
            is a fast path the group lacks or the array does not fit.
    """
    if forced is not None:
        if forced not in ALGORITHMS[collective]:
            raise ConfigurationError(f"{collective} has no algorithm {forced!r}; choose "
                                     f"from {', '.join(ALGORITHMS[collective])}")
        if forced in FAST_PATHS and (forced != path or nbytes > capacity):
            raise ConfigurationError(_no_fast_path(collective, nbytes, forced, path, capacity))
        return forced
    up_to = UP_TO_BYTES.get(path, {}).get(collective)
    if capacity and up_to is not None and nbytes <= min(up_to, capacity):
        return path
    return socket_choice(collective, nbytes, group_size)


def _no_fast_path(collective: str, nbytes: int, forced: str, path: str, capacity: int) -> str:
    where = ("its slots hold" if forced == ARENA else "they take at most") + \
        f" {capacity} bytes (raise ASYNCOLL_{'ARENA' if forced == ARENA else 'LINKS'}_BYTES)"
    if forced != path or not capacity:
        where = ("this group has none (its members are not all on one host, shared memory "
                 "is off, or this machine is not x86-64)" if forced == ARENA else
                 "this group has none (its members share a host, or ASYNCOLL_LINKS_BYTES "
                 "is 0, or the links could not be opened)")
    kind = "the shared-memory arena" if forced == ARENA else "direct links"
    return (f"{collective} of {nbytes} bytes cannot run on {kind}: {where}; force another "
            "algorithm or none")


def socket_choice(collective: str, nbytes: int, group_size: int) -> str:
    """The algorithm over the transport (never the arena) for ``collective``."""
    if collective == "all_reduce":
        power_of_two = group_size & (group_size - 1) == 0
        ring_from = (ALL_REDUCE_RING_FROM_BYTES if power_of_two
                     else ALL_REDUCE_RING_FROM_BYTES_UNEVEN)
        return "ring" if nbytes >= ring_from else "recursive_doubling"
    if collective in ("broadcast", "reduce"):
        return "chain" if nbytes >= CHAIN_FROM_BYTES else "tree"
    return ALGORITHMS[collective][0]


def _choices() -> str:
    return "; ".join(f"{c}: {', '.join(names)}" for c, names in ALGORITHMS.items())

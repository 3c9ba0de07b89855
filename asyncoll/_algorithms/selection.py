"""Which algorithm runs a collective, by message size and group size.

Every member chooses from what all of them know alike (the collective, its
size, the group's size and fast path), so ranks always agree. The
thresholds below come from side-by-side measurements, kept with how to
redo them in docs/design/algorithm-choice.md. ``ASYNCOLL_ALGORITHM`` forces a
choice, for tests and benchmarks: a comma-separated list of
``collective=algorithm`` pairs or bare algorithm names (a bare name applies
to every collective that has it), e.g. ``ASYNCOLL_ALGORITHM=ring`` or
``all_reduce=recursive_doubling,broadcast=chain``; ``arena`` and ``links``
force the calling-thread paths.
"""

from __future__ import annotations

from collections.abc import Mapping

from asyncoll.errors import ConfigurationError

#: The algorithms each collective can run.
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "recursive_doubling", "arena", "links"),
    "broadcast": ("chain", "tree", "arena", "links"),
    "reduce": ("chain", "tree", "arena", "links"),
    "all_gather": ("ring", "arena", "links"),
    "reduce_scatter": ("ring", "arena", "links"),
    "barrier": ("recursive_doubling", "arena", "links"),
}

#: The algorithm that runs in the calling thread through a shared-memory arena
#: (asyncoll._algorithms.arena), for groups whose members share a host ...
ARENA = "arena"
#: ... and the one that runs the transport's algorithms in the calling thread
#: over a group's own TCP connections (asyncoll._transport.links), for others.
LINKS = "links"
#: The fast paths: in the calling thread, no hop to the event loop's thread.
FAST_PATHS = (ARENA, LINKS)
#: Each collective takes its group's fast path up to this many bytes (its
#: measure, see GroupCore), where the group has one; an arena takes every
#: size it beats the loop's algorithms at, which is every size (in pieces).
ANY_SIZE = 1 << 62
UP_TO_BYTES: dict[str, dict[str, int]] = {
    ARENA: {"all_reduce": ANY_SIZE, "broadcast": ANY_SIZE, "reduce": ANY_SIZE,
            "all_gather": ANY_SIZE, "reduce_scatter": ANY_SIZE, "barrier": 0},
    LINKS: {"all_reduce": 8 << 20, "broadcast": 1 << 20, "reduce": 1 << 20,
            "all_gather": 1 << 20, "reduce_scatter": 1 << 20, "barrier": 0},
}
#: A group spanning hosts, several members on some, runs these collectives up to
#: this many bytes through each host's arena and one member per host
#: (asyncoll._group.hierarchy), where its links and arenas have room; its links
#: then take them up to this size (docs/design/algorithm-choice.md has the measurements).
#: all_reduce takes every size: its leaders choose as socket_choice does (the ring
#: for large arrays).
HIERARCHY_UP_TO_BYTES = {"all_reduce": ANY_SIZE, "broadcast": 8 << 20, "reduce": 8 << 20,
                         "barrier": 0}
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
           path: str = "", capacity: int = 0, up_to: Mapping[str, int] | None = None) -> str:
    """The algorithm for ``collective`` on ``nbytes`` per member among ``group_size``.

    Args:
        path: the group's fast path, "arena" or "links" ("" for none).
        capacity: the largest operation it takes, in bytes (0: the group has none).
        up_to: the path's bound per collective, where the group's differs from
            UP_TO_BYTES[path] (a group with a hierarchy takes more on its links).

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
    bound = (up_to if up_to is not None else UP_TO_BYTES.get(path, {})).get(collective)
    if capacity and bound is not None and nbytes <= min(bound, capacity):
        return path
    return socket_choice(collective, nbytes, group_size)


def _no_fast_path(collective: str, nbytes: int, forced: str, path: str, capacity: int) -> str:
    # An arena takes any size (in pieces): only links have a bound to raise.
    where = f"they take at most {capacity} bytes (raise ASYNCOLL_LINKS_BYTES)"
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

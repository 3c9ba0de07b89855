"""Which algorithm runs a collective, by message size and group size.

The thresholds below come from ``benchmarks/algorithms.py`` on a 2-vCPU
machine over loopback TCP (median of each algorithm at each size, world
sizes 2 and 4); see that script's docstring for how to re-measure, and
update the table and the constants together.

PLACEHOLDER: measured table goes here.

``ASYNCOLL_ALGORITHM`` forces a choice, for tests and benchmarks: a comma-
separated list of ``collective=algorithm`` pairs or bare algorithm names
(a bare name applies to every collective that has it), e.g.
``ASYNCOLL_ALGORITHM=ring`` or ``all_reduce=recursive_doubling,broadcast=chain``.
"""

from __future__ import annotations

from asyncoll.errors import ConfigurationError

#: The algorithms each collective can run, the automatic choice first.
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "recursive_doubling"),
    "broadcast": ("chain", "tree"),
    "reduce": ("chain", "tree"),
}

#: all_reduce runs recursive doubling below this many bytes, the ring from it.
ALL_REDUCE_RING_FROM_BYTES = 64 << 10
#: ... except with more members, where the ring's 2 (n - 1) latencies cost more.
ALL_REDUCE_RING_FROM_BYTES_LARGE_GROUP = 256 << 10
#: Groups of at least this many members use the large-group threshold.
LARGE_GROUP = 5
#: broadcast and reduce use the binomial tree below this many bytes, the chain from it.
CHAIN_FROM_BYTES = 256 << 10
#: Pipelining segment of the ring and the chains.
SEGMENT_BYTES = 256 << 10


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


def choose(collective: str, nbytes: int, group_size: int, forced: str | None = None) -> str:
    """The algorithm for ``collective`` on ``nbytes`` per member among ``group_size``.

    Raises:
        ConfigurationError: ``forced`` is not an algorithm of ``collective``.
    """
    if forced is not None:
        if forced not in ALGORITHMS[collective]:
            raise ConfigurationError(f"{collective} has no algorithm {forced!r}; choose "
                                     f"from {', '.join(ALGORITHMS[collective])}")
        return forced
    if collective == "all_reduce":
        ring_from = (ALL_REDUCE_RING_FROM_BYTES_LARGE_GROUP if group_size >= LARGE_GROUP
                     else ALL_REDUCE_RING_FROM_BYTES)
        return "ring" if nbytes >= ring_from else "recursive_doubling"
    return "chain" if nbytes >= CHAIN_FROM_BYTES else "tree"


def _choices() -> str:
    return "; ".join(f"{c}: {', '.join(names)}" for c, names in ALGORITHMS.items())

"""Compact wire forms of what grows with the job: rank lists and the directory.

A job of thousands of ranks must not send thousands of msgpack items per
member. A rank list travels as *runs*: a flat tuple of (start, count, step)
triples, found greedily, so the same list always gives the same runs and
the common groups (all ranks, one host's ranks, every k-th rank) take one
triple. The directory travels as one msgpack blob, packed once per
membership: each distinct (address, hostname) pair once, which of them each
rank runs on as (place, count) runs (a host's ranks are adjacent), and each
rank's port, as little-endian arrays; the ports may be left out, and some
ranks' ports sent apart as (rank, port) arrays (:func:`pack_ports`).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from itertools import chain

import msgpack  # type: ignore[import-untyped]

from asyncoll.errors import ProtocolError

__all__ = ["pack_directory", "pack_ports", "pack_runs", "runs_count", "unpack_directory",
           "unpack_ports", "unpack_runs"]


def pack_runs(ranks: Sequence[int]) -> tuple[int, ...]:
    """The runs of ``ranks``: (start, count, step) triples, flattened, in order."""
    runs: list[int] = []
    i, n = 0, len(ranks)
    while i < n:
        start = ranks[i]
        if i + 1 == n:
            runs += (start, 1, 1)
            break
        step = ranks[i + 1] - start
        j = i + 2
        while j < n and ranks[j] - ranks[j - 1] == step:
            j += 1
        runs += (start, j - i, step)
        i = j
    return tuple(runs)


def runs_count(runs: Sequence[int]) -> int:
    """How many ranks ``runs`` stands for.

    Raises:
        ProtocolError: ``runs`` is not a list of (start, count, step) triples
            with positive counts.
    """
    if len(runs) % 3 or any(count < 1 for count in runs[1::3]):
        raise ProtocolError(f"a rank list's runs must be (start, count, step) triples with "
                            f"counts of at least 1, got {list(runs[:12])}")
    return sum(runs[1::3])


def unpack_runs(runs: Sequence[int]) -> tuple[int, ...]:
    """The ranks ``runs`` stands for (see :func:`runs_count` for what it raises)."""
    runs_count(runs)
    return tuple(chain.from_iterable(
        range(start, start + count * step, step) if step else (start,) * count
        for start, count, step in zip(runs[::3], runs[1::3], runs[2::3])))


def pack_directory(peers: Sequence[tuple[str, int, str]], with_ports: bool = True) -> bytes:
    """The directory of a job whose rank ``r`` listens at ``peers[r]`` (host, port, hostname);
    without the ports unless ``with_ports``."""
    places: dict[tuple[str, str], int] = {}
    where = array("I")  # (place, count) pairs
    for host, _, name in peers:
        place = places.setdefault((host, name), len(places))
        if where and where[-2] == place:
            where[-1] += 1
        else:
            where += array("I", (place, 1))
    ports = array("H", (port for _, port, _ in peers) if with_ports else ())
    if sys.byteorder == "big":
        where.byteswap()
        ports.byteswap()
    blob: bytes = msgpack.packb([[list(place) for place in places], where.tobytes(),
                                 ports.tobytes()], use_bin_type=True)
    return blob


def unpack_directory(blob: bytes) -> list[tuple[str, int, str]]:
    """Each rank's (host, port, hostname), from :func:`pack_directory`'s blob.

    Raises:
        ProtocolError: the blob is not a directory.
    """
    try:
        places, where_bytes, port_bytes = msgpack.unpackb(blob, raw=False)
        where, ports = array("I"), array("H")
        where.frombytes(where_bytes)
        ports.frombytes(port_bytes)
        if sys.byteorder == "big":
            where.byteswap()
            ports.byteswap()
        names = [(host, name) for host, name in places]
        if not all(isinstance(host, str) and isinstance(name, str) for host, name in names):
            raise ValueError("a host's address or name is not a string")
        runs = list(zip(where[::2], where[1::2]))
        size = sum(count for _, count in runs)
        if len(where) % 2 or len(ports) not in (0, size) or any(
                place >= len(names) for place, _ in runs):
            raise ValueError("the ranks' places and ports do not match")
        ranks_at = [names[place] for place, count in runs for _ in range(count)]
        return [(host, port, name) for (host, name), port
                in zip(ranks_at, ports or array("H", bytes(2 * size)))]
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ProtocolError(f"the coordinator's directory is malformed: {exc}") from exc



def pack_ports(ports: Sequence[tuple[int, int]]) -> bytes:
    """Some ranks' ports, as (rank, port) pairs."""
    ranks, numbers = array("I", (r for r, _ in ports)), array("H", (p for _, p in ports))
    if sys.byteorder == "big":
        ranks.byteswap()
        numbers.byteswap()
    return ranks.tobytes() + numbers.tobytes()


def unpack_ports(blob: bytes, size: int) -> dict[int, int]:
    """The ports :func:`pack_ports` packed, by rank, each rank below ``size``.

    Raises:
        ProtocolError: the blob is not such pairs.
    """
    count, rest = divmod(len(blob), 6)
    ranks, ports = array("I"), array("H")
    if not rest:
        ranks.frombytes(blob[:4 * count])
        ports.frombytes(blob[4 * count:])
    if sys.byteorder == "big":
        ranks.byteswap()
        ports.byteswap()
    if rest or any(rank >= size for rank in ranks):
        raise ProtocolError(f"the coordinator's ports are malformed ({len(blob)} bytes, "
                            f"for ranks below {size})")
    return dict(zip(ranks, ports))

"""The object collectives: Python objects pickled, as torch does, and moved as bytes.

Unpickling runs code chosen by the sender, so these collectives are only
for peers of one job, which trust each other (issue: authentication keeps
strangers out of the job).
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from asyncoll._algorithms.direct import direct_gather, direct_scatter
from asyncoll._algorithms.ring import ring_all_gather
from asyncoll._algorithms.selection import SEGMENT_BYTES
from asyncoll._algorithms.team import Team
from asyncoll._algorithms.tree import chain_broadcast, tree_broadcast
from asyncoll.errors import ConfigurationError


def dump(obj: object, what: str) -> np.ndarray:
    """``obj`` pickled, as a uint8 array.

    Raises:
        ConfigurationError: the object cannot be pickled.
    """
    try:
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # pickle raises many types: report them all alike
        raise ConfigurationError(f"{what} cannot pickle the {type(obj).__name__} object it "
                                 f"was given ({exc}); pass a picklable object") from exc
    array: np.ndarray = np.frombuffer(payload, dtype=np.uint8).copy()
    return array


def load(payload: np.ndarray) -> object:
    """The object a dump() produced."""
    return pickle.loads(payload.tobytes())


def concatenate(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(the sizes of ``arrays`` as int64, their bytes end to end)."""
    sizes = np.array([a.size for a in arrays], dtype=np.int64)
    joined = np.concatenate(arrays) if arrays else np.empty(0, dtype=np.uint8)
    return sizes, joined


def split(joined: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
    """The arrays concatenate() joined, from the joined bytes and their sizes."""
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    return [joined[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]


async def all_gather(team: Team, object_list: list[Any], mine: np.ndarray) -> None:
    """all_gather_object: the sizes first, then the pickles, both by ring."""
    sizes = np.zeros(team.size, dtype=np.int64)
    sizes[team.me] = mine.size
    await ring_all_gather(team.phase(0), [sizes[i:i + 1] for i in range(team.size)],
                          SEGMENT_BYTES)
    blocks = [mine if i == team.me else np.empty(int(s), dtype=np.uint8)
              for i, s in enumerate(sizes)]
    await ring_all_gather(team.phase(1), blocks, SEGMENT_BYTES)
    object_list[:] = [load(b) for b in blocks]


async def broadcast(team: Team, object_list: list[Any], mine: list[np.ndarray] | None,
                    root: int) -> None:
    """broadcast_object_list: the sizes by tree, then the pickles end to end by chain."""
    if mine is not None:
        sizes, joined = concatenate(mine)
    else:
        sizes, joined = np.zeros(len(object_list), np.int64), None
    await tree_broadcast(team.phase(0), sizes, root)
    payload = joined if joined is not None else np.empty(int(sizes.sum()), np.uint8)
    await chain_broadcast(team.phase(1), payload, root, SEGMENT_BYTES)
    if team.me != root:
        object_list[:] = [load(b) for b in split(payload, sizes)]


async def gather(team: Team, mine: np.ndarray, object_gather_list: list[Any] | None,
                 root: int) -> None:
    """gather_object: the sizes, then the pickles, straight to the root."""
    sizes = np.zeros(team.size, dtype=np.int64)
    sizes[team.me] = mine.size
    at_root = team.me == root
    await direct_gather(team.phase(0), sizes[team.me:team.me + 1], root,
                        [sizes[i:i + 1] for i in range(team.size)] if at_root else None)
    blocks = [mine if i == team.me else np.empty(int(s), dtype=np.uint8)
              for i, s in enumerate(sizes)]
    await direct_gather(team.phase(1), mine, root, blocks if at_root else None)
    if at_root and object_gather_list is not None:
        object_gather_list[:] = [load(b) for b in blocks]


async def scatter(team: Team, output_list: list[Any], mine: list[np.ndarray] | None,
                  root: int) -> None:
    """scatter_object_list: each member's size, then its pickle, from the root."""
    size = np.zeros(1, dtype=np.int64)
    sizes = None if mine is None else [np.array([b.size], dtype=np.int64) for b in mine]
    await direct_scatter(team.phase(0), size, root, sizes)
    payload = mine[root] if mine is not None else np.empty(int(size[0]), np.uint8)
    await direct_scatter(team.phase(1), payload, root, mine)
    output_list[0] = load(payload)

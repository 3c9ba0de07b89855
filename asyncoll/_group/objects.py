"""The object collectives: Python objects pickled, as torch does, and moved as bytes.

`ObjectCollectives` makes their plans for a group, whose core
(asyncoll._group.core) it holds; the functions below are their algorithms
over the transport.

Unpickling runs code chosen by the sender, so these collectives are only
for peers of one job, which trust each other (issue: authentication keeps
strangers out of the job).
"""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._algorithms.pairwise import direct_gather, direct_scatter
from asyncoll._algorithms.ring import ring_all_gather
from asyncoll._algorithms.selection import SEGMENT_BYTES
from asyncoll._algorithms.team import Team
from asyncoll._algorithms.tree import chain_broadcast, tree_broadcast
from asyncoll._group import arguments as check
from asyncoll._group.core import GroupCore
from asyncoll._group.plan import Plan, Signature, seconds
from asyncoll._group.transports import spread
from asyncoll._wire.frames import Operation as Kind
from asyncoll.errors import ConfigurationError


class ObjectCollectives:
    """A group's collectives of picklable Python objects (torch's `*_object*` calls)."""

    def __init__(self, core: GroupCore) -> None:
        self._core = core

    def all_gather_object(self, object_list: list[Any], obj: Any,
                          timeout: float | timedelta | None = None) -> Plan:
        """Set `object_list[i]` to member i's `obj` on every member (pickled)."""
        what = "all_gather_object"
        core = self._core
        core.check_member(what)
        check.tensor_list(object_list, core.size, "object_list", what)
        return core.plan_on_transport(what, Signature(what, Kind.ALL_GATHER_OBJECT),
                                      spread(all_gather), (object_list, dump(obj, what)),
                                      seconds(timeout, core.timeout))

    def broadcast_object_list(self, object_list: list[Any], src: int,
                              timeout: float | timedelta | None = None) -> Plan:
        """Replace the items of `object_list` with global rank `src`'s (pickled).

        Every member passes a list of the same length.
        """
        what = "broadcast_object_list"
        core = self._core
        core.check_member(what)
        root = check.member_index(core.ranks, src, "src", what)
        if not isinstance(object_list, list):
            raise ConfigurationError(f"{what}: object_list must be a list, got "
                                     f"{type(object_list).__name__}")
        mine = [dump(o, what) for o in object_list] if core.rank == root else None
        return core.plan_on_transport(
            what, Signature(what, Kind.BROADCAST_OBJECT_LIST, root=root,
                            elements=len(object_list)),
            spread(broadcast), (object_list, mine, root), seconds(timeout, core.timeout))

    def gather_object(self, obj: Any, object_gather_list: list[Any] | None, dst: int,
                      timeout: float | timedelta | None = None) -> Plan:
        """Set `object_gather_list[i]` on global rank `dst` to member i's `obj`."""
        what = "gather_object"
        core = self._core
        core.check_member(what)
        root = check.member_index(core.ranks, dst, "dst", what)
        if core.rank == root:
            check.tensor_list(object_gather_list, core.size, "object_gather_list", what)
        return core.plan_on_transport(
            what, Signature(what, Kind.GATHER_OBJECT, root=root), spread(gather),
            (dump(obj, what), object_gather_list, root), seconds(timeout, core.timeout))

    def scatter_object_list(self, output_list: list[Any], input_list: list[Any] | None,
                            src: int, timeout: float | timedelta | None = None) -> Plan:
        """Set `output_list[0]` on member i to `input_list[i]` of global rank `src`."""
        what = "scatter_object_list"
        core = self._core
        core.check_member(what)
        root = check.member_index(core.ranks, src, "src", what)
        if not isinstance(output_list, list) or not output_list:
            raise ConfigurationError(f"{what}: scatter_object_output_list must be a list of at "
                                     f"least one item, got {output_list!r}")
        mine = None
        if core.rank == root:
            items = check.tensor_list(input_list, core.size, "scatter_object_input_list", what)
            mine = [dump(o, what) for o in items]
        return core.plan_on_transport(
            what, Signature(what, Kind.SCATTER_OBJECT_LIST, root=root), spread(scatter),
            (output_list, mine, root), seconds(timeout, core.timeout))


def dump(obj: object, what: str) -> NDArray[Any]:
    """`obj` pickled, as a uint8 array.

    Raises:
        ConfigurationError: the object cannot be pickled.
    """
    try:
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # pickle raises many types: report them all alike
        raise ConfigurationError(f"{what} cannot pickle the {type(obj).__name__} object it "
                                 f"was given ({exc}); pass a picklable object") from exc
    array: NDArray[Any] = np.frombuffer(payload, dtype=np.uint8).copy()
    return array


def load(payload: NDArray[Any]) -> object:
    """The object a dump() produced."""
    return pickle.loads(payload.tobytes())


def concatenate(arrays: list[NDArray[Any]]) -> tuple[NDArray[Any], NDArray[Any]]:
    """(the sizes of `arrays` as int64, their bytes end to end)."""
    sizes = np.array([a.size for a in arrays], dtype=np.int64)
    joined = np.concatenate(arrays) if arrays else np.empty(0, dtype=np.uint8)
    return sizes, joined


def split(joined: NDArray[Any], sizes: NDArray[Any]) -> list[NDArray[Any]]:
    """The arrays concatenate() joined, from the joined bytes and their sizes."""
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    return [joined[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]


async def all_gather(team: Team, object_list: list[Any], mine: NDArray[Any]) -> None:
    """all_gather_object: the sizes first, then the pickles, both by ring."""
    sizes = np.zeros(team.size, dtype=np.int64)
    sizes[team.me] = mine.size
    await ring_all_gather(team.phase(0), [sizes[i:i + 1] for i in range(team.size)],
                          SEGMENT_BYTES)
    blocks = [mine if i == team.me else np.empty(int(s), dtype=np.uint8)
              for i, s in enumerate(sizes)]
    await ring_all_gather(team.phase(1), blocks, SEGMENT_BYTES)
    object_list[:] = [load(b) for b in blocks]


async def broadcast(team: Team, object_list: list[Any], mine: list[NDArray[Any]] | None,
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


async def gather(team: Team, mine: NDArray[Any], object_gather_list: list[Any] | None,
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


async def scatter(team: Team, output_list: list[Any], mine: list[NDArray[Any]] | None,
                  root: int) -> None:
    """scatter_object_list: each member's size, then its pickle, from the root."""
    size = np.zeros(1, dtype=np.int64)
    sizes = None if mine is None else [np.array([b.size], dtype=np.int64) for b in mine]
    await direct_scatter(team.phase(0), size, root, sizes)
    payload = mine[root] if mine is not None else np.empty(int(size[0]), np.uint8)
    await direct_scatter(team.phase(1), payload, root, mine)
    output_list[0] = load(payload)

"""Checks of a collective's arguments, made in the caller's thread before anything is sent.

Each returns what the collective works on (group indices, flat arrays) or
raises ConfigurationError with a sentence that names the bad value and what
to pass instead. What only the other ranks know (their sizes, their op) is
not checked here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._group.tensors import Buffer, as_buffer, as_source
from asyncoll.errors import ConfigurationError


def member_index(ranks: Sequence[int], rank: object, role: str, what: str) -> int:
    """The group index of global rank ``rank`` (a src or dst), which must be a member."""
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
        raise ConfigurationError(f"{what}: {role} must be a global rank (an int), got "
                                 f"{rank!r}")
    if rank not in ranks:
        raise ConfigurationError(f"{what}: {role} {rank} is not a member of the group (global "
                                 f"ranks {list(ranks)}); {role} is a global rank, as in torch")
    return list(ranks).index(int(rank))


def tensor_list(items: object, length: int, name: str, what: str) -> list[Any]:
    """``items`` as a list, which must hold exactly ``length`` tensors (one per member)."""
    if not isinstance(items, (list, tuple)):
        raise ConfigurationError(f"{what}: {name} must be a list of {length} tensors (one per "
                                 f"member of the group), got {type(items).__name__}")
    if len(items) != length:
        raise ConfigurationError(f"{what}: {name} must hold one tensor per member of the "
                                 f"group ({length}), got {len(items)}")
    return list(items)


def outputs(items: Sequence[Any], name: str, what: str) -> list[Buffer]:
    """Writable flat buffers of a list of output tensors, which must not share memory."""
    buffers = [as_buffer(item, f"{what} ({name}[{i}])") for i, item in enumerate(items)]
    flats = [b.original if b.original is not None else b.flat for b in buffers]
    for i, a in enumerate(flats):
        for j in range(i):
            if a.size and flats[j].size and np.may_share_memory(a, flats[j]):
                raise ConfigurationError(f"{what}: {name}[{j}] and {name}[{i}] share memory, "
                                         "so one would overwrite the other; pass distinct "
                                         "tensors")
    return buffers


def sources(items: Sequence[Any], name: str, what: str) -> list[NDArray[Any]]:
    """Flat arrays of a list of input tensors."""
    return [as_source(item, f"{what} ({name}[{i}])") for i, item in enumerate(items)]


def same_dtype(arrays: Sequence[NDArray[Any]], names: Sequence[str], what: str) -> np.dtype[Any]:
    """The common dtype of ``arrays``; a mix is refused, as torch refuses it."""
    first = arrays[0].dtype
    for array, name in zip(arrays, names):
        if array.dtype != first:
            raise ConfigurationError(f"{what}: {name} has dtype {array.dtype} but {names[0]} "
                                     f"has {first}; every tensor of one collective must have "
                                     "the same dtype")
    return first


def same_size(array: NDArray[Any], expected: int, name: str, what: str, why: str) -> None:
    """Refuse an array of the wrong number of elements."""
    if array.size != expected:
        raise ConfigurationError(f"{what}: {name} has {array.size} elements but must have "
                                 f"{expected} ({why})")


def split_sizes(splits: object, rows: int, group_size: int, name: str,
                what: str) -> list[int]:
    """Rows per member for all_to_all_single: given, or ``rows`` split evenly."""
    if splits is None or (isinstance(splits, (list, tuple)) and len(splits) == 0):
        if rows % group_size:
            raise ConfigurationError(f"{what}: {rows} rows cannot be split evenly among "
                                     f"{group_size} members; pass {name}")
        return [rows // group_size] * group_size
    if not isinstance(splits, (list, tuple)) or len(splits) != group_size or any(
            isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0
            for s in splits):
        raise ConfigurationError(f"{what}: {name} must be {group_size} non-negative ints (rows "
                                 f"per member), got {splits!r}")
    if sum(splits) != rows:
        raise ConfigurationError(f"{what}: {name} {list(splits)} add up to {sum(splits)} rows "
                                 f"but the tensor has {rows}")
    return [int(s) for s in splits]


def rows_of(tensor: object, flat: NDArray[Any]) -> tuple[int, int]:
    """(rows along the first dimension, elements per row) of a tensor and its flat array."""
    shape = tuple(getattr(tensor, "shape", ()))
    rows = int(shape[0]) if shape else 1
    return rows, (flat.size // rows if rows else 0)

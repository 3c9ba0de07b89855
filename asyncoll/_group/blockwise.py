"""The plans of the collectives whose arrays come one block per member.

reduce_scatter, all_gather and all_to_all each have two faces on
AsyncProcessGroup (a list of tensors, or one tensor cut into blocks); the
faces convert their arguments, and the functions here check the blocks
against each other and make the one plan both faces share. gather's and
scatter's lists, one tensor per member on the root only, are checked here
too, and so is cutting an array into blocks.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._algorithms.ops import check_op
from asyncoll._algorithms.pairwise import direct_all_to_all
from asyncoll._group import arguments as check
from asyncoll._group.core import GroupCore
from asyncoll._group.plan import Plan, Signature, repeat_key, seconds
from asyncoll._group.tensors import write_back
from asyncoll._group.transports import spread
from asyncoll._wire.frames import Operation as Kind
from asyncoll.errors import ConfigurationError
from asyncoll.types import ReduceOp

Timeout = float | timedelta | None


def reduce_scatter(core: GroupCore, what: str, buffer: Any, inputs: list[NDArray[Any]],
                   reduce_op: ReduceOp, timeout: Timeout, algorithm: str | None,
                   whole: NDArray[Any] | None = None) -> Plan:
    """The reduce-scatter of ``inputs`` (block i for member i) into ``buffer``.

    With ``whole``, the input the blocks were cut from, the call may repeat.
    """
    out = buffer.flat
    me = core.rank
    dtype = check.same_dtype([out, *inputs], ["output"] + [
        f"input {i}" for i in range(len(inputs))], what)
    check_op(reduce_op, dtype)
    check.same_size(out, inputs[me].size, "output", what,
                    f"the size of this member's input block, {inputs[me].size}")
    sizes = tuple(block.size for block in inputs)
    signature = Signature("reduce_scatter", Kind.REDUCE_SCATTER, dtype, sum(sizes),
                          reduce_op, sizes=sizes)
    repeat = None if whole is None else (repeat_key(what, (out, whole), reduce_op),
                                         functools.partial(_input_cut, out.size, core.size))
    return core.plan(what, signature, (out, inputs), sum(sizes) * dtype.itemsize, timeout,
                     algorithm, write_back([buffer]), repeat)


def all_gather(core: GroupCore, what: str, mine: NDArray[Any], buffers: list[Any],
               flats: list[NDArray[Any]], timeout: Timeout, algorithm: str | None,
               repeat: Any = None) -> Plan:
    """Member i's ``mine`` into ``flats[i]`` on every member (``buffers`` hold them)."""
    me = core.rank
    check.same_dtype([mine, *flats], ["tensor"] + [f"output {i}" for i in range(len(flats))],
                     what)
    check.same_size(flats[me], mine.size, f"output block {me}", what,
                    "the size of this rank's input")
    sizes = tuple(f.size for f in flats)
    signature = Signature("all_gather", Kind.ALL_GATHER, mine.dtype, sum(sizes), sizes=sizes)
    # The largest block, which every member agrees on (not its own input's size).
    nbytes = max(sizes) * mine.dtype.itemsize
    return core.plan(what, signature, (flats, mine), nbytes, timeout, algorithm,
                     write_back(buffers), repeat)


def all_to_all(core: GroupCore, what: str, buffers: list[Any], outputs: list[NDArray[Any]],
               inputs: list[NDArray[Any]], timeout: Timeout) -> Plan:
    """Member i's ``inputs[j]`` into member j's ``outputs[i]`` (``buffers`` hold them)."""
    check.same_dtype([*outputs, *inputs], [f"output {i}" for i in range(len(outputs))] + [
        f"input {i}" for i in range(len(inputs))], what)
    me = core.rank
    check.same_size(outputs[me], inputs[me].size, f"output block {me}", what,
                    "the size of the input block this rank sends itself")
    if any(np.may_share_memory(o, i) for o in outputs for i in inputs if o.size and i.size):
        inputs = [i.copy() for i in inputs]  # in place: keep the sent values intact
    return core.plan_on_transport(
        what, Signature(what, Kind.ALL_TO_ALL, outputs[0].dtype), spread(direct_all_to_all),
        (inputs, outputs), seconds(timeout, core.timeout), write_back(buffers))


def at_root(core: GroupCore, items: Sequence[Any] | None, root: int, name: str, role: str,
            what: str) -> list[Any] | None:
    """``items``, one tensor per member, given on the root (member ``root``) only: None
    elsewhere.

    Raises:
        ConfigurationError: a list on another member, or not one tensor per member.
    """
    if core.rank == root:
        return check.tensor_list(items, core.size, name, what)
    if items is not None:
        raise ConfigurationError(f"{what}: {name} must be None on rank {core.global_rank}, "
                                 f"which is not {role} {core.ranks[root]}")
    return None


def check_blocks(mine: NDArray[Any], blocks: list[NDArray[Any]], root: int, name: str,
                 what: str) -> None:
    """Check the root's ``blocks`` against this rank's ``mine``: one dtype, and the root's
    own block as large as ``mine``."""
    check.same_dtype([mine, *blocks], ["tensor"] + [
        f"{name}[{i}]" for i in range(len(blocks))], what)
    check.same_size(blocks[root], mine.size, f"{name}[{root}]", what,
                    "the size of this rank's tensor")


def _input_cut(block: int, count: int, arrays: tuple[NDArray[Any], NDArray[Any]]
               ) -> tuple[NDArray[Any], list[NDArray[Any]]]:
    """A repeated reduce_scatter_tensor's (output, input): the input cut into blocks."""
    return arrays[0], blocks(arrays[1], block, count)


def output_cut(block: int, count: int, arrays: tuple[NDArray[Any], NDArray[Any]]
               ) -> tuple[list[NDArray[Any]], NDArray[Any]]:
    """A repeated all_gather_into_tensor's (output, input): the output cut into blocks."""
    return blocks(arrays[0], block, count), arrays[1]


def cut(flat: NDArray[Any], rows: list[int], width: int) -> list[NDArray[Any]]:
    """Consecutive blocks of ``rows[i] * width`` elements of ``flat``."""
    bounds = np.concatenate(([0], np.cumsum(rows))) * width
    return [flat[int(bounds[i]):int(bounds[i + 1])] for i in range(len(rows))]


def blocks(flat: NDArray[Any], block: int, count: int) -> list[NDArray[Any]]:
    """``flat`` cut into ``count`` consecutive blocks of ``block`` elements."""
    return [flat[i * block:(i + 1) * block] for i in range(count)]

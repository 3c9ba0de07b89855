"""all_reduce of sparse COO tensors, as gloo does it: gather everything, sum locally.

A sparse tensor's non-zeros differ in number and place from rank to rank,
so there is nothing to reduce element by element on the wire. gloo gathers
every rank's indices and values and each rank adds the gathered tensors;
so does this, in one all_gather_object of each rank's coalesced indices and
values (one operation of the group, numbered in the caller's thread like
any other), after which every rank adds them in rank order and coalesces.
The same inputs in the same order give every rank the same bits.

Only SUM is defined, as on gloo; the result replaces the tensor's indices
and values in place (``tensor.copy_``, as gloo writes it back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from asyncoll.errors import ConfigurationError
from asyncoll.types import ReduceOp

#: What each rank contributes: (size, sparse_dim, dense_dim, dtype, indices, values).
Part = tuple[tuple[int, ...], int, int, str, Any, Any]


def is_sparse(tensor: Any) -> bool:
    """Whether ``tensor`` is a sparse COO torch tensor."""
    return isinstance(tensor, torch.Tensor) and tensor.layout == torch.sparse_coo


def part_of(tensor: Any, op: Any) -> Part:
    """This rank's contribution (checked before anything is sent).

    Raises:
        ConfigurationError: an op other than SUM, or a tensor not on the CPU.
    """
    if op is not ReduceOp.SUM and getattr(op, "name", None) != "SUM":
        raise ConfigurationError(f"all_reduce of a sparse tensor supports ReduceOp.SUM only "
                                 f"(as gloo), got {op}; convert it with tensor.to_dense() for "
                                 "other ops")
    if tensor.device.type != "cpu":
        raise ConfigurationError(f"all_reduce takes CPU tensors, got a sparse one on "
                                 f"{tensor.device}; move it with tensor.cpu()")
    mine = tensor.detach().coalesce()
    return (tuple(mine.shape), mine.sparse_dim(), mine.dense_dim(), str(mine.dtype),
            mine.indices().clone(), mine.values().clone())


def summing_into(tensor: Any, parts: list[Any], ranks: tuple[int, ...]) -> Callable[[], None]:
    """What adds the gathered ``parts`` (one per member, in member order) into ``tensor``."""

    def finish() -> None:
        first = parts[0]
        for rank, part in zip(ranks, parts):
            if part[:4] != first[:4]:
                raise ConfigurationError(
                    f"all_reduce of sparse tensors needs the same size, sparse and dense "
                    f"dimensions and dtype on every rank: rank {ranks[0]} has {_described(first)}"
                    f", rank {rank} {_described(part)}")
        size = first[0]
        total = torch.sparse_coo_tensor(first[4], first[5], size)
        for part in parts[1:]:
            total = total + torch.sparse_coo_tensor(part[4], part[5], size)
        tensor.copy_(total.coalesce())

    return finish


def _described(part: Part) -> str:
    size, sparse_dim, dense_dim, dtype = part[:4]
    return (f"size {list(size)}, sparse_dim {sparse_dim}, dense_dim {dense_dim}, "
            f"dtype {dtype}")

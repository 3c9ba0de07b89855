"""Turning what the user passes (numpy arrays, CPU torch tensors) into flat arrays.

Collectives work on a 1-D C-contiguous numpy array. A contiguous input is
used in place (a torch tensor shares its storage with ``tensor.numpy()``). A
non-contiguous one (a transposed or sliced view) is reduced in a contiguous
copy whose result is written back into the original's elements, so the
answer is right where gloo's is silently wrong. An input whose elements
overlap in memory (a zero stride, for example) cannot hold one result per
element and is refused, as are read-only arrays.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._wire.dtypes import dtype_code
from asyncoll.errors import ConfigurationError

__all__ = ["Buffer", "as_buffer", "as_source", "write_back"]


@dataclass(slots=True)  # not frozen: a frozen one takes 3x as long to make
class Buffer:
    """A flat contiguous array to operate on, and where its result goes back."""

    flat: NDArray[Any]
    original: NDArray[Any] | None = None

    def write_back(self) -> None:
        """Copy the result into the caller's array when ``flat`` is a copy of it."""
        if self.original is not None:
            np.copyto(self.original, self.flat.reshape(self.original.shape))


def as_buffer(tensor: object, what: str) -> Buffer:
    """Return the Buffer for a numpy array or CPU torch tensor that ``what`` writes into.

    Raises:
        ConfigurationError: not an array, an unsupported dtype, read-only,
            on a device other than the CPU, or with self-overlapping memory.
    """
    array = tensor if type(tensor) is np.ndarray else (
        _torch_as_numpy(tensor, what) if _is_torch_tensor(tensor) else tensor)
    if not isinstance(array, np.ndarray):
        raise ConfigurationError(f"{what} needs a numpy array or a CPU torch tensor to write "
                                 f"the result into, got {type(tensor).__name__}")
    dtype_code(array.dtype)
    flags = array.flags
    if not flags.writeable:
        raise ConfigurationError(f"{what} writes its result into the array, but this "
                                 f"{array.dtype} array of shape {array.shape} is read-only; "
                                 "pass a writable copy (np.array(x))")
    if flags.c_contiguous:
        return Buffer(array.ravel())  # a view: the array is contiguous
    if _may_overlap(array):
        raise ConfigurationError(f"{what} cannot write one result per element into an array "
                                 f"whose elements share memory (shape {array.shape}, strides "
                                 f"{array.strides}); pass a copy (np.array(x))")
    return Buffer(np.ascontiguousarray(array).reshape(-1), array)


def as_source(tensor: object, what: str) -> NDArray[Any]:
    """A flat contiguous array of the values of ``tensor``, which ``what`` only reads.

    Read-only and self-overlapping arrays are fine here; a non-contiguous one
    is copied.

    Raises:
        ConfigurationError: not an array, an unsupported dtype, or not on the CPU.
    """
    array = _torch_as_numpy(tensor, what) if _is_torch_tensor(tensor) else tensor
    if not isinstance(array, np.ndarray):
        raise ConfigurationError(f"{what} needs a numpy array or a CPU torch tensor to send, "
                                 f"got {type(tensor).__name__}")
    dtype_code(array.dtype)
    return np.ascontiguousarray(array).reshape(-1)


def write_back(buffers: Sequence[Buffer], root: int = -1, at_root: bool | None = None
               ) -> Callable[[int], None] | None:
    """What copies a call's results into the caller's arrays, given this member's index.

    Every buffer's, or with ``at_root`` only on member ``root`` (True) or
    only elsewhere (False). None where no buffer is a copy: the results are
    in the caller's arrays already.
    """
    copies = [buffer for buffer in buffers if buffer.original is not None]
    if not copies:
        return None
    return functools.partial(_write, copies, root, at_root)


def _write(copies: list[Buffer], root: int, at_root: bool | None, me: int) -> None:
    if at_root is None or (me == root) == at_root:
        for buffer in copies:
            buffer.write_back()


def _may_overlap(array: NDArray[Any]) -> bool:
    # Sufficient test for no self-overlap: with dimensions sorted by stride,
    # each stride must step over everything the smaller dimensions span.
    dims = sorted((abs(s), n) for s, n in zip(array.strides, array.shape) if n > 1)
    span = array.itemsize
    for stride, extent in dims:
        if stride < span:
            return True
        span = stride * (extent - 1) + span
    return False


def _is_torch_tensor(obj: object) -> bool:
    # Never import torch: if the caller has a tensor, torch is already loaded.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _torch_as_numpy(tensor: object, what: str) -> NDArray[Any]:
    torch = sys.modules["torch"]
    assert isinstance(tensor, torch.Tensor)
    if tensor.device.type != "cpu":
        raise ConfigurationError(f"{what} takes CPU tensors, got one on {tensor.device}; "
                                 "move it with tensor.cpu() and copy the result back")
    if tensor.layout != torch.strided:
        raise ConfigurationError(f"{what} takes dense tensors, got layout {tensor.layout}; "
                                 "convert it with tensor.to_dense()")
    if tensor.dtype == torch.bfloat16:
        raise ConfigurationError(f"{what} does not support torch.bfloat16 yet; reduce "
                                 "tensor.float() and copy the result back")
    if tensor.is_conj() or tensor.is_neg():
        raise ConfigurationError(f"{what} cannot write into a tensor with a lazy conjugate "
                                 "or negation bit; call tensor.resolve_conj() or "
                                 "tensor.resolve_neg() first")
    try:
        # detach(): a tensor that requires grad shares its storage all the same.
        return np.asarray(tensor.detach().numpy())
    except (TypeError, RuntimeError) as exc:
        raise ConfigurationError(f"{what} cannot use a tensor of dtype {tensor.dtype}: "
                                 f"{exc}") from exc

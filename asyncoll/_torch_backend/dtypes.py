"""torch dtypes numpy has no twin for, staged so asyncoll can carry them.

asyncoll works on numpy views of torch tensors (asyncoll._group.tensors), which
cover every torch dtype numpy has, including float16, complex and bool.
bfloat16 has no numpy twin: data movement carries its bits as int16 (exact),
and reductions run on a float32 copy whose result is rounded back into the
tensor, so a sum of bfloat16 values is rounded once instead of at every
step. Other dtypes numpy lacks (the float8 family) are refused by
asyncoll._group.tensors with a ConfigurationError naming the dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def movable(tensor: Any) -> Any:
    """A view of ``tensor`` asyncoll can move bit for bit (bfloat16 as int16)."""
    if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16)
    return tensor


def reducible(tensor: Any) -> tuple[Any, Callable[[], None] | None]:
    """What asyncoll reduces in place of ``tensor``, and how to write the result back.

    bfloat16 is reduced in a float32 copy; the returned callable rounds it back
    into ``tensor``. Every other tensor is used as is (no callable).
    """
    if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.bfloat16:
        staged = tensor.detach().float()

        def write_back() -> None:
            tensor.detach().copy_(staged)

        return staged, write_back
    return tensor, None

"""A DDP communication hook that averages each gradient bucket with a compressed all_reduce.

``DistributedDataParallel.register_comm_hook`` takes it, on a group whose
backend is asyncoll's: each bucket's all_reduce then sends its frames
between hosts as bf16 or block-wise int8, and sums in float32
(asyncoll._algorithms.compression states the bound), where torch's own
fp16 and bf16 hooks sum in the compressed precision. With error feedback,
each bucket keeps what its encodings dropped and adds it to the next step's
gradients. On one host the average is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from asyncoll._algorithms.compression import Compression
from asyncoll._torch_backend.collectives import _reducing
from asyncoll._torch_backend.device_backend import CpuBackend
from asyncoll._torch_backend.process_group import AsyncollProcessGroup
from asyncoll.errors import ConfigurationError
from asyncoll.types import ReduceOp


def compression_hook(mode: str = "int8", *, block: int = 256,
                     error_feedback: bool = False) -> Callable[[Any, Any], Any]:
    """A DDP comm hook: each bucket averaged by asyncoll's all_reduce, compressed so.

    ``model.register_comm_hook(None, compression_hook("int8", error_feedback=True))``;
    the hook's state is the process group to use (None: the default group), as
    for torch's own hooks. Each bucket (by its index) has its own Compression.

    Args:
        mode: "bf16" or "int8".
        block: int8's values per scale (a power of two up to 4096).
        error_feedback: keep each bucket's residual for its next step.

    Raises:
        ConfigurationError: a bad mode or block (here); a group whose backend is
            not asyncoll's, or gradients the mode cannot take (at the first step).
    """
    Compression(mode, block=block)  # refuses a bad mode or block now, not in backward
    buckets: dict[int, Compression] = {}

    def hook(state: Any, bucket: Any) -> Any:
        group = state if state is not None else dist.group.WORLD
        backend = group._get_backend(torch.device("cpu"))
        if isinstance(backend, CpuBackend):  # torch's device Backend over the group
            backend = backend._of()
        if not isinstance(backend, AsyncollProcessGroup):
            raise ConfigurationError(
                f"compression_hook needs a group whose backend is asyncoll's, not "
                f"{type(backend).__name__}: init_process_group(backend='asyncoll').")
        index = bucket.index()
        compression = buckets.get(index)
        if compression is None:
            compression = buckets[index] = Compression(mode, block=block,
                                                       error_feedback=error_feedback)
        tensor = bucket.buffer()
        # As the backend's own allreduce starts one (TorchCollectives), with compression.
        work = backend._start("allreduce", [tensor], [_reducing(
            tensor, lambda staged: backend._group.all_reduce(staged, ReduceOp.AVG,
                                                             compression=compression))])
        return work.get_future().then(lambda done: done.value()[0])

    # DDP checks a hook's annotations (GradBucket and Future[Tensor], or none), as
    # objects: these, not this module's strings.
    hook.__annotations__ = {"state": object, "bucket": dist.GradBucket,
                            "return": torch.futures.Future[torch.Tensor]}
    return hook

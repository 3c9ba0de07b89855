"""asyncoll for torch programs, beyond the backend: a DDP hook that compresses.

``import torch.distributed as dist`` with ``backend="asyncoll"`` needs
nothing from here; this module holds what torch's API has no name for::

    from asyncoll.torch import compression_hook

    model = DistributedDataParallel(model)
    model.register_comm_hook(None, compression_hook("int8", error_feedback=True))

docs/guides/compression.md says what it sends and the error it allows.
"""

from __future__ import annotations

from asyncoll._torch_backend.compression_hook import compression_hook

__all__ = ["compression_hook"]

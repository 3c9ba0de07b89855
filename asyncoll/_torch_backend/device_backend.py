"""The c10d Backend an AsyncollProcessGroup registers for "cpu", for what torch looks up there.

torch's ProcessGroup keeps one c10d Backend per device type, and torch's Python
code asks it questions before it calls the group: ``batch_isend_irecv`` reads
``group._get_backend(device).supports_coalescing`` of any ProcessGroup from
torch 2.14 on (2.13 asks a plain ``ProcessGroup`` only), 2.14's
``monitored_barrier`` wants ``"cpu"`` in ``group._device_types``, and
``group.group_name`` (which ``destroy_process_group(group)`` reads) is kept on
the backends (``ProcessGroup::getGroupName``: "ProcessGroup name not set"
without one). When a creator returns a ProcessGroup, as asyncoll's does so
that its Python methods are the group's, ``_new_process_group_helper`` uses it
as it is and registers no backend on it (``pg = backend_class; break``): the
group registers its own here.

The backend itself runs nothing: torch's Python functions call the
ProcessGroup's methods (asyncoll's), and an operation that reaches the backend
directly fails with torch's own "Backend asyncoll does not support <op>". It
says it cannot coalesce, split, shrink or estimate time, so torch takes its
plain paths. torch before 2.14 cannot make a Backend in Python ("No
constructor defined"): there the group has none, and keeps its name itself.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

_BackendBase: Any = torch._C._distributed_c10d.Backend


class CpuBackend(_BackendBase):  # type: ignore[misc]
    """A c10d Backend that answers torch's questions about an asyncoll group."""

    # Class attributes, not properties: torch's trampoline looks these names up on
    # the Python object, and the base class's properties would call it again.
    supports_coalescing = False
    supports_splitting = False
    supports_shrinking = False
    supports_reconfigure = False
    supports_time_estimate = False
    supports_window = False
    supports_tensor_alloc = False

    def getBackendName(self) -> str:
        """The backend's name, "asyncoll"."""
        return "asyncoll"


def attach(group: Any, rank: int, size: int) -> bool:
    """Register a CpuBackend as ``group``'s backend for "cpu"; False where torch cannot.

    Args:
        group: the ProcessGroup (before torch names it).
        rank, size: the group's.
    """
    try:
        backend = CpuBackend(rank, size)
    except TypeError:  # torch < 2.14: Backend has no Python constructor
        return False
    group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM,
                            backend)
    return True

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
says it cannot coalesce, split or estimate time, so torch takes its plain
paths. What torch's fault-tolerance API asks the backend (``shrink_group``
asks it whether it can shrink, and to shrink; programs ask it ``get_error()``),
and the C++ forwards to the default backend, reach the group's own methods.
The group makes it its default backend, so that those forwards find it.
torch before 2.14 cannot make a Backend in Python ("No constructor
defined"): there the group has none, and keeps its name itself.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.distributed as dist

from asyncoll.errors import ClosedError

_BackendBase: Any = torch._C._distributed_c10d.Backend


class CpuBackend(_BackendBase):  # type: ignore[misc]
    """A c10d Backend that answers torch's questions about an asyncoll group.

    Args:
        group: the AsyncollProcessGroup (held weakly: the group holds this).
    """

    # Class attributes and properties, not methods: torch's trampoline looks these
    # names up on the Python object, and the base class's would call it again.
    supports_coalescing = False
    supports_splitting = True
    supports_time_estimate = False
    supports_window = False
    supports_tensor_alloc = False

    def __init__(self, group: Any) -> None:
        super().__init__(group.rank(), group.size())
        self._group = weakref.ref(group)

    @property
    def supports_shrinking(self) -> bool:
        """Whether the group can shrink (Recovery.supports_shrinking)."""
        return bool(self._of().supports_shrinking)

    @property
    def supports_reconfigure(self) -> bool:
        """Whether the group can reconfigure (Reconfigurable.supports_reconfigure)."""
        return bool(self._of().supports_reconfigure)

    def getBackendName(self) -> str:
        """The backend's name, "asyncoll"."""
        return "asyncoll"

    def shrink(self, ranks_to_exclude: list[int], shrink_flags: int = 0,
               opts_override: Any = None) -> Any:
        """The group's shrink (Recovery.shrink)."""
        return self._of().shrink(ranks_to_exclude, shrink_flags, opts_override)

    def get_error(self) -> Any:
        """The group's error state (Recovery.get_error)."""
        return self._of().get_error()

    def get_reconfigure_handle(self) -> str:
        """The group's handle (Reconfigurable.get_reconfigure_handle)."""
        return str(self._of().get_reconfigure_handle())

    def reconfigure(self, opts: Any) -> Any:
        """The group's reconfigure (Reconfigurable.reconfigure)."""
        return self._of().reconfigure(opts)

    def _of(self) -> Any:
        group = self._group()
        if group is None:
            raise ClosedError("this asyncoll process group was destroyed")
        return group


def attach(group: Any) -> bool:
    """Register a CpuBackend as ``group``'s backend for "cpu", and its default; False where
    torch cannot.

    Args:
        group: the ProcessGroup (before torch names it).
    """
    try:
        backend = CpuBackend(group)
    except TypeError:  # torch < 2.14: Backend has no Python constructor
        return False
    custom = dist.ProcessGroup.BackendType.CUSTOM
    group._register_backend(torch.device("cpu"), custom, backend)
    group._set_default_backend(custom)
    return True

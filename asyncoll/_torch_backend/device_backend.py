"""The c10d Backend an AsyncollProcessGroup registers for "cpu", for what torch looks up there.

torch's ProcessGroup keeps one c10d Backend per device type, and torch's Python
code asks it questions before it calls the group: ``batch_isend_irecv`` reads
``group._get_backend(device).supports_coalescing`` of any ProcessGroup,
``split_group`` its ``supports_splitting``, ``monitored_barrier`` wants
``"cpu"`` in ``group._device_types``, and
``group.group_name`` (which ``destroy_process_group(group)`` reads) is kept on
the backends (``ProcessGroup::getGroupName``: "ProcessGroup name not set"
without one). When a creator returns a ProcessGroup, as asyncoll's does so
that its Python methods are the group's, ``_new_process_group_helper`` uses it
as it is and registers no backend on it (``pg = backend_class; break``): the
group registers its own here.

The backend runs what the group runs: every operation torch calls on a
group (asyncoll._torch_backend.collectives.OPERATIONS: collectives,
coalesced ones, point-to-point, barriers, set_timeout), and torch's
fault-tolerance API (abort, shutdown, get_error, shrink, reconfigure), are
the group's own methods, to which it forwards; so ``get_backend_impl(group,
"cpu")`` and ``group._get_backend(cpu)`` run real operations, in the
group's order and state, with the group's errors (torch's). It holds the
group weakly (the group holds it). It says it cannot coalesce, estimate
time, open windows or allocate tensors (BackendCapabilities), so torch
takes its plain paths; it can split (the group's split_group). The group
makes it its default backend, so that the C++ forwards find it. torch
before 2.14 cannot make a Backend in Python: the backend refuses it
(registration.check_torch_version).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.distributed as dist

from asyncoll._torch_backend.collectives import OPERATIONS
from asyncoll._torch_backend.errors import through_torch
from asyncoll.errors import ClosedError

_BackendBase: Any = torch._C._distributed_c10d.Backend


class BackendCapabilities:
    """What an asyncoll c10d Backend answers to torch's ``supports_*`` questions that do not
    depend on its group: it cannot coalesce, estimate time, open windows or allocate
    tensors. Splitting, shrinking and reconfigure are each backend's own answers."""

    # Class attributes and properties, not methods: torch's trampoline looks these
    # names up on the Python object, and the base class's would call it again.
    supports_coalescing = False
    supports_splitting = False
    supports_time_estimate = False
    supports_window = False
    supports_tensor_alloc = False


class CpuBackend(BackendCapabilities, _BackendBase):  # type: ignore[misc]
    """A c10d Backend that runs an asyncoll group's operations: the group's own methods.

    Args:
        group: the AsyncollProcessGroup (held weakly: the group holds this).
    """

    #: torch's split_group asks the group's backend, then calls the group's split_group
    #: (asyncoll._torch_backend.split); a shrunk group's Backend, under torch's own
    #: ProcessGroup, cannot split.
    supports_splitting = True

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

    def get_reconfigure_handle(self) -> str:
        """The group's handle (Reconfigurable.get_reconfigure_handle)."""
        return str(self._of().get_reconfigure_handle())

    @through_torch
    def _of(self) -> Any:
        group = self._group()
        if group is None:
            raise ClosedError("this asyncoll process group was destroyed; its backend "
                              "runs nothing more")
        return group


def _forwarded(name: str) -> Any:
    """CpuBackend's method ``name``: the group's."""
    def forward(self: CpuBackend, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._of(), name)(*args, **kwargs)

    forward.__name__, forward.__qualname__ = name, f"CpuBackend.{name}"
    forward.__doc__ = f"The group's {name}."
    return forward


# Defined here, not in the class body: one forwarder per name torch calls.
for _name in (*OPERATIONS, "abort", "shutdown", "get_error", "shrink", "reconfigure"):
    setattr(CpuBackend, _name, _forwarded(_name))
del _name


def attach(group: Any) -> None:
    """Register a CpuBackend as ``group``'s backend for "cpu", and its default.

    Args:
        group: the ProcessGroup (before torch names it).
    """
    custom = dist.ProcessGroup.BackendType.CUSTOM
    group._register_backend(torch.device("cpu"), custom, CpuBackend(group))
    group._set_default_backend(custom)

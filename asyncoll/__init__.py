"""asyncoll: collective communication for Python processes, over TCP.

The blocking API has torch.distributed's names and semantics, so
`import asyncoll as dist` can replace `import torch.distributed as dist`
in CPU programs. It is a thin face over the asyncio implementation
(`asyncoll.aio`), which runs on one background event loop thread.
"""

from __future__ import annotations

import importlib as _importlib
import sys as _sys
import typing as _typing

# The errors and ReduceOp import nothing of ours or of the data plane, so they
# load eagerly; everything else loads on first use (PEP 562 __getattr__ below),
# because Python runs this file before any submodule: the coordinator daemon
# (`import asyncoll.coordinator`) must not pay for, or depend on, the groups,
# algorithms and transport.
from asyncoll.errors import (
    AbortedError,
    AsyncollError,
    AuthenticationError,
    ClosedError,
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    ExcludedError,
    GroupBrokenByPeerLossError,
    GroupBrokenError,
    MismatchError,
    MonitoredBarrierError,
    PeerLostError,
    ProtocolError,
    RendezvousError,
    RendezvousTimeoutError,
)
from asyncoll._version import __version__ as __version__
from asyncoll.types import ReduceOp

if _typing.TYPE_CHECKING:
    from asyncoll import group
    from asyncoll._api.blocking import (
        P2POp,
        all_gather,
        all_gather_into_tensor,
        all_gather_object,
        all_reduce,
        all_to_all,
        all_to_all_single,
        barrier,
        batch_isend_irecv,
        broadcast,
        broadcast_object_list,
        destroy_process_group,
        gather,
        gather_object,
        get_backend,
        get_generation,
        get_global_rank,
        get_group_rank,
        get_process_group_ranks,
        get_rank,
        get_straggler_report,
        get_world_size,
        init_process_group,
        irecv,
        is_available,
        is_initialized,
        isend,
        membership_changed,
        monitored_barrier,
        new_group,
        reconfigure,
        recv,
        reduce,
        reduce_scatter,
        reduce_scatter_tensor,
        scatter,
        scatter_object_list,
        send,
    )
    from asyncoll._api.work import Work
    from asyncoll.group import AsyncProcessGroup

    #: torch's name for a group handle; here it is the asyncio group itself.
    ProcessGroup = AsyncProcessGroup


__all__ = [
    "AbortedError",
    "AsyncProcessGroup",
    "AsyncollError",
    "AuthenticationError",
    "ClosedError",
    "CollectiveError",
    "CollectiveTimeoutError",
    "Compression",
    "ConfigurationError",
    "ExcludedError",
    "GroupBrokenByPeerLossError",
    "GroupBrokenError",
    "MismatchError",
    "MonitoredBarrierError",
    "P2POp",
    "PeerLostError",
    "ProcessGroup",
    "ProtocolError",
    "ReduceOp",
    "RendezvousError",
    "RendezvousTimeoutError",
    "Work",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "batch_isend_irecv",
    "broadcast",
    "broadcast_object_list",
    "destroy_process_group",
    "gather",
    "gather_object",
    "get_backend",
    "get_generation",
    "get_global_rank",
    "get_group_rank",
    "get_process_group_ranks",
    "get_rank",
    "get_straggler_report",
    "get_world_size",
    "group",
    "init_process_group",
    "irecv",
    "is_available",
    "is_initialized",
    "isend",
    "membership_changed",
    "monitored_barrier",
    "new_group",
    "reconfigure",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send",
]

# Where the names of __all__ not bound above live, as (module, attribute), with
# None for the module itself; any other name of __all__ is the blocking API's.
# all_reduce and barrier are the blocking API's too, fronted by the compiled
# entry where it is built (asyncoll._api.front).
# aio and coordinator are not in __all__, but `import asyncoll` has always
# made them reachable as attributes.
_ELSEWHERE: dict[str, tuple[str, str | None]] = {
    "AsyncProcessGroup": ("asyncoll.group", "AsyncProcessGroup"),
    "Compression": ("asyncoll._algorithms.compression", "Compression"),
    "ProcessGroup": ("asyncoll.group", "AsyncProcessGroup"),
    "Work": ("asyncoll._api.work", "Work"),
    "aio": ("asyncoll.aio", None),
    "all_reduce": ("asyncoll._api.front", "all_reduce"),
    "barrier": ("asyncoll._api.front", "barrier"),
    "coordinator": ("asyncoll.coordinator", None),
    "group": ("asyncoll.group", None),
}


def _load(name: str) -> object:
    """Import the blocking API (and the data plane under it) on first use of one of its names."""
    if name in _ELSEWHERE:
        module_name, attribute = _ELSEWHERE[name]
    elif name in __all__:
        module_name, attribute = "asyncoll._api.blocking", name
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # later lookups find it without calling this again
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if not _typing.TYPE_CHECKING:
    # Hidden from type checkers, which see the imports above instead: with a
    # visible __getattr__, a misspelt `asyncoll.all_reduse` would type-check.
    __getattr__ = _load


if "torch.distributed" in _sys.modules:
    # torch is loaded already, so registering costs nothing; without torch
    # (or before it), asyncoll never imports it: torch's entry point does this.
    from asyncoll._torch_backend.registration import load as _load_torch_backend

    _load_torch_backend()

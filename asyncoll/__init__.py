"""asyncoll: collective communication for Python processes, over TCP.

The blocking API has torch.distributed's names and semantics, so
``import asyncoll as dist`` can replace ``import torch.distributed as dist``
in CPU programs. It is a thin face over the asyncio implementation
(:mod:`asyncoll.aio`), which runs on one background event loop thread.
"""

from __future__ import annotations

import sys as _sys

from asyncoll import group
from asyncoll._blocking import (
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
    get_global_rank,
    get_group_rank,
    get_process_group_ranks,
    get_rank,
    get_world_size,
    init_process_group,
    irecv,
    is_available,
    is_initialized,
    isend,
    monitored_barrier,
    new_group,
    recv,
    reduce,
    reduce_scatter,
    reduce_scatter_tensor,
    scatter,
    scatter_object_list,
    send,
)
from asyncoll._work import Work
from asyncoll.errors import (
    AsyncollError,
    AuthenticationError,
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    GroupBrokenError,
    MismatchError,
    PeerLostError,
    ProtocolError,
    RendezvousError,
    RendezvousTimeoutError,
)
from asyncoll.group import AsyncProcessGroup
from asyncoll.types import ReduceOp

__version__ = "0.1.0"

#: torch's name for a group handle; here it is the asyncio group itself.
ProcessGroup = AsyncProcessGroup

__all__ = [
    "AsyncProcessGroup",
    "AsyncollError",
    "AuthenticationError",
    "CollectiveError",
    "CollectiveTimeoutError",
    "ConfigurationError",
    "GroupBrokenError",
    "MismatchError",
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
    "get_global_rank",
    "get_group_rank",
    "get_process_group_ranks",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "irecv",
    "is_available",
    "is_initialized",
    "isend",
    "monitored_barrier",
    "new_group",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send",
]

if "torch.distributed" in _sys.modules:
    # torch is loaded already, so registering costs nothing; without torch
    # (or before it), asyncoll never imports it: torch's entry point does this.
    from asyncoll._torch_backend.registration import load as _load_torch_backend

    _load_torch_backend()

"""asyncoll: collective communication for Python processes, over TCP.

The blocking API has torch.distributed's names and semantics, so
``import asyncoll as dist`` can replace ``import torch.distributed as dist``
in CPU programs. It is a thin face over the asyncio implementation
(:mod:`asyncoll.aio`), which runs on one background event loop thread.
"""

from __future__ import annotations

import atexit
import threading
import warnings
from datetime import timedelta
from typing import Any, Sequence

from asyncoll import aio
from asyncoll._loop_thread import LoopThread
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
    "PeerLostError",
    "ProcessGroup",
    "ProtocolError",
    "ReduceOp",
    "RendezvousError",
    "RendezvousTimeoutError",
    "Work",
    "all_reduce",
    "barrier",
    "destroy_process_group",
    "get_backend",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_available",
    "is_initialized",
    "new_group",
]

_lock = threading.Lock()
_loop: LoopThread | None = None
_world: aio.World | None = None


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout: float | timedelta | None = None, world_size: int = -1,
                       rank: int = -1, store: Any = None, group_name: str = "",
                       pg_options: Any = None, device_id: Any = None,
                       job_id: str | None = None) -> None:
    """Join the job and make its world the default group (see aio.init_process_group).

    ``store``, ``pg_options`` and ``device_id`` are torch's; asyncoll refuses a
    store (it has its own coordinator) and ignores the others.

    Raises:
        ConfigurationError: already initialized, or bad arguments or environment.
        RendezvousError: the coordinator refused this peer, is unreachable, or the
            rendezvous timed out (RendezvousTimeoutError).
    """
    global _loop, _world
    if store is not None:
        raise ConfigurationError("asyncoll does not use a torch Store: pass init_method "
                                 "(env:// or tcp://host:port) instead")
    with _lock:
        if _world is not None:
            raise ConfigurationError("init_process_group was called twice; call "
                                     "destroy_process_group() first")
        if _loop is None:
            _loop = LoopThread()
        _world = _loop.run(aio.init_process_group(backend, init_method, timeout, world_size,
                                                  rank, job_id))


def destroy_process_group(group: AsyncProcessGroup | None = None) -> None:
    """Leave the job (group None) and close its connections; a sub-group is just dropped."""
    global _world
    if group is not None and group is not _world:
        return
    with _lock:
        world, _world = _world, None
        if world is not None and _loop is not None:
            _loop.run(world.destroy())


def is_available() -> bool:
    """Always True: asyncoll needs nothing beyond its Python dependencies."""
    return True


def is_initialized() -> bool:
    """Whether init_process_group has succeeded and not been destroyed."""
    return _world is not None


def get_rank(group: AsyncProcessGroup | None = None) -> int:
    """This process's rank in ``group`` (the world by default); -1 if not a member."""
    return _group(group).rank


def get_world_size(group: AsyncProcessGroup | None = None) -> int:
    """The number of ranks in ``group``; -1 on a process that is not a member, as torch."""
    resolved = _group(group)
    return resolved.size if resolved.is_member else -1


def get_backend(group: AsyncProcessGroup | None = None) -> str:
    """The backend's name: always "asyncoll"."""
    _group(group)
    return "asyncoll"


def new_group(ranks: Sequence[int] | None = None, timeout: float | timedelta | None = None,
              backend: str | None = None, pg_options: Any = None,
              use_local_synchronization: bool = False, group_desc: str | None = None,
              device_id: Any = None) -> AsyncProcessGroup:
    """Create a group of ``ranks``; every rank of the job must call it, in the same order.

    Returns the group on every rank; on a rank outside it, collectives on it warn
    and do nothing, as torch's do.

    Raises:
        ConfigurationError: bad ranks.
        MismatchError: ranks passed different member lists to the same call.
        RendezvousTimeoutError: a rank did not call it in time.
    """
    group: AsyncProcessGroup = _run(_default().new_group(ranks, timeout))
    return group


def all_reduce(tensor: Any, op: Any = ReduceOp.SUM, group: AsyncProcessGroup | None = None,
               async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` in place across ``group``; every member gets the result.

    Args:
        tensor: a numpy array or CPU torch tensor of a supported dtype.
        op: a ReduceOp (default SUM).
        group: the group (the world by default).
        async_op: return a Work handle instead of blocking.

    Returns:
        None, or a Work when ``async_op`` is True. A process outside ``group``
        gets a warning and None, and its tensor is untouched.

    Raises:
        ConfigurationError: bad tensor or dtype/op pair, before anything is sent.
        CollectiveError: the operation failed (PeerLostError, CollectiveTimeoutError, ...).
    """
    resolved = _group(group)
    if not resolved.is_member:
        _warn_not_member("all_reduce", resolved)
        return None
    return _start(resolved.all_reduce(tensor, op), async_op, f"all_reduce on {resolved!r}")


def barrier(group: AsyncProcessGroup | None = None, async_op: bool = False,
            device_ids: Any = None) -> Work | None:
    """Block until every member of ``group`` has called barrier."""
    resolved = _group(group)
    if not resolved.is_member:
        _warn_not_member("barrier", resolved)
        return None
    return _start(resolved.barrier(), async_op, f"barrier on {resolved!r}")


def _default() -> aio.World:
    world = _world
    if world is None:
        raise ConfigurationError("asyncoll is not initialized: call init_process_group() "
                                 "first")
    return world


def _group(group: AsyncProcessGroup | None) -> AsyncProcessGroup:
    world = _default()
    if group is None:
        return world
    if not isinstance(group, AsyncProcessGroup):
        raise ConfigurationError(f"group must be a group from asyncoll.new_group() or None, "
                                 f"got {type(group).__name__}")
    return group


def _run(coro: Any) -> Any:
    assert _loop is not None  # set by init_process_group
    return _loop.run(coro)


def _start(coro: Any, async_op: bool, what: str) -> Work | None:
    assert _loop is not None  # set by init_process_group
    future = _loop.submit(coro)
    if async_op:
        return Work(future, what)
    future.result()
    return None


def _warn_not_member(what: str, group: AsyncProcessGroup) -> None:
    warnings.warn(f"Running {what} on global rank {group.global_rank} which does not belong "
                  f"to the given group {list(group.ranks)}; the call does nothing.",
                  stacklevel=3)


@atexit.register
def _destroy_at_exit() -> None:
    # A program that forgets destroy_process_group still leaves the job
    # cleanly, so its peers and an embedded coordinator are not left waiting.
    destroy_process_group()
    if _loop is not None:
        _loop.stop()

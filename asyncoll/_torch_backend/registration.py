"""Registering "asyncoll" as a torch.distributed backend, and creating its groups.

``register()`` runs from torch's ``torch.backends`` entry point (at the end of
``import torch``, through ``load()``, which never raises: an exception there
would make ``import torch`` fail) and on ``import asyncoll`` when torch is
already loaded. torch then calls ``create`` for every group with
backend "asyncoll": for the default group (no member list) this process joins
a new asyncoll job, or, with init_method "asyncoll://", runs on the blocking
API's world (asyncoll._torch_backend.elastic); for a sub-group, a group of that
job's ranks is made over its existing connections, on the members only, as
torch calls the creator on members only.
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
import threading
from typing import Any

from asyncoll._torch_backend import elastic
from asyncoll._torch_backend.group_ids import members_only_id

log = logging.getLogger("asyncoll")

BACKEND_NAME = "asyncoll"
#: The oldest torch (major, minor) the backend runs on.
OLDEST_TORCH = (2, 14)
_lock = threading.Lock()
#: The job made for the default torch group, through which sub-groups run.
_default_world: Any = None


def load() -> None:
    """The entry point torch calls while it is imported; never raises."""
    try:
        register()
    except Exception as exc:  # noqa: BLE001 - an error here would break `import torch`
        log.debug("asyncoll could not register its torch.distributed backend: %r", exc)


def register() -> bool:
    """Register the "asyncoll" backend with torch.distributed; True once registered.

    Idempotent; does nothing (False) when torch has no distributed support.
    """
    distributed: Any = sys.modules.get("torch.distributed")
    if distributed is None:
        distributed = importlib.import_module("torch.distributed")
    if not distributed.is_available():
        return False
    backend = distributed.Backend
    if BACKEND_NAME.upper() not in backend._plugins:
        backend.register_backend(BACKEND_NAME, create, extended_api=True, devices=["cpu"])
    elastic.register_init_method()
    return True


def check_torch_version(version: str) -> None:
    """Refuse a torch older than the backend needs.

    Raises:
        RuntimeError: ``version`` is below :data:`OLDEST_TORCH`.
    """
    found = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if found < OLDEST_TORCH:
        raise RuntimeError(
            f"asyncoll's torch backend needs torch {'.'.join(map(str, OLDEST_TORCH))} or "
            f"newer (a c10d Backend written in Python, and torch's reconfigure), and this is "
            f"torch {version}: pip install 'torch>=2.14', or use asyncoll's own API "
            "(import asyncoll as dist), which needs no torch")


def create(options: Any, backend_options: Any = None) -> Any:
    """torch's creator: the ProcessGroup for one group with backend "asyncoll".

    Args:
        options: torch's _DistributedBackendOptions (store, group_rank,
            group_size, timeout, group_id, global_ranks_in_group).
        backend_options: ignored (asyncoll has no per-group options).
    """
    check_torch_version(sys.modules["torch"].__version__)
    from asyncoll._torch_backend.process_group import AsyncollProcessGroup
    from asyncoll._torch_backend.world import TorchWorld
    from asyncoll.group import AsyncProcessGroup

    global _default_world
    timeout = options.timeout.total_seconds()
    members = [int(r) for r in options.global_ranks_in_group]
    with _lock:
        world = _default_world
        if world is not None and world.closed:
            world = _default_world = None
        if not members or world is None:
            blocking_world = elastic.world_of(options.store)
            if blocking_world is not None:
                world = TorchWorld.over(blocking_world, options.group_rank, options.group_size)
            else:
                world = TorchWorld.join(options.store, options.group_rank, options.group_size,
                                        timeout)
            if not members:
                _default_world = world
            made = AsyncollProcessGroup(world, world.world, owns_world=True)
            made._recovery.revocable = bool(getattr(options, "enable_reconfigure", False))
            return made
    if max(members) >= world.world.size or world.world.rank != members[options.group_rank]:
        raise RuntimeError(f"asyncoll cannot make a group of global ranks {members} over its "
                           f"job of {world.world.size} ranks")
    group = AsyncProcessGroup(world.world.session, members_only_id(str(options.group_id)),
                              members, timeout)
    return AsyncollProcessGroup(world, group, owns_world=False)

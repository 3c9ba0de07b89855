"""The blocking API's world: the default group, and resolving `group=` and roots.

The world made by init_process_group is held here (`current`), read
by every blocking call; `collective` is how the blocking functions
hand a group's plan to it to run.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from typing import Any, Union

from asyncoll import aio
from asyncoll._api.work import Work
from asyncoll._runtime.runtime import runtime
from asyncoll.errors import ConfigurationError
from asyncoll.group import WORLD, AsyncProcessGroup, WorldGroup

#: What `group=` accepts: a group, None or `asyncoll.group.WORLD` for the world.
Group = Union[AsyncProcessGroup, WorldGroup, None]

#: The default group (torch's default process group), set by init_process_group.
current: aio.World | None = None


def get_process_group_ranks(group: Group) -> list[int]:
    """The global ranks of `group`'s members, in group-rank order."""
    return list(resolve(group).ranks)


def get_global_rank(group: Group, group_rank: int) -> int:
    """The global rank of `group`'s member `group_rank`."""
    ranks = resolve(group).ranks
    if isinstance(group_rank, bool) or not isinstance(group_rank, int) or not (
            0 <= group_rank < len(ranks)):
        raise ConfigurationError(f"group rank {group_rank!r} is not in the group, whose ranks "
                                 f"are 0 to {len(ranks) - 1}")
    return ranks[group_rank]


def get_group_rank(group: Group, global_rank: int) -> int:
    """The rank within `group` of global rank `global_rank`."""
    ranks = resolve(group).ranks
    if global_rank not in ranks:
        raise ConfigurationError(f"global rank {global_rank!r} is not a member of the group "
                                 f"(global ranks {list(ranks)})")
    return ranks.index(global_rank)


def default() -> aio.World:
    """The default group.

    Raises:
        ConfigurationError: asyncoll is not initialized.
    """
    world = current
    if world is None:
        raise ConfigurationError("asyncoll is not initialized: call init_process_group() "
                                 "first")
    return world


def resolve(group: Group) -> AsyncProcessGroup:
    """The group `group=` names (None and WORLD: the default group).

    Raises:
        ConfigurationError: not initialized, or not a group.
    """
    world = default()
    if group is None or group is WORLD:
        return world
    if not isinstance(group, AsyncProcessGroup):
        raise ConfigurationError(f"group must be a group from asyncoll.new_group() or None, "
                                 f"got {type(group).__name__}")
    return group


def root(group: AsyncProcessGroup, rank: int | None, group_rank: int | None,
         role: str, default: int | None = 0) -> Any:
    """The global rank of a src/dst given either as a global rank or as a group rank.

    Neither given means `default`: global rank 0, as torch, or None for recv.
    """
    if rank is not None and group_rank is not None:
        raise ConfigurationError(f"pass {role} or group_{role}, not both ({role}={rank}, "
                                 f"group_{role}={group_rank})")
    if group_rank is not None:
        return get_global_rank(group, group_rank)
    return default if rank is None else rank


def collective(what: str, group: Group, async_op: bool,
               make: Callable[[AsyncProcessGroup], Awaitable[Any]]) -> Work | None:
    """Check `make(group)` and have the group run it; wait for it unless `async_op`."""
    resolved = resolve(group)
    if not resolved.is_member:
        warn_not_member(what, resolved, stacklevel=4)
        return None
    plan = make(resolved)
    if async_op:
        return Work(resolved.submit([plan], runtime()), f"{what} on {resolved!r}")
    resolved.execute(plan, runtime())
    return None


def warn_not_member(what: str, group: AsyncProcessGroup, stacklevel: int = 3) -> None:
    """Warn, as torch does, that a process outside `group` called `what` on it."""
    warnings.warn(f"Running {what} on global rank {group.global_rank} which does not belong "
                  f"to the given group {list(group.ranks)}; the call does nothing.",
                  stacklevel=stacklevel)

"""torch's ``split_group`` on an asyncoll group: a group of some of its members, made at once.

``dist.split_group(parent_pg, split_ranks)`` calls ``parent_pg.split_group``
on every rank of the parent with the split this rank is in (the first one
when it is in none). A member gets a group of the split's members, in the
split's order, made over the connections the parent already has, without
the coordinator (as torch's sub-groups are: every member names it alike by
torch's hashed group name); a rank in no split gets None, which torch turns
into ``NON_GROUP_MEMBER``. The parent may itself be a sub-group.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from asyncoll._torch_backend.group_ids import members_only_id
from asyncoll.errors import ConfigurationError
from asyncoll.group import AsyncProcessGroup


def split(parent: Any, ranks: list[int], timeout: timedelta | None,
          name: str | None) -> AsyncProcessGroup | None:
    """The asyncoll group of ``ranks`` (ranks of ``parent``, an AsyncollProcessGroup) named
    ``name`` by torch, or None when this rank is not among them.

    Raises:
        ConfigurationError: ``ranks`` is empty, repeats a rank or names one out of range.
    """
    group: AsyncProcessGroup = parent._group
    chosen = [int(r) for r in ranks]
    if not chosen or len(set(chosen)) != len(chosen) or not all(
            0 <= r < group.size for r in chosen):
        raise ConfigurationError(f"split_group cannot make a group of ranks {chosen} of a "
                                 f"group of {group.size}: give distinct ranks from 0 to "
                                 f"{group.size - 1}")
    if group.rank not in chosen:
        return None
    limit = timeout.total_seconds() if timeout is not None else group.timeout
    members = [group.ranks[r] for r in chosen]
    return AsyncProcessGroup(parent._world.world.session,
                             members_only_id(name or ",".join(map(str, chosen))), members,
                             limit)

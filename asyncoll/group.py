"""Group handles: `AsyncProcessGroup` (torch's ProcessGroup) and `WORLD`.

`asyncoll.group.WORLD` is torch's `dist.group.WORLD`. The collectives
themselves live in the group layer (asyncoll._group.group).
"""

from __future__ import annotations

from asyncoll._group.group import WORLD, AsyncProcessGroup, WorldGroup
from asyncoll._group.plan import seconds

__all__ = ["AsyncProcessGroup", "WORLD", "WorldGroup", "seconds"]

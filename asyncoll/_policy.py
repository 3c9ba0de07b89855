"""What the group layer is told by the runtime: how a group chooses its paths and algorithms.

The runtime builds one GroupPolicy from the environment when a process joins a
job (asyncoll._runtime.settings); the group layer reads it from the session it
belongs to (asyncoll._group.context.Membership.policy), and reads no
environment itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from asyncoll._tls.context import Tls

#: Each member's slot in a group's shared-memory arena, by default: at most
#: this, as /dev/shm's room allows (asyncoll._group.arena_path), at least
#: ARENA_SLOT_FLOOR_BYTES.
ARENA_SLOT_BYTES = 8 << 20
#: The slot a group's arena gets by default however little room /dev/shm has.
ARENA_SLOT_FLOOR_BYTES = 1 << 20
#: The largest operation a cross-host group runs over its direct links, by default:
#: no bound beyond what asyncoll._algorithms.selection chooses them for.
LINKS_BYTES = 1 << 62

_NONE_FORCED: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """How this process's groups run their operations, read once by the runtime."""

    #: {collective: algorithm} that ASYNCOLL_ALGORITHM forces.
    forced_algorithms: Mapping[str, str] = field(default_factory=lambda: _NONE_FORCED,
                                                 hash=False)
    #: Each member's slot in a same-host group's arena (0: no arenas; the
    #: runtime sets 0 where shared memory is off or the platform lacks x86's
    #: memory order, see asyncoll._transport.shm.arena).
    arena_slot_bytes: int = ARENA_SLOT_BYTES
    #: Whether each arena's slot is sized to /dev/shm's room when it is made
    #: (between ARENA_SLOT_FLOOR_BYTES and arena_slot_bytes), not exactly
    #: arena_slot_bytes (the user's ASYNCOLL_ARENA_BYTES).
    arena_sized_to_room: bool = True
    #: The largest operation a cross-host group runs in the calling thread over
    #: direct links of its own (0: never; see asyncoll._transport.links).
    links_bytes: int = LINKS_BYTES
    #: Whether a group spanning hosts, several members on some, runs its small
    #: collectives through each host's arena and one member per host
    #: (asyncoll._group.hierarchy), where arenas are on.
    hierarchy: bool = True
    #: TLS on a group's direct links, as on every data connection (None: off).
    tls: Tls | None = field(default=None, compare=False)

"""What the transport is told by the runtime: it reads no environment itself."""

from __future__ import annotations

from dataclasses import dataclass, field

from asyncoll._tls.context import Tls

#: Payloads at least this large go through shared memory by default.
SHM_MIN_BYTES = 64 << 10
#: Ring size per direction of a same-host pair, by default.
SHM_RING_BYTES = 8 << 20
#: Each member's slot in a group's shared-memory arena, by default: at most
#: this, as /dev/shm's room allows (asyncoll._group.arena_path), at least
#: ARENA_SLOT_FLOOR_BYTES.
ARENA_SLOT_BYTES = 8 << 20
#: The slot a group's arena gets by default however little room /dev/shm has.
ARENA_SLOT_FLOOR_BYTES = 1 << 20
#: The largest operation a cross-host group runs over its direct links, by default:
#: no bound beyond what asyncoll._algorithms.selection chooses them for.
LINKS_BYTES = 1 << 62
#: Default bound of the bytes one peer's early frames may hold.
EARLY_LIMIT_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """The data plane's settings, read once by the runtime (asyncoll._runtime.settings)."""

    #: The job's shared secret: data connections must prove it (None: no secret).
    token: bytes | None = None
    #: TLS on every data connection, direct links included (None: off).
    tls: Tls | None = field(default=None, compare=False)
    #: Payloads this large go through shared memory to same-host peers (0: never).
    shm_min_bytes: int = SHM_MIN_BYTES
    #: The ring a sender makes for each same-host peer.
    shm_ring_bytes: int = SHM_RING_BYTES
    #: Reading from a peer pauses while its early frames hold more than this.
    early_limit_bytes: int = EARLY_LIMIT_BYTES
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

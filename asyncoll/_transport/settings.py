"""What the transport is told by the runtime: it reads no environment itself.

How groups use the transport (arenas, direct links, the hierarchy) is the group
layer's policy: asyncoll._policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asyncoll._tls.context import Tls

#: Payloads at least this large go through shared memory by default.
SHM_MIN_BYTES = 64 << 10
#: Ring size per direction of a same-host pair, by default.
SHM_RING_BYTES = 8 << 20
#: Default bound of the bytes one peer's early frames may hold.
EARLY_LIMIT_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """The data plane's settings, read once by the runtime (asyncoll._runtime.settings)."""

    #: The job's shared secret: data connections must prove it (None: no secret).
    token: bytes | None = None
    #: TLS on every connection of the mesh (None: off); a group's direct links get
    #: the same through asyncoll._policy.GroupPolicy.tls.
    tls: Tls | None = field(default=None, compare=False)
    #: Payloads this large go through shared memory to same-host peers (0: never).
    shm_min_bytes: int = SHM_MIN_BYTES
    #: The ring a sender makes for each same-host peer.
    shm_ring_bytes: int = SHM_RING_BYTES
    #: Reading from a peer pauses while its early frames hold more than this.
    early_limit_bytes: int = EARLY_LIMIT_BYTES

"""Keepalive: a frozen or cut-off peer found over the data connections themselves.

A peer whose process is frozen (SIGSTOP, a paused container) or cut off
keeps its connections open: nothing fails, and where no coordinator judges
it (the coordinator is gone, or being reached again), a rank waiting for it
would wait until its operation's deadline. While the layer above asks for
it, each :meth:`Keepalive.tick` probes the peers this rank waits for:

- a peer is *awaited* while a receive or a watch of its frames is pending
  on the loop (its inbox), while sends wait for it to take this rank's
  bytes, or while a wait in another thread (a fast path's, in the calling
  thread) names it (:meth:`Keepalive.note`);
- an awaited peer gets a PING each tick, which it answers with a PONG;
  anything read from it (that PONG, or data) shows it alive and restarts
  its clock;
- an awaited peer from which nothing was read for the deadline since its
  first PING is lost.

Only awaited peers are probed, so a rank pings the few peers its
algorithms wait for, not the whole job. A live peer answers from its event
loop's thread, whatever its calling thread does (computing, or late to the
collective), as it sends the coordinator its heartbeats. A rank that
stopped reading a peer (its inbox of that peer's early frames is full)
would leave that peer's PING unread: it sends a PONG unasked each tick
instead. A peer this rank has no connection to is not judged here: nothing
could be heard from it (the lower rank of a pair dials).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from asyncoll._transport.tcp.peer_state import PeerState
from asyncoll._wire.frames import FrameKind


class Keepalive:
    """The peers one mesh probes, and since when each has been silent."""

    def __init__(self) -> None:
        #: Peers a wait in another thread named, and when it last did (any thread writes).
        self._noted: dict[int, float] = {}
        #: Each peer probed: (when its clock started, its connection's reads then).
        self._probes: dict[int, tuple[float, int]] = {}

    def note(self, peer: int) -> None:
        """A wait outside the loop waits for ``peer`` now; callable from any thread."""
        self._noted[peer] = time.monotonic()

    def stop(self) -> None:
        """Forget every probe: nothing is judged until the next :meth:`tick`."""
        self._probes.clear()

    def tick(self, peers: Mapping[int, PeerState], deadline: float,
             fresh: float) -> list[int]:
        """Probe the awaited peers; return those silent for ``deadline`` seconds.

        ``fresh``: how long (seconds) a note counts as a wait still going on.
        """
        now = time.monotonic()
        noted = set()
        for peer, at in list(self._noted.items()):  # a copy: other threads write it
            if now - at <= fresh:
                noted.add(peer)
            else:
                self._noted.pop(peer, None)
        lost = []
        probes: dict[int, tuple[float, int]] = {}
        for peer, state in peers.items():
            connection = state.connection
            if (connection is None or state.error is not None or state.leaving
                    or not connection.ready.done()):
                continue  # not connected yet, or already failed or saying goodbye
            if not connection.reading:
                connection.send_empty(FrameKind.PONG)
            if peer not in noted and not state.inbox.waited and not connection.stalled:
                continue
            probe = self._probes.get(peer)
            if probe is None or probe[1] != connection.reads:
                probe = (now, connection.reads)
            elif now - probe[0] >= deadline:
                lost.append(peer)
                continue
            probes[peer] = probe
            connection.send_empty(FrameKind.PING)
        self._probes = probes
        return lost

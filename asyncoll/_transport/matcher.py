"""Matcher: one peer's posted receives and early frames, by tag, matched in one place.

Every carrier delivers into one per peer: the mesh's inboxes
(asyncoll._transport.inbox, on the event loop) and a group's direct links
(asyncoll._transport.links, one per member, in the calling thread). The rules
are the same for both:

- a frame whose receive is posted goes to it: the carrier pops the receive
  from ``posted``, by the frame's tag;
- a frame that arrives before its receive is kept (:meth:`keep`), stamped
  with its arrival order across every matcher of the process; a second frame
  with a tag already kept is a protocol error;
- a receive posted takes the frame kept for its tag first (:meth:`take`),
  and only then waits in ``posted``.

What a receive is, and what a frame that does not fit it fails, is the
carrier's: an asyncio future on the loop, a buffer to fill in the calling
thread. The bytes kept are counted (``kept_bytes``), and the frames kept by
every matcher sharing an :class:`EarlyCount`, so that a carrier can bound
them (the inbox does) and ask cheaply whether any frame waits at all.
"""

from __future__ import annotations

import itertools
from typing import Generic, TypeVar

from asyncoll._transport.base import EarlyCount, Tag
from asyncoll.errors import ProtocolError

#: What a posted receive is to the carrier.
R = TypeVar("R")
#: How the carrier holds a frame's fingerprint.
F = TypeVar("F", bound=tuple[int, ...])

#: Arrival stamps of early frames, in arrival order across this process's matchers.
_arrivals = itertools.count()


class Matcher(Generic[R, F]):
    """One peer's posted receives and the frames it sent before them, by tag.

    Args:
        sender: the peer, as an error names it ("rank 3", "member 1").
        count: the count of early frames this matcher adds to.
    """

    def __init__(self, sender: str, count: EarlyCount) -> None:
        self.sender = sender
        #: Receives posted and waiting for their frame.
        self.posted: dict[Tag, R] = {}
        #: Frames that arrived before their receive: (payload, fingerprint, arrival stamp).
        self.kept: dict[Tag, tuple[bytearray, F, int]] = {}
        #: Bytes held by the frames kept.
        self.kept_bytes = 0
        self._count = count

    def keep(self, tag: Tag, payload: bytearray, fingerprint: F) -> int:
        """Keep frame ``tag``, which no receive wanted yet; return its arrival stamp.

        Raises:
            ProtocolError: a frame with this tag is kept already (the peer sent it twice).
        """
        if tag in self.kept:
            raise ProtocolError(f"{self.sender} sent frame {tag} twice")
        stamp = next(_arrivals)
        self.kept[tag] = (payload, fingerprint, stamp)
        self.kept_bytes += len(payload)
        self._count.frames += 1
        return stamp

    def take(self, tag: Tag) -> tuple[bytearray, F, int] | None:
        """The frame kept for ``tag``, no longer kept; None if none is."""
        kept = self.kept.pop(tag, None)
        if kept is not None:
            self.kept_bytes -= len(kept[0])
            self._count.frames -= 1
        return kept

    def drop(self, channel: int) -> None:
        """Forget the frames kept of channel ``channel`` (no receive will want them)."""
        for tag in [tag for tag in self.kept if tag[0] == channel]:
            self.take(tag)

    def early(self, channel: int) -> list[tuple[Tag, F]]:
        """The tags (and fingerprints) of the frames kept of channel ``channel``."""
        if not self.kept:
            return []
        return [(tag, fp) for tag, (_, fp, _) in self.kept.items() if tag[0] == channel]

    @property
    def has_early(self) -> bool:
        """Whether any frame is kept."""
        return bool(self.kept)

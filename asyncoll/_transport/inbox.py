"""Inbox: one peer's receives, and the frames that peer sends, matched on the event loop.

Every carrier of the mesh (a TCP connection's frames, a shared-memory ring's
pieces, the in-memory mesh of the tests) delivers through the inbox of the
peer it carries from: a :class:`~asyncoll._transport.matcher.Matcher` (the
matching rules, which a group's direct links follow too) whose receives are
asyncio futures:

- ``post`` registers a receive, or completes it at once from a frame that
  arrived before it (an *early* frame, kept until its receive is posted);
- ``match`` is called when a frame's header arrives. It returns the receive
  the payload goes to, already failed when the frame does not fit it (the
  carrier then discards the payload), or None: the carrier keeps the payload
  in a buffer of its own and hands it to ``arrived`` once complete, which
  gives it to a receive posted meanwhile or keeps it as an early frame;
- ``watch`` waits for a frame to have arrived without taking it: it resolves
  once the frame is kept early (with its arrival stamp, a number that grows
  with arrival order across every inbox of the process), and cancelling it
  changes nothing. A receive from any of several peers (the group layer's
  ``recv`` without ``src``) watches each and then posts for the first;
- ``fail`` fails every receive and watch, pending and later, of one channel or all.

A frame that does not fit its receive (another fingerprint, another size)
fails that receive with the error the mesh's listener gives for it, as does
waiting for a peer that left the job: the layer above knows what the tag
stands for and words the error; without a listener the inbox words a plain one.

Early frames are bounded while this rank waits for nothing from the peer:
once they hold more than ``limit`` bytes and no receive is posted, the inbox
asks its carrier to stop reading from the peer (``on_full(True)``), and to
go on (``on_full(False)``) once receives have taken enough of them, or as
soon as a receive (or a watch) is posted: its frame may be behind the early ones, and a
connection delivers in order, so holding back then could only deadlock. A
peer that floods this rank with frames it does not ask for is then slowed
by TCP's flow control (or by its shared-memory ring filling) instead of
growing this process's memory without end. A frame is always read whole
before reading stops, so the bound is ``limit`` plus the frames in flight.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from asyncoll._transport.base import Consumer, Listener, Tag, consume_into
from asyncoll._transport.base import EarlyCount
from asyncoll._transport.matcher import Matcher
from asyncoll._transport.settings import EARLY_LIMIT_BYTES
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import AsyncollError, MismatchError

log = logging.getLogger("asyncoll.transport")

__all__ = ["EarlyCount", "Inbox", "Receive"]


@dataclass(slots=True, eq=False)
class Receive:
    """A posted receive: where the payload goes, and who waits for it."""

    tag: Tag
    out: memoryview
    future: asyncio.Future[None]
    fingerprint: Fingerprint
    #: Takes the payload instead of ``out`` (see Mesh.recv_into), if any.
    consume: Consumer | None

    @property
    def failed(self) -> bool:
        """Whether the receive ended before its payload did (failed or cancelled)."""
        return self.future.done()

    def put(self, offset: int, data: memoryview) -> bool:
        """Deliver ``data`` at ``offset`` of the payload; False once the receive has ended."""
        if self.future.done():
            return False
        if self.consume is None:
            self.out[offset:offset + data.nbytes] = data
            return True
        return consume_into(self.consume, offset, data, self.future)

    def complete_in_place(self) -> None:
        """The whole payload was written into ``out``: hand it on, and resolve."""
        if self.future.done():
            return
        if self.consume is None or consume_into(self.consume, 0, self.out, self.future):
            self.future.set_result(None)

    def finish(self) -> None:
        """Every part was delivered with :meth:`put`: resolve."""
        if not self.future.done():
            self.future.set_result(None)


class Inbox(Matcher[Receive, Fingerprint]):
    """The receives posted for one peer, its early frames, and their matching."""

    def __init__(self, peer: int, listener: Callable[[], Listener | None],
                 limit: int = EARLY_LIMIT_BYTES, count: EarlyCount | None = None) -> None:
        super().__init__(f"rank {peer}", count if count is not None else EarlyCount())
        self.peer = peer
        #: The mesh's listener of the moment (None: none yet), which words the errors.
        self._listener = listener
        #: Early frames held beyond this many bytes stop reading from the peer.
        self.limit = limit
        #: Matched receives whose payload is arriving.
        self._filling: dict[Tag, Receive] = {}
        #: Watches of frames not yet here (see watch).
        self._watches: dict[Tag, list[asyncio.Future[int]]] = {}
        self._full = False
        #: The peer failed: every receive, pending and later, fails with this.
        self.error: AsyncollError | None = None
        self._failed_channels: dict[int, AsyncollError] = {}
        #: Told of every frame kept early, so the layer above can check it.
        self.on_early: Callable[[int, Tag, Fingerprint], None] | None = None
        #: Told to stop (True) or resume (False) reading from the peer.
        self.on_full: Callable[[bool], None] | None = None

    # -- receives -------------------------------------------------------------------------

    def post(self, tag: Tag, out: memoryview, fingerprint: Fingerprint,
             consume: Consumer | None) -> asyncio.Future[None]:
        """Receive frame ``tag`` into ``out`` (or to ``consume``); done when it is there."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        kept = self.take(tag) if self.kept else None
        if kept is not None:
            payload, theirs, _ = kept
            if self._full:
                self._update_flow()
            receive = Receive(tag, out, future, fingerprint, consume)
            if self._fits(receive, len(payload), theirs) and receive.put(
                    0, memoryview(payload)):
                receive.finish()
            return future
        error = self.error or self._failed_channels.get(tag[0])
        if error is not None:
            future.set_exception(error)
            return future
        self.posted[tag] = Receive(tag, out, future, fingerprint, consume)
        future.add_done_callback(lambda done: self._forget(tag, done))
        if self._full:
            self._update_flow()
        return future

    def watch(self, tag: Tag) -> asyncio.Future[int]:
        """A future resolved with frame ``tag``'s arrival stamp once it is kept early.

        It takes nothing: a receive posted for ``tag`` afterwards gets the frame,
        and cancelling the watch leaves everything as it was. It fails as a
        receive of ``tag`` would. A receive posted for ``tag`` while it is
        watched takes the frame before it is kept, and the watch never resolves.
        """
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        kept = self.kept.get(tag)
        if kept is not None:
            future.set_result(kept[2])
            return future
        error = self.error or self._failed_channels.get(tag[0])
        if error is not None:
            future.set_exception(error)
            return future
        self._watches.setdefault(tag, []).append(future)
        future.add_done_callback(lambda done: self._unwatch(tag, done))
        if self._full:
            self._update_flow()
        return future

    def match(self, tag: Tag, nbytes: int, fingerprint: Fingerprint) -> Receive | None:
        """The receive a frame whose header just arrived goes to, or None: keep it.

        A receive returned already failed (the frame's operation or size does
        not fit it) wants none of the payload: the carrier discards it.
        """
        receive = self.posted.pop(tag, None)
        if receive is None or receive.future.done():
            return None
        if self._fits(receive, nbytes, fingerprint):
            self._filling[tag] = receive
        return receive

    def arrived(self, tag: Tag, payload: bytearray, fingerprint: Fingerprint) -> None:
        """A payload no receive wanted at its header is complete: deliver it, or keep it.

        Raises:
            ProtocolError: the peer sent this frame twice.
        """
        receive = self.match(tag, len(payload), fingerprint)
        if receive is not None:
            if receive.put(0, memoryview(payload)):
                receive.finish()
            return
        if self.error is not None or tag[0] in self._failed_channels:
            return  # nobody will ever want it
        stamp = self.keep(tag, payload, fingerprint)
        for watch in self._watches.pop(tag, ()):
            if not watch.done():
                watch.set_result(stamp)
        if self.kept_bytes > self.limit:
            self._update_flow()
        if self.on_early is not None:
            self.on_early(self.peer, tag, fingerprint)

    # -- failure --------------------------------------------------------------------------

    def fail(self, error: AsyncollError, channel: int | None = None) -> None:
        """Fail every receive and watch of channel ``channel`` (None: of the peer), pending
        and later.

        The first error is sticky: later receives fail with it. A channel's early
        frames are dropped (never wanted now); the peer's are kept, since a
        receive may still be posted for a frame that came before its failure.
        """
        if channel is None:
            self.error = self.error or error
            error = self.error
        else:
            error = self._failed_channels.setdefault(channel, error)
        for receives in (self.posted, self._filling):
            for tag, receive in list(receives.items()):
                if channel is None or tag[0] == channel:
                    del receives[tag]
                    if not receive.future.done():
                        receive.future.set_exception(error)
        for tag, watches in list(self._watches.items()):
            if channel is None or tag[0] == channel:
                del self._watches[tag]
                for watch in watches:
                    if not watch.done():
                        watch.set_exception(error)
        if channel is not None:
            self.drop(channel)
            if self._full:
                self._update_flow()

    def departed(self, hostname: str) -> AsyncollError:
        """The error of waiting for this peer, on ``hostname``, once it left the job."""
        listener = self._listener()
        if listener is not None:
            return listener.peer_departed(self.peer, hostname)
        return MismatchError(f"rank {self.peer} on {hostname} left the job while this rank "
                             "still expected data from it")

    # -- internals --------------------------------------------------------------------------

    def _fits(self, receive: Receive, nbytes: int, fingerprint: Fingerprint) -> bool:
        if fingerprint != receive.fingerprint:
            receive.future.set_exception(self._mismatched(receive, fingerprint))
            return False
        if nbytes != receive.out.nbytes:
            receive.future.set_exception(self._wrong_size(receive, nbytes))
            return False
        return True

    def _mismatched(self, receive: Receive, theirs: Fingerprint) -> AsyncollError:
        listener = self._listener()
        if listener is not None:
            return listener.frame_mismatched(self.peer, receive.tag, receive.fingerprint,
                                             theirs)
        mine, sent = receive.fingerprint.fields(), theirs.fields()
        differences = "; ".join(f"{field}: {value} here, {sent[field]} on rank {self.peer}"
                                for field, value in mine.items() if value != sent[field])
        return MismatchError(f"rank {self.peer} sent frame {receive.tag} with another "
                             f"fingerprint than this receive's ({differences})")

    def _wrong_size(self, receive: Receive, nbytes: int) -> AsyncollError:
        listener = self._listener()
        if listener is not None:
            return listener.frame_wrong_size(self.peer, receive.tag, nbytes,
                                             receive.out.nbytes)
        return MismatchError(f"rank {self.peer} sent {nbytes} bytes as frame {receive.tag}; "
                             f"this receive expected {receive.out.nbytes}")

    @property
    def waited(self) -> bool:
        """Whether a receive or a watch of this peer's frames is pending."""
        return bool(self.posted or self._filling or self._watches)

    def _update_flow(self) -> None:
        """Stop reading while early frames are over the bound and nothing is awaited."""
        waited = self.waited
        full = self.kept_bytes > self.limit and not waited and self.error is None
        if full == self._full:
            return
        self._full = full
        if full:
            log.info("rank %d has sent %d bytes that no receive here has asked for yet "
                     "(more than ASYNCOLL_MAX_EARLY_BYTES=%d); reading from it waits for a "
                     "receive", self.peer, self.kept_bytes, self.limit)
        if self.on_full is not None:
            self.on_full(full)

    def _forget(self, tag: Tag, done: asyncio.Future[None]) -> None:
        for receives in (self.posted, self._filling):
            receive = receives.get(tag)
            if receive is not None and receive.future is done:
                del receives[tag]
        if self.kept_bytes > self.limit:
            self._update_flow()


    def _unwatch(self, tag: Tag, done: asyncio.Future[int]) -> None:
        watches = self._watches.get(tag)
        if watches is not None and done in watches:
            watches.remove(done)
            if not watches:
                del self._watches[tag]
        if self.kept_bytes > self.limit:
            self._update_flow()

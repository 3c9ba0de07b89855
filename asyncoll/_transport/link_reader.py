"""RecordReader: the records arriving on a group's direct links, read, cut and matched.

The receiving side of DirectLinks (asyncoll._transport.links): what each
connection's socket holds is read into its peer's buffer, cut into records
(frames of the mesh's wire format, asyncoll._wire.frames), and each record
goes to the receive posted for it in its peer's
:class:`~asyncoll._transport.matcher.Matcher`, or is kept there until one is.
Every record is checked against the operation now running, as it arrives:
one of an operation already over, or with another fingerprint, is a
mismatch. An ABORT record fails the operation it names, or is kept for it
if this member has yet to run it.

Which connection to read, and when, is the links' business; so are the
sockets themselves (asyncoll._transport.link_connections).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._transport.link_connections import (
    READ_BYTES,
    WOULD_BLOCK,
    Connections,
    Peer,
    pending,
)
from asyncoll._transport.link_errors import LinkAborted, LinkLost, LinkMismatch
from asyncoll._wire.frames import (
    HEADER_FIELDS,
    MAGIC,
    NO_FINGERPRINT,
    Fingerprint,
    FrameKind,
    check_fields,
    decode_abort,
)

# Module constants: reading an Enum member off its class costs 0.2 us a time.
_DATA, _ABORT = int(FrameKind.DATA), int(FrameKind.ABORT)


class RecordReader:
    """Reads, cuts and matches the records of one member's connections.

    Args:
        connections: the member's connections (the reader identifies accepted
            ones by their greeting, and tells them which ones ended).
    """

    def __init__(self, connections: Connections) -> None:
        self._connections = connections
        #: The operation now running and its fingerprint, which every record must carry
        #: (the links set them: DirectLinks.stamp).
        self.operation = 0
        self.fingerprint: Fingerprint = NO_FINGERPRINT
        #: The receives of this operation completed, as (member, step); those still
        #: waiting are in each peer's matcher.
        self.done: set[tuple[int, int]] = set()
        #: An ABORT for an operation after the one now running, kept until it runs.
        self.later: LinkAborted | None = None

    def read(self, peer: Peer) -> None:
        """Read what ``peer``'s socket holds (poll said it holds something, or a wait
        looks before it polls), record by record.

        Bytes go into the peer's read buffer with one recv, and records are cut
        from it; a payload larger than the buffer is read straight into its
        destination. Only a recv that filled the buffer is followed by another,
        so a wait costs one system call per arrival, not an EAGAIN as well.
        """
        if peer.index < 0:
            identified = self._connections.identify(peer)
            if identified is None:
                return
            peer = identified
        sock = peer.sock
        assert sock is not None
        while True:
            self._parse(peer)
            target = peer.target
            try:
                if target is not None and target.nbytes - peer.target_got > READ_BYTES:
                    got = sock.recv_into(target[peer.target_got:])
                    if got == 0:
                        self._connections.ended(peer, "was closed by the peer")
                        return
                    peer.target_got += got
                    if peer.target_got == target.nbytes:
                        self._finish_record(peer)
                    if not pending(sock):
                        return
                    continue
                if peer.start:
                    leftover = peer.end - peer.start
                    peer.buffer[:leftover] = peer.buffer[peer.start:peer.end]
                    peer.start, peer.end = 0, leftover
                got = sock.recv_into(peer.view[peer.end:])
            except WOULD_BLOCK:
                return
            except OSError as exc:
                self._connections.ended(peer, f"broke: {exc}")
                return
            if got == 0:
                self._connections.ended(peer, "was closed by the peer")
                return
            peer.end += got
            if peer.end < len(peer.buffer) and not pending(sock):
                self._parse(peer)
                return

    def fill(self, index: int, out: memoryview, fingerprint: tuple[int, ...],
             payload: bytearray | memoryview) -> None:
        """Copy a record kept aside into its receive, once it is checked like any other."""
        if fingerprint != self.fingerprint or len(payload) != out.nbytes:
            raise LinkMismatch(index, fingerprint, len(payload), self.operation)
        out[:] = payload

    def check_early(self, peers: Iterable[Peer]) -> None:
        """Raise LinkMismatch for a record kept early that this operation cannot take,
        or the ABORT kept for it.

        A record that came before this member began the operation it was sent
        for is checked here, at the operation's first wait: the member may wait
        for someone else and never post its receive. A record of an operation
        already over was never taken: its sender ran something else then.
        """
        later = self.later
        if later is not None and later.operation <= self.operation:
            self.later = None
            raise later
        for peer in peers:
            for (_, operation, _), (payload, fingerprint, _) in peer.kept.items():
                if operation < self.operation or (operation == self.operation and
                                                  fingerprint != self.fingerprint):
                    raise LinkMismatch(peer.index, fingerprint, len(payload), operation)

    def _parse(self, peer: Peer) -> None:
        """Cut the records (and parts of payloads) the read buffer holds."""
        buffer = peer.buffer
        while True:
            if peer.target is None:
                if peer.end - peer.start < HEADER_FIELDS.size:
                    return
                header = HEADER_FIELDS.unpack_from(buffer, peer.start)
                peer.start += HEADER_FIELDS.size
                self._start_record(peer, header)
                continue
            target = peer.target
            take = min(peer.end - peer.start, target.nbytes - peer.target_got)
            if take:
                target[peer.target_got:peer.target_got + take] = \
                    buffer[peer.start:peer.start + take]
                peer.start += take
                peer.target_got += take
            if peer.target_got < target.nbytes:
                return
            self._finish_record(peer)

    def _start_record(self, peer: Peer, header: tuple[Any, ...]) -> None:
        """Decode a header; point the peer at where its payload goes."""
        if header[1] != PROTOCOL_VERSION or header[0] != MAGIC:
            check_fields(header)  # raises: not this protocol's frame
        kind, step, operation, nbytes = header[2], header[5], header[6], header[7]
        fingerprint = header[8:14]
        if kind != _DATA:
            if kind != _ABORT:
                raise LinkLost(peer.index, f"sent a frame of kind {kind}, not a link's record")
            peer.aborted = operation
            peer.target = memoryview(bytearray(nbytes))
            peer.target_got = 0
            if nbytes == 0:
                self._finish_record(peer)
            return
        tag = (0, operation, step)
        posted = peer.posted.get(tag) if operation == self.operation else None
        if posted is not None:
            if fingerprint != self.fingerprint or nbytes != posted.nbytes:
                raise LinkMismatch(peer.index, fingerprint, nbytes, operation)
            peer.target = posted
        else:
            # A record of this operation must carry its fingerprint, posted or not
            # (yet); one of an operation already over, or a step already received,
            # was sent by a member that ran something else.
            if operation < self.operation or (operation == self.operation and (
                    (peer.index, step) in self.done or fingerprint != self.fingerprint)):
                raise LinkMismatch(peer.index, fingerprint, nbytes, operation)
            peer.target = memoryview(bytearray(nbytes))
        peer.key = tag
        peer.fingerprint = fingerprint
        peer.target_got = 0
        if nbytes == 0:
            self._finish_record(peer)

    def _finish_record(self, peer: Peer) -> None:
        target, peer.target = peer.target, None
        assert target is not None
        if peer.aborted is not None:
            code, rank, message = decode_abort(bytes(target))
            aborted = LinkAborted(peer.index, peer.aborted, code, rank, message)
            peer.aborted = None
            if aborted.operation > self.operation:
                # Given up on an operation this member has yet to run (the sender
                # finished this one): it fails that one, at its first wait.
                self.later = self.later or aborted
                return
            raise aborted
        tag = peer.key
        posted = peer.posted.pop(tag, None) if tag[1] == self.operation else None
        if posted is None:
            # Not posted at its header, it went to a bytearray of its own; or (abort
            # forgot its receive meanwhile) to that receive's memory: copied then.
            own = target.obj
            peer.keep(tag, own if isinstance(own, bytearray) and len(own) == target.nbytes
                      else bytearray(target), peer.fingerprint)
            return
        if posted is not target:
            # It began arriving before its receive was posted (while this member
            # was still in an earlier operation): it went to a buffer of its own.
            self.fill(peer.index, posted, peer.fingerprint, target)
        self.done.add((peer.index, tag[2]))
